"""The Ray sweep backend: every unit a Ray task, on a local Ray or on a cluster (``--backend ray``).

Each unit is one task asking for ``runtime.num_cpus`` CPUs and ``runtime.num_gpus`` GPUs (fractions
share a GPU), so Ray packs units onto the cluster's nodes. A task rebuilds its variant and dataset
from plain data, runs the unit, writes the unit's checkpoints under the run folder — which must be on
a filesystem every node reaches (NFS, a cluster's shared home or scratch) — and streams its rows
and finished tables back to this process through a Ray queue; this process owns the run folder and
writes them. A task lost with its worker or node is started again and resumes from the unit's last
checkpoint; a unit's own Python error is reported without retrying (it would fail again).

Ray is an optional extra: ``pip install 'turnout[ray]'``. Cluster recipe (docs/scale.md, "Sweeps:
several cores, Ray, grids"): ``ray start --head`` on one node, ``ray start --address HEAD:6379`` on the others, then
``turnout run EXP.yaml --backend ray --address HEAD:6379`` from a node that sees the run folder.
"""

from __future__ import annotations

import os

from ..core.errors import ConfigError
from .sweep import Backend, QueueSink, SweepState, UnitJob, backend, execute, longest_first, rebuild
from .unit import StopFlag

try:
    import ray
    from ray.util.queue import Queue as RayQueue
except ImportError:  # pragma: no cover - exercised by the "Ray missing" test in a subprocess
    raise ConfigError("--backend", "ray", "needs Ray, which is not installed: pip install 'turnout[ray]'") from None

#: environment variables a unit's worker must see as this process does (test crash points)
FORWARDED_ENV = ("TURNOUT_CRASH_AT", "TURNOUT_CRASH_ONCE", "TURNOUT_HOLD_AT", "TURNOUT_HOLD_FILE")


@ray.remote
class _StopSignal:
    """One flag the owner sets and every running unit reads after each round."""

    def __init__(self):
        self.flag = False

    def set(self) -> None:
        self.flag = True

    def is_set(self) -> bool:
        return self.flag


class _RemoteEvent:
    """The event interface :class:`~turnout.runs.unit.StopFlag` reads, answered by the owner's flag actor."""

    def __init__(self, actor):
        self.actor = actor

    def is_set(self) -> bool:
        return bool(ray.get(self.actor.is_set.remote()))

    def set(self) -> None:
        self.actor.set.remote()


def _run_unit(job: UnitJob, queue, stop_actor) -> tuple[bool, int, int]:
    outcome = execute(job, QueueSink(queue.put, job.key), StopFlag(_RemoteEvent(stop_actor)))
    return outcome.done, outcome.next_round, outcome.rounds


#: failures of the machinery (a killed worker, a lost node), retried from the unit's checkpoint
_LOST = tuple(getattr(ray.exceptions, name) for name in ("WorkerCrashedError", "NodeDiedError", "ObjectLostError",
                                                         "OwnerDiedError", "ActorDiedError", "LocalRayletDiedError")
              if hasattr(ray.exceptions, name))


@backend("ray")
class RayBackend(Backend):
    """Units as Ray tasks with declared resources; rows stream back through a Ray queue."""

    def __init__(self, jobs: int = 1, retries: int = 2, address: str | None = None, **_):
        self.retries, self.address = int(retries), address

    def run(self, jobs: list[UnitJob], state: SweepState, stop: StopFlag, progress, resolve=rebuild) -> None:
        started = not ray.is_initialized()
        if started:
            env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False, configure_logging=False,
                     runtime_env={"env_vars": env} if env else None)
        try:
            self._run(jobs, state, stop, progress)
        finally:
            if started:
                ray.shutdown()

    def _run(self, jobs: list[UnitJob], state: SweepState, stop: StopFlag, progress) -> None:
        queue = RayQueue(actor_options={"num_cpus": 0})
        stop_actor = _StopSignal.options(num_cpus=0).remote()
        by_key = {j.key: j for j in jobs}
        attempts = {j.key: 0 for j in jobs}
        inflight = {}

        def submit(job: UnitJob) -> None:
            attempts[job.key] += 1
            task = ray.remote(_run_unit).options(num_cpus=job.num_cpus, num_gpus=job.num_gpus, max_retries=0)
            inflight[task.remote(job, queue, stop_actor)] = job

        def drain() -> None:
            while not queue.empty():
                for key, kind, payload in queue.get_nowait_batch(queue.qsize()):
                    state.apply(key, kind, payload)
                    self._progress(progress, by_key[key], kind, payload)

        for job in longest_first(jobs):  # Ray starts tasks roughly in submission order
            submit(job)
        stopping = False
        while inflight:
            if stop.requested and not stopping:
                stop_actor.set.remote()
                stopping = True
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.2)
            drain()
            for ref in ready:
                job = inflight.pop(ref)
                try:
                    done, next_round, rounds = ray.get(ref)
                except _LOST as exc:
                    if attempts[job.key] <= self.retries and not stopping:
                        submit(job)  # resumes from the unit's last checkpoint
                    else:
                        state.failed[job.key] = (f"its Ray worker was lost {attempts[job.key]} times "
                                                 f"({type(exc).__name__}); the unit's last checkpoint is kept")
                    continue
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                    state.failed[job.key] = f"{type(cause).__name__}: {' '.join(str(cause).split())[:300]}"
                    continue
                drain()
                if not done:
                    state.stopped[job.key] = (next_round, rounds)
