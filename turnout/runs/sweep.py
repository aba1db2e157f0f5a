"""Run the units of one or more experiments — in this process, in local worker processes, or on Ray.

A sweep is every (variant, seed) unit of every experiment it was given. Units are independent by
construction, so they can run anywhere, in any order, on any number of workers: each unit's
numbers are a pure function of its resolved config, its seed and the code. The process that owns
the run folders (this one) dispatches pending units to a backend and applies what the workers
send back — rows, finished tables — through each unit's :class:`~turnout.runs.unit.FileSink`; workers
write only their unit's checkpoints. When every unit of an experiment is done its tables are
built (:func:`turnout.runs.experiment.finalize`, after :func:`turnout.runs.experiment.run_sweep`), so the
output does not depend on the backend or the number of workers.

Backends (:data:`BACKENDS`): ``inline`` (this process; ``--jobs 1``), ``processes`` (``--jobs N``
worker processes started from turnout's own entry point, :mod:`turnout.core.worker_process`) and ``ray``
(``--backend ray``: one Ray task per unit). A worker that
dies fails only its unit, which is retried from its last checkpoint up to ``retries`` times, then
reported; the rest of the sweep goes on.
"""

from __future__ import annotations

import json
import os
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from ..core import faults
from ..core.errors import TurnoutError
from ..core.observers import Observer
from ..core.worker_process import StopEvent, WorkerProcess
from ..sim.composition import expand
from .plan import Unit, centralized_reference, data_key, units_of
from .rundir import BASELINES
from .unit import FileSink, StopFlag, is_done, run_unit

#: name → backend class; ``--backend NAME`` picks one
BACKENDS: dict[str, type] = {}


def backend(name: str):
    def deco(cls):
        BACKENDS[name] = cls
        cls.name = name
        return cls

    return deco


@dataclass(frozen=True)
class UnitJob:
    """Everything a worker needs to run one unit, as plain data (it rebuilds the rest itself)."""

    key: tuple[int, int]  # (experiment index, unit index): unique within the sweep
    experiment: dict  # {"raw": ..., "overrides": ...}: what the variant is expanded from
    variant: str
    seed: int
    unit_dir: str  # where the unit's checkpoints live (reachable by every worker)
    torch_threads: int
    label: str  # "experiment/variant seed s", for messages
    num_cpus: float = 1.0  # what a Ray task asks for
    num_gpus: float = 0.0
    work: float = 0.0  # relative cost (:func:`estimated_work`): workers take the longest units first


def estimated_work(exp, dataset) -> float:
    """A unit's relative cost: rounds × clients per round × samples each client trains on per round.

    Workers take pending units longest first (the LPT rule), so a sweep does not end on one long
    unit while the other workers idle: the quickstart's K = 20 units train four times as many
    clients as its K = 5 units. Rough by design — only the order units start in depends on it, never their numbers.
    """
    cfg, train = exp.config, exp.train
    k = getattr(exp["selector"].cfg, "clients_per_round", None) or 1  # every built-in selector has it; a plugin may not
    if train.local_epochs is not None:  # epochs over a client's rows (the mean client's)
        samples = train.local_epochs * len(dataset.y_train) / max(1, dataset.num_clients)
    else:
        samples = (train.local_steps or 10) * train.batch_size
    return float(cfg.rounds) * k * samples


def longest_first(jobs: list[UnitJob]) -> list[UnitJob]:
    """``jobs`` by decreasing estimated work (stable: equal units keep their sweep order)."""
    return sorted(jobs, key=lambda j: -j.work)


@dataclass
class SweepState:
    """The owner's view: a sink per unit, what finished, what failed (with why)."""

    sinks: dict[tuple[int, int], FileSink]
    done: set = field(default_factory=set)
    failed: dict[tuple[int, int], str] = field(default_factory=dict)
    stopped: dict[tuple[int, int], tuple] = field(default_factory=dict)  # unit → (next round, rounds) at its checkpoint

    def apply(self, key, kind: str, payload: Any) -> None:
        """A worker's message: ``begin`` (identity, rows), ``row`` (row), ``finish`` (clients, summary)."""
        sink = self.sinks[key]
        if kind == "begin":
            sink.begin(*payload)
        elif kind == "row":
            sink.row(payload)
        elif kind == "finish":
            sink.finish(*payload)
            self.done.add(key)


class UnitsFailed(TurnoutError):
    """Some units could not be run; the others are done and kept."""

    def __init__(self, failed: dict[str, str], folders: list[Path]):
        self.failed = failed
        names = "; ".join(f"{label}: {why}" for label, why in list(failed.items())[:3])
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        where = ", ".join(str(f) for f in folders)
        super().__init__(f"{len(failed)} unit(s) failed — {names}{more}; finished units are kept in {where}: "
                         "fix the cause and run `turnout resume` on it")


class BackendLost(TurnoutError):
    """The machinery units run on went away as a whole (a Ray cluster's head); every unit's rows and last
    checkpoint in the run folder are kept, so the run resumes."""

    def __init__(self, why: str, folders: list[Path] | None = None):
        self.why = why
        where = ", ".join(str(f) for f in folders or [])
        super().__init__(why if not where else f"{why}; the run folder is intact: resume it with `turnout resume "
                                               f"{where}` (on this machine, or add --backend ray --address "
                                               "HEAD:PORT once the cluster is back)")


# ---- running a unit in a worker ---------------------------------------------------------------
#: A worker's caches. The owner has validated every variant and dataset before dispatching, so a
#: worker only rebuilds: the experiment's variants once, and just the dataset of its unit's seed.
_VARIANTS: dict[str, list] = {}  # experiment (as JSON) → its variants (a sweep has a handful of experiments)
_DATASETS: "OrderedDict[tuple[str, int], Any]" = OrderedDict()  # (data config, seed) → dataset, newest last
#: a worker's centralised baselines, kept across its units: computed once per population (data, model, seed)
_CENTRAL: dict = {}
#: datasets a worker keeps for its next units (the newest is always kept): units of one seed share one
DATASET_CACHE_BYTES = 256 * 2**20


def _held_bytes(dataset) -> int:
    return sum(v.nbytes for v in vars(dataset).values() if hasattr(v, "nbytes"))


def rebuild(job: UnitJob):
    """(resolved variant, dataset) of a job, rebuilt from its plain data — what a worker process does."""
    exp_key = json.dumps(job.experiment, sort_keys=True, default=str)
    if exp_key not in _VARIANTS:
        _VARIANTS[exp_key] = expand(job.experiment["raw"], job.experiment["overrides"])
    exp = next(v for v in _VARIANTS[exp_key] if v.variant == job.variant)
    key = (data_key(exp), job.seed)
    if key in _DATASETS:
        _DATASETS.move_to_end(key)
    else:
        comp = exp["data"]
        _DATASETS[key] = comp.cls.build(comp.cfg, job.seed)  # what prepare() built for the owner, bit for bit
        while len(_DATASETS) > 1 and sum(_held_bytes(d) for d in _DATASETS.values()) > DATASET_CACHE_BYTES:
            _DATASETS.popitem(last=False)
    return exp, _DATASETS[key]


def execute(job: UnitJob, sink, stop: StopFlag, observers=(), resolve=rebuild, centralized: dict | None = None):
    """Run one unit: its variant and dataset from ``resolve(job)``; returns its :class:`~.unit.UnitOutcome`."""
    torch.set_num_threads(job.torch_threads)
    exp, data = resolve(job)
    cache = {} if centralized is None else centralized
    shared = Path(job.unit_dir).parents[2] / BASELINES  # the run folder's: one computation for every worker
    return run_unit(exp, data, job.seed, Path(job.unit_dir), sink, stop, list(observers),
                    centralized=lambda: centralized_reference(Unit(0, exp, job.seed), data, cache, shared))


class ApplyingSink:
    """The owner's sink for a unit run in its own process: apply each call at once (and show progress)."""

    def __init__(self, state: "SweepState", key, progress):
        self.state, self.key, self.progress = state, key, progress

    def begin(self, identity: dict, rows: list[dict]) -> None:
        self.state.apply(self.key, "begin", (identity, rows))
        if self.progress is not None:
            self.progress.begin(self.key, len(rows))

    def row(self, row: dict) -> None:
        self.state.apply(self.key, "row", row)
        if self.progress is not None:
            self.progress.round(self.key, row)

    def finish(self, clients: dict, summary: dict) -> None:
        self.state.apply(self.key, "finish", (clients, summary))


class QueueSink:
    """A worker's sink: every call becomes a message ``(key, kind, payload)`` on a queue to the owner."""

    def __init__(self, put: Callable[[tuple], None], key):
        self.put, self.key = put, key

    def begin(self, identity: dict, rows: list[dict]) -> None:
        self.put((self.key, "begin", (identity, rows)))

    def row(self, row: dict) -> None:
        self.put((self.key, "row", row))

    def finish(self, clients: dict, summary: dict) -> None:
        self.put((self.key, "finish", (clients, summary)))


# ---- backends ------------------------------------------------------------------------------------
class Backend(ABC):
    """Runs unit jobs; the owner's :class:`SweepState` receives what they produce."""

    name = "?"

    @abstractmethod
    def run(self, jobs: list[UnitJob], state: SweepState, stop: StopFlag, progress, resolve=rebuild) -> None:
        """Run every job (or stop when ``stop`` is requested, each running unit checkpointed)."""

    def warm(self, units: int) -> None:
        """Start what running ``units`` units will need, while the owner still prepares (default: nothing)."""
        return None

    def close(self) -> None:
        """Let go of whatever :meth:`warm` started and :meth:`run` did not use (default: nothing)."""
        return None

    @staticmethod
    def _progress(progress, job: UnitJob, kind: str, payload) -> None:
        if progress is not None and kind == "row":
            progress.round(job.key, payload)
        elif progress is not None and kind == "begin":
            progress.begin(job.key, len(payload[1]))


@backend("inline")
class InlineBackend(Backend):
    """Every unit in this process, one after the other (``--jobs 1``): the reference."""

    def __init__(self, jobs: int = 1, retries: int = 0, **_):
        pass

    def run(self, jobs: list[UnitJob], state: SweepState, stop: StopFlag, progress, resolve=rebuild) -> None:
        centralized: dict = {}  # the centralised ceiling is shared by the units of one population
        for i, job in enumerate(jobs):
            if i:
                faults.point("between-units")
            if stop.requested:
                return
            outcome = execute(job, ApplyingSink(state, job.key, progress), stop, resolve=resolve,
                              centralized=centralized)
            if not outcome.done:
                state.stopped[job.key] = (outcome.next_round, outcome.rounds)
                return


def _worker_main(conn, stop_fd: int, parent: int) -> None:
    """A worker process: run the jobs it receives on ``conn`` and report back on it (signals go to the owner).

    Each worker has its own pipe: a worker killed half-way through sending leaves only its own pipe
    broken, never a queue the other workers share. It imports what running a unit needs before it
    waits for its first job, so that start-up overlaps the owner's own preparation.
    """
    import signal
    import traceback

    from ..sim import composition, engine  # noqa: F401  # warm: what the first job needs

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner decides: it checkpoints through stop_fd
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop = StopFlag(StopEvent(stop_fd))

    class _OrphanGuard(Observer):
        """Stops the unit (with a checkpoint) when the owner process is gone."""

        def after_round(self, round, record):
            if os.getppid() != parent:
                stop.request("the run's owner process exited")
            return False

    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            outcome = execute(job, QueueSink(conn.send, job.key), stop, [_OrphanGuard()], centralized=_CENTRAL)
            conn.send((job.key, "exit" if outcome.done else "stopped", (outcome.next_round, outcome.rounds)))
        except (BrokenPipeError, EOFError):
            return
        except Exception as exc:  # a unit's own error: report it, keep serving other units
            text = " ".join(str(exc).split())[:300] or type(exc).__name__
            conn.send((job.key, "error", (f"{type(exc).__name__}: {text}", traceback.format_exc())))


@dataclass
class _Worker:
    process: Any
    conn: Any
    job: UnitJob | None = None
    seen: set = field(default_factory=set)  # (experiment, seed) of the units it ran: it holds their baselines


def next_job(pending: list[UnitJob], seen: set, others: set = frozenset()) -> UnitJob:
    """The job a free worker takes: the longest pending one, preferring among equally long ones a
    population (experiment, seed) the worker already ran — its dataset and centralised baseline are
    cached there. A worker's *first* job is the longest of a population no other worker has taken
    (``others``), when there is one: workers starting together then build different datasets and
    centralised baselines side by side, instead of one waiting on the lock of the other's baseline
    (the work estimates of two seeds' units rarely tie). Only which worker runs a unit depends on
    it, never the unit's numbers."""
    head = pending[0]
    if not seen:
        pick = next((j for j in pending if (j.key[0], j.seed) not in others), head)
    else:
        pick = next((j for j in pending if j.work == head.work and (j.key[0], j.seed) in seen), head)
    pending.remove(pick)
    return pick


@backend("processes")
class ProcessBackend(Backend):
    """``--jobs N`` worker processes, each running one unit at a time with its own torch threads.

    Workers are :class:`~turnout.core.worker_process.WorkerProcess` children (they never import the
    user's script), started by :meth:`warm` as soon as the number of units is known — before the
    owner builds its datasets — and kept for every unit of the sweep: start-up is paid once and
    overlaps the owner's preparation. Never more workers than units.
    """

    def __init__(self, jobs: int = 2, retries: int = 2, **_):
        self.workers, self.retries = max(1, int(jobs)), int(retries)
        self._stop_event = None
        self._warm: list[_Worker] = []

    def _spawn(self) -> _Worker:

        if self._stop_event is None:
            self._stop_event = StopEvent()
        p = WorkerProcess(_worker_main, (self._stop_event.fd, os.getpid()), fds=(self._stop_event.fd,))
        return _Worker(p, p.conn)

    def warm(self, units: int) -> None:
        while len(self._warm) < min(self.workers, int(units)):
            self._warm.append(self._spawn())

    def close(self) -> None:
        self._shutdown(self._warm)
        self._warm = []
        if self._stop_event is not None:
            self._stop_event.close()
            self._stop_event = None

    def run(self, jobs: list[UnitJob], state: SweepState, stop: StopFlag, progress, resolve=rebuild) -> None:
        from multiprocessing.connection import wait

        if self._stop_event is None:

            self._stop_event = StopEvent()
        pending = longest_first(jobs)
        attempts = {j.key: 0 for j in jobs}
        want = min(self.workers, len(jobs))
        workers, self._warm = self._warm[:want], self._warm[want:]
        self._shutdown(self._warm)  # warmed for units that turned out done already
        self._warm = []
        spawn = self._spawn
        workers += [spawn() for _ in range(want - len(workers))]
        stop_event = self._stop_event
        try:
            while pending or any(w.job is not None for w in workers):
                if stop.requested and not stop_event.is_set():
                    stop_event.set()
                    pending.clear()
                for w in workers:
                    if w.job is None and pending and not stop.requested:
                        others = set().union(*(o.seen for o in workers if o is not w))
                        w.job = next_job(pending, w.seen, others)
                        w.seen.add((w.job.key[0], w.job.seed))
                        attempts[w.job.key] += 1
                        w.conn.send(w.job)
                for conn in wait([w.conn for w in workers if w.job is not None], timeout=0.2):
                    w = next(w for w in workers if w.conn is conn)
                    try:
                        key, kind, payload = conn.recv()
                    except (EOFError, OSError):
                        continue  # it died mid-message: handled below once its exit code is in
                    self._handle(w, key, kind, payload, state, progress)
                for i, w in enumerate(workers):
                    if not w.process.is_alive() and w.process.exitcode is not None:
                        self._lost(w, pending, attempts, state)
                        w.conn.close()
                        workers[i] = spawn()
        finally:
            self._shutdown(workers)
            self.close()

    @staticmethod
    def _shutdown(workers: list[_Worker]) -> None:
        """Tell each worker to exit; kill those still there after 10 s."""
        for w in workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        deadline = time.time() + 10
        for w in workers:
            w.process.join(timeout=max(0.0, deadline - time.time()))
            if w.process.is_alive():
                w.process.kill()
            w.conn.close()

    def _handle(self, w: _Worker, key, kind: str, payload, state: SweepState, progress) -> None:
        if kind in ("begin", "row", "finish"):
            state.apply(key, kind, payload)
            self._progress(progress, w.job, kind, payload)
            return
        w.job = None
        if kind == "stopped":
            state.stopped[key] = payload
        elif kind == "error":
            message, tb = payload
            state.failed[key] = message
            unit_dir = state.sinks[key].unit_dir
            unit_dir.mkdir(parents=True, exist_ok=True)
            (unit_dir / "error.log").write_text(tb)

    def _lost(self, w: _Worker, pending: list, attempts: dict, state: SweepState) -> None:
        """A worker that died takes only its unit down: retry it from its checkpoint, or report it."""
        job, w.job = w.job, None
        if job is None:
            return
        if attempts[job.key] <= self.retries:
            pending.insert(0, job)  # resumes from its last checkpoint
        else:
            state.failed[job.key] = (f"its worker died {attempts[job.key]} times (last: "
                                     f"{w.process.describe_exit()}); the unit's last checkpoint is kept")


def pending_jobs(experiments: list, stop: StopFlag) -> tuple[list[UnitJob], dict]:
    """The jobs of every unfinished unit, and a sink for each (``experiments``: (plan, folder, experiment dict))."""
    jobs, sinks = [], {}
    for e, (plan, folder, experiment) in enumerate(experiments):
        for i, unit in enumerate(units_of(plan)):
            d = folder.unit_dir(unit.index, unit.variant, unit.seed)
            if is_done(d):
                continue
            key = (e, i)
            sinks[key] = FileSink(d)
            rc = unit.exp.config.runtime
            jobs.append(UnitJob(key, experiment, unit.variant, unit.seed, str(d), rc.torch_threads,
                                f"{plan.name}/{unit.variant} seed {unit.seed}", rc.num_cpus, rc.num_gpus,
                                estimated_work(unit.exp, plan.dataset_for(unit.exp, unit.seed))))
    return jobs, sinks


def units_in(variants: list) -> int:
    """How many units resolved ``variants`` make: every variant runs every seed."""
    return len(variants) * len(variants[0].config.seeds) if variants else 0
