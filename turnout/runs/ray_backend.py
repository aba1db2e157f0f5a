"""The Ray sweep backend: every unit a Ray task, on a local Ray or on a cluster (``--backend ray``).

Each unit is one task asking for ``runtime.num_cpus`` CPUs and ``runtime.num_gpus`` GPUs (fractions
share a GPU), so Ray packs units onto the cluster's nodes. The Ray *driver* — the process connected to
the cluster, submitting tasks — is a child of this one (:class:`~turnout.core.worker_process.WorkerProcess`),
not this process: Ray ends a driver whose cluster head went away (``Failed to connect to GCS ... The
program will terminate``), and that must not take the run folder's owner with it. So a lost head is
one line here, with every finished row and unit checkpoint kept for ``turnout resume``.

A task rebuilds its variant and dataset from plain data, runs the unit, writes the unit's checkpoints
under the run folder — which must be on a filesystem every node reaches (NFS, a cluster's shared home
or scratch) — and streams its rows and finished tables back through a Ray queue and the driver to this
process, which owns the run folder and writes them. A task lost with its worker or node is started
again and resumes from the unit's last checkpoint; a unit's own Python error is reported without
retrying (it would fail again).

Ray is an optional extra: ``pip install 'turnout[ray]'``. Cluster recipe (docs/scale.md, "Sweeps:
several cores, Ray, grids"): ``ray start --head`` on one node, ``ray start --address HEAD:6379`` on the others, then
``turnout run EXP.yaml --backend ray --address HEAD:6379`` from a node that sees the run folder.
"""

from __future__ import annotations

import os
import signal

from ..core.errors import ConfigError
from ..core.ray_address import check_head
from ..core.worker_process import WorkerProcess
from .sweep import Backend, BackendLost, QueueSink, SweepState, UnitJob, backend, execute, longest_first, rebuild
from .unit import StopFlag

try:
    import ray
    from ray.util.queue import Queue as RayQueue
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
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
    """Units as Ray tasks with declared resources, driven from a child process; rows come back through it."""

    def __init__(self, jobs: int = 1, retries: int = 2, address: str | None = None, **_):
        check_head(address, "--address")  # before any folder is made
        self.retries, self.address = int(retries), address

    def run(self, jobs: list[UnitJob], state: SweepState, stop: StopFlag, progress, resolve=rebuild) -> None:
        # A process already connected to Ray (a notebook's ray.init()) has its driver join that cluster.
        address = self.address or (ray.get_runtime_context().gcs_address if ray.is_initialized() else None)
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        where = f" at {self.address}" if self.address else ""
        driver = WorkerProcess(drive, (jobs, address, self.retries, env, where), name="turnout-ray-driver",
                               echo=False)
        by_key = {j.key: j for j in jobs}
        asked_stop = False
        try:
            while True:
                try:
                    if stop.requested and not asked_stop:
                        driver.conn.send(("stop",))
                        asked_stop = True
                    if not driver.conn.poll(0.2):
                        continue
                    msg = driver.conn.recv()
                except (EOFError, OSError):
                    driver.join(5.0)
                    raise BackendLost(f"--backend ray: the Ray cluster{where} stopped answering (its Ray driver "
                                      f"process {driver.describe_exit()})") from None
                kind = msg[0]
                if kind == "apply":
                    _, key, what, payload = msg
                    state.apply(key, what, payload)
                    self._progress(progress, by_key[key], what, payload)
                elif kind == "failed":
                    state.failed[msg[1]] = msg[2]
                elif kind == "stopped":
                    state.stopped[msg[1]] = msg[2]
                elif kind == "lost":
                    raise BackendLost(msg[1])
                elif kind == "end":
                    return
        finally:
            driver.conn.close()
            driver.join(10.0)
            driver.kill()


def drive(conn, jobs: list[UnitJob], address: str | None, retries: int, env: dict, where: str) -> None:
    """The Ray driver process: connect, run every job as a task, and tell the owner what happens over ``conn``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner turns Ctrl-C into a "stop" message
    ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": env} if env else None)
    try:
        _drive(conn, jobs, retries)
    except ray.exceptions.RayError as exc:
        # A unit's own failures and lost workers are handled per task in _drive; what escapes is the
        # cluster itself failing this driver (its head, or the Ray node it talks to).
        first = " ".join(str(exc).split())
        first = first if len(first) <= 120 else first[:117].rsplit(" ", 1)[0] + " ..."
        conn.send(("lost", f"--backend ray: the Ray cluster{where} stopped answering ({type(exc).__name__}: "
                           f"{first})"))
    else:
        conn.send(("end",))
    finally:
        ray.shutdown()


def _drive(conn, jobs: list[UnitJob], retries: int) -> None:
    # The queue and the stop flag live on this process's node: they hold nothing a unit cannot
    # rebuild, but a worker node that goes away must not take them with it.
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    queue = RayQueue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
    stop_actor = _StopSignal.options(num_cpus=0, scheduling_strategy=here).remote()
    attempts = {j.key: 0 for j in jobs}
    inflight = {}

    def submit(job: UnitJob) -> None:
        attempts[job.key] += 1
        task = ray.remote(_run_unit).options(num_cpus=job.num_cpus, num_gpus=job.num_gpus, max_retries=0)
        inflight[task.remote(job, queue, stop_actor)] = job

    def drain() -> None:
        while not queue.empty():
            for key, kind, payload in queue.get_nowait_batch(queue.qsize()):
                conn.send(("apply", key, kind, payload))

    for job in longest_first(jobs):  # Ray starts tasks roughly in submission order
        submit(job)
    stopping = False
    while inflight:
        if not stopping and conn.poll() and conn.recv() == ("stop",):
            stop_actor.set.remote()
            stopping = True
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.2)
        drain()
        for ref in ready:
            job = inflight.pop(ref)
            try:
                done, next_round, rounds = ray.get(ref)
            except _LOST as exc:
                if attempts[job.key] <= retries and not stopping:
                    submit(job)  # resumes from the unit's last checkpoint
                else:
                    conn.send(("failed", job.key, f"its Ray worker was lost {attempts[job.key]} times "
                                                  f"({type(exc).__name__}); the unit's last checkpoint is kept"))
                continue
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                conn.send(("failed", job.key, f"{type(cause).__name__}: {' '.join(str(cause).split())[:300]}"))
                continue
            drain()
            if not done:
                conn.send(("stopped", job.key, (next_round, rounds)))
