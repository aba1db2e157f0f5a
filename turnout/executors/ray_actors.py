"""Fan a cohort's clients out over Ray actors: many cores, many GPUs, many machines.

For a cohort that outgrows one machine (thousands of clients a round, or a large model), each
actor holds the model and the dataset — put into Ray's object store once per simulation and loaded
by each actor once, so an actor on the driver's node maps it without a copy; actors are started
once and serve simulation after simulation — and trains the clients it is sent with the
sequential executor's trainer on one torch thread and the client's own (seed, "batches", round,
client) stream, so the numbers are bitwise those of ``executor: sequential``, whatever the number
of actors, the nodes or the order they finish. As with the parallel executor, the algorithm's
hooks stay in the driver (:mod:`turnout.executors.cohort`); what runs inside an actor is
:mod:`turnout.executors.ray_trainer`.

What a round costs besides training (measured by ``bench/executors.py --ray``, docs/cluster.md): the
cohort is cut into ``actors × chunks_per_actor`` contiguous chunks of about equal local steps, so an
actor gets one call a round by default, not one per client; the global model travels inside that
call when it is small (at most :data:`INLINE_BYTES`: a Ray object-store round trip to another node
costs ~10 ms, more than copying a small model) and is put into the object store once per round,
for every actor to map, when it is larger.

With ``partial_sums`` (pfl-research's design) the actors keep their clients' reports and the driver
gets one weighted sum per chunk once the round is settled (:class:`RayHeldReports`), where every
component reads the reports through that sum alone (:func:`turnout.sim.work.held_reports`): what
crosses to the driver no longer grows with the cohort, and only the sum's float order changes
(the stated tolerance is in docs/cluster.md); the default stays bitwise.

Where actors train: ``gpus_per_actor > 0`` asks Ray for that share of a GPU per actor
(``0.25``: four actors per GPU) and trains on it; otherwise on the CPU slots
``cpus_per_actor`` asks for. ``runtime.device`` is the driver's device; with CUDA there, set
``gpus_per_actor`` (refused otherwise, naming the fix).

Losing actors (a node removed, a worker killed): training is a pure function of what an actor is
sent, so a lost actor's chunk goes back to the queue and is trained again by whichever actor is
free — the numbers do not change — and a replacement actor is asked for, which Ray starts on any
node with a free slot and which joins as soon as it is up (the round does not wait for it). A chunk
lost more than ``max_restarts`` times, or a round with no actor left and none starting within
``start_timeout_s``, stops the run with one line. The executor joins the Ray this process is
connected to (a sweep's Ray task, a notebook's ``ray.init``), else the cluster at ``address``, else
starts a local Ray for the run and stops it when the run ends.

Ray is an optional extra shared with the sweep backend: ``pip install 'turnout[ray]'``.
"""

from __future__ import annotations

import time
import weakref
from collections import deque

import numpy as np
import torch
from pydantic import Field

from ..algorithms.base import Algorithm
from ..config.base import StrictModel
from ..core.errors import ConfigError
from ..core.ray_address import check_head
from ..core.records import HeldReports
from ..data.federated import FederatedDataset
from ..training.local_sgd import LocalTrainer
from .base import EXECUTORS, ClientBatch, CohortResult, Executor
from .cohort import InOrderUpdates, empty_result, prepare
from .parallel import WorkerError
from .ray_trainer import ClientTrainer, from_wire, to_wire

#: a global model of at most this many bytes travels inside each actor call; a larger one is put into
#: the object store once per round (measured on a two-node local cluster: by value 1.8 ms for 0.5 KB and
#: 3.6 ms for 80 KB, through the object store ~10 ms whatever the size up to 0.8 MB)
INLINE_BYTES = 256 << 10


class RayExecutorConfig(StrictModel):
    actors: int | None = Field(None, ge=1, le=4096, description="actors training clients (default: as many as the "
                                                                "cluster's free CPUs, or GPUs, hold at the per-actor "
                                                                "share)")
    cpus_per_actor: float = Field(1.0, gt=0.0, le=256.0, description="CPU slots each actor asks Ray for")
    gpus_per_actor: float = Field(0.0, ge=0.0, le=16.0, description="GPU share each actor asks for (0.25: four "
                                                                    "actors per GPU); > 0 trains on that GPU")
    chunks_per_actor: int = Field(1, ge=1, le=1000, description="calls each actor gets a round (the cohort is cut "
                                                               "into actors × this many chunks of about equal local "
                                                               "steps; more balance uneven clients, fewer cost less)")
    max_restarts: int = Field(2, ge=0, le=100, description="times a chunk of clients is trained again after its "
                                                           "actor was lost (a replacement actor is started; results "
                                                           "do not change)")
    start_timeout_s: float = Field(120.0, gt=0.0, le=86400.0, description="seconds the first round waits for "
                                                                          "the actors to start (those that have "
                                                                          "not join later), and a round with no "
                                                                          "live actor waits for a replacement")
    address: str | None = Field(None, description="Ray cluster to join (HOST:PORT or ray://HOST:PORT) when this "
                                                  "process is not connected yet; default: start a local Ray")
    partial_sums: bool = Field(False, description="keep each client's report on the actor that trained it and "
                                                  "send back one weighted sum per chunk instead of every end point; "
                                                  "changes only the sum's float order (tolerance: docs/cluster.md), "
                                                  "and only where the algorithm, compressor and selector read the "
                                                  "reports through that sum alone (else off, said in summary.json)")


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("executor.name", "ray", "needs Ray, which is not installed: pip install 'turnout[ray]'") \
            from None
    return ray


def balanced_chunks(steps: np.ndarray, parts: int) -> list[range]:
    """Cut rows ``0..len(steps)`` into ``min(parts, len(steps))`` contiguous, non-empty ranges of about equal
    total ``steps``: each cut falls at the row boundary nearest to its share of the total.

    Integer arithmetic: where a cut falls never depends on a float's last digit.
    """
    k = len(steps)
    parts = max(1, min(parts, k))
    cum = np.concatenate([[0], np.cumsum(np.maximum(np.asarray(steps, dtype=np.int64), 1))])  # cum[i]: rows < i
    total = int(cum[-1])
    cuts = [0]
    for j in range(1, parts):
        target = total * j // parts
        i = int(np.searchsorted(cum, target, side="left"))  # first boundary at or past the target
        if i > 0 and target - int(cum[i - 1]) < int(cum[i]) - target:
            i -= 1
        cuts.append(min(max(i, cuts[-1] + 1), k - (parts - j)))  # non-empty, and room left for the rest
    cuts.append(k)
    return [range(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


class _Chunk:
    __slots__ = ("index", "rows", "tasks", "lost")

    def __init__(self, index: int, rows: range, tasks: list[tuple]):
        self.index, self.rows, self.tasks, self.lost = index, rows, tasks, 0


class RayHeldReports(HeldReports):
    """A cohort's reports kept by the actors that trained them (``partial_sums``), chunk by chunk.

    A sum is one call per holding actor, each summing its chunks' rows in row order, and the chunk sums
    are added here in chunk order: the order depends on the chunks (``actors × chunks_per_actor``), never
    on which actor trained which chunk or when it finished. A holder lost before it answered has its chunk
    trained again (a pure function of what it is sent) and is asked again: the sum does not change.
    """

    def __init__(self, executor: "RayExecutor", batch: ClientBatch, chunks: list[_Chunk], finite: np.ndarray):
        g = batch.global_params
        super().__init__(len(batch.clients), g.numel(), g.dtype)
        self.executor, self.batch, self.chunks, self._finite = executor, batch, chunks, finite
        self.holders: dict[int, tuple] = {}  # chunk index → (slot, actor handle) holding its rows
        self._starts = np.array([c.rows.start for c in chunks])

    def finite(self) -> np.ndarray:
        return self._finite.copy()

    def _by_chunk(self, rows: np.ndarray) -> dict[int, np.ndarray]:
        owner = np.searchsorted(self._starts, rows, side="right") - 1
        return {int(c): np.flatnonzero(owner == c) for c in np.unique(owner)}

    def _ask(self, rows: np.ndarray, method: str, args: dict[int, tuple]) -> dict[int, object]:
        """Call ``method`` on the holder of each chunk with rows among ``rows``; a lost holder's chunk is trained
        again and asked again. Returns chunk index → reply; the seconds count as the round's overhead."""
        ray = _ray()
        t0 = time.perf_counter()
        key, r = self.executor._generation, self.batch.stream_round
        out: dict[int, object] = {}
        left = sorted(args)
        while left:
            refs = {c: getattr(self.holders[c][1], method).remote(key, r, *args[c]) for c in left}
            lost = []
            for c, ref in refs.items():
                try:
                    out[c] = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self.executor._lost_holder(*self.holders[c], self.chunks[c], r, exc)
                    lost.append(c)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if exc.cause is not None else exc
                    raise WorkerError(f"executor.ray: the actor holding round {r}'s reports of clients "
                                      f"{[t[1] for t in self.chunks[c].tasks]} failed to send them ({method}): "
                                      f"{type(cause).__name__}: {cause}") from None
            if lost:
                self.executor._train(self.batch, [self.chunks[c] for c in lost], self.arrive, hold=True)
            left = lost
        self.executor._add_overhead(time.perf_counter() - t0)
        return out

    def arrive(self, holder: tuple, chunk: _Chunk, replies: list[tuple]) -> None:
        """A chunk came back trained (again): ``holder`` (slot, actor) holds its rows."""
        self.holders[chunk.index] = holder

    def rows(self, mask: np.ndarray) -> torch.Tensor:
        idx = np.flatnonzero(mask)
        out = torch.empty((len(idx), self.dim), dtype=self.dtype)
        groups = self._by_chunk(idx)
        replies = self._ask(idx, "rows", {c: (idx[j].tolist(),) for c, j in groups.items()})
        for c, j in groups.items():
            for at, row in zip(j, replies[c]):
                out[at] = from_wire(row)
        return out

    def weighted_sum(self, rows: np.ndarray, weights: np.ndarray) -> torch.Tensor:
        rows, weights = np.asarray(rows), np.asarray(weights)
        total = torch.zeros(self.dim, dtype=self.dtype)
        if not len(rows):
            return total
        groups = self._by_chunk(rows)
        replies = self._ask(rows, "weighted_sum", {c: (rows[j].tolist(), weights[j]) for c, j in groups.items()})
        for c in sorted(replies):  # chunk order, whichever actor answered first
            total += from_wire(replies[c])
        return total


@EXECUTORS.register("ray")
class RayExecutor(Executor):
    """Trains the cohort's clients on Ray actors (CPU or GPU slots, any nodes); bitwise equal to sequential."""

    Config = RayExecutorConfig
    requires = (("ray", "ray"),)

    def __init__(self, cfg: RayExecutorConfig):
        super().__init__(cfg)
        check_head(cfg.address, "executor.address")  # a wrong address is one line before the run starts
        self.actors: list = []  # one handle per slot; a lost actor's slot gets a replacement
        self._up: set[int] = set()  # slots whose actor has answered (is running)
        self._starting: dict = {}  # object ref of a node() call → slot, for actors not known to be up yet
        self._loaded: dict[int, int] = {}  # slot → generation its actor holds
        self._nodes: set[str] = set()  # nodes actors have run on
        self._lost = 0  # actors lost over the executor's life
        self._failed_starts: dict[int, int] = {}  # slot → replacements in a row that died before they were up
        #: per round: the seconds training took here beyond the busiest actor's own training (calls, transfers,
        #: waiting for a free actor, the in-order ``client_update`` hooks): what fanning out costs
        self.overheads_s: list[float] = []
        self._started_ray = False
        self._for: tuple | None = None  # weak references to the trainer and data of ``_refs``
        self._refs: tuple = ()  # object refs of this simulation's model, settings and data
        self._generation = 0

    # ---- the actors --------------------------------------------------------------------------
    def _ensure_actors(self, trainer: LocalTrainer, data: FederatedDataset) -> None:
        """Start the actors (once) and put this simulation's model and data into the object store (once)."""
        if self._for is not None and self._for[0]() is trainer and self._for[1]() is data:
            return
        ray = _ray()
        if trainer.device.type != "cpu" and self.cfg.gpus_per_actor == 0:
            raise ConfigError("executor.gpus_per_actor", 0, f"runtime.device is {trainer.device}, but Ray actors "
                                                            "train where their slot is: give each actor a GPU share "
                                                            "(e.g. 1 or 0.25), or set runtime.device: cpu")
        if not ray.is_initialized():
            ray.init(address=self.cfg.address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            self._started_ray = True
        if not self.actors:
            for _ in range(self.cfg.actors or self._default_actors(ray)):
                self.actors.append(None)
                self._start(len(self.actors) - 1)
            # The pool starts together (an actor is up in a second or two): wait for all of it, so a run
            # uses the actors it asked for; slots the cluster cannot give within the timeout join later.
            up, _ = ray.wait(list(self._starting), num_returns=len(self._starting), timeout=self.cfg.start_timeout_s)
            for ref in up:
                self._came_up(ref)
        device = "cuda" if self.cfg.gpus_per_actor > 0 else "cpu"
        what = (trainer.model.module, trainer.cfg, trainer.grad_backend, device,
                *(np.ascontiguousarray(a) for a in (data.x_train, data.y_train, data.train_offsets)))
        self._generation += 1
        self._refs = tuple(ray.put(v) for v in what)
        self._for = (weakref.ref(trainer), weakref.ref(data))

    def _start(self, slot: int) -> None:
        """Ask Ray for an actor in ``slot`` (a fresh one, or the replacement of a lost one)."""
        ray = _ray()
        remote = ray.remote(ClientTrainer).options(num_cpus=self.cfg.cpus_per_actor, num_gpus=self.cfg.gpus_per_actor,
                                                   max_restarts=0, max_task_retries=0)
        self.actors[slot] = remote.remote()
        self._up.discard(slot)
        self._loaded.pop(slot, None)
        self._starting[self.actors[slot].node.remote()] = slot

    def _default_actors(self, ray) -> int:
        """As many actors as the cluster's free slots hold (what other work — a sweep's units — leaves)."""
        total = ray.available_resources()
        if self.cfg.gpus_per_actor > 0:
            gpus = total.get("GPU", 0.0)
            if gpus < self.cfg.gpus_per_actor:
                raise ConfigError("executor.gpus_per_actor", self.cfg.gpus_per_actor,
                                  f"the Ray cluster has {gpus:g} free GPUs; lower the share or set it to 0 (CPU "
                                  "actors)")
            return max(1, int(gpus // self.cfg.gpus_per_actor))
        return max(1, int(total.get("CPU", 1.0) // self.cfg.cpus_per_actor))

    def _kill_actors(self) -> None:
        if self.actors:
            ray = _ray()
            for actor in self.actors:
                ray.kill(actor)
        self.actors, self._for, self._refs = [], None, ()
        self._up.clear()
        self._starting.clear()
        self._loaded.clear()

    @classmethod
    def bitwise_with(cls, options: dict) -> bool:
        return not options.get("partial_sums", False)  # a sum reorders floats; every end point back is bitwise

    # ---- a round -----------------------------------------------------------------------------
    def holds_reports(self) -> bool:
        return self.cfg.partial_sums

    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        if len(batch.clients) == 0:  # nobody to train: no reason to start Ray
            return empty_result(batch)
        clients, starts, objectives = prepare(batch, algorithm)
        g = batch.global_params
        try:
            self._ensure_actors(trainer, data)
            cuts = balanced_chunks(batch.steps, len(self.actors) * self.cfg.chunks_per_actor)
            chunks = [_Chunk(i, rows, [(row, clients[row], int(batch.steps[row]),
                                        None if starts[row] is g else to_wire(starts[row]), objectives[row])
                                       for row in rows])
                      for i, rows in enumerate(cuts)]
            self.overheads_s.append(0.0)
            if batch.hold_reports:
                return self._train_held(batch, chunks)
            cohort = InOrderUpdates(algorithm, clients, starts, g.numel(), g.dtype)

            def arrive(holder: tuple, chunk: _Chunk, replies: list[tuple]) -> None:
                for row, mean_loss, n, bufs, end, grad in replies:
                    cohort.arrive(row, mean_loss, n, {k: from_wire(v) for k, v in bufs.items()}, from_wire(end),
                                  None if grad is None else from_wire(grad))

            self._train(batch, chunks, arrive, hold=False)
        except BaseException:
            self.close()  # a failed set of actors is not reused
            raise
        return cohort.result()

    def _train_held(self, batch: ClientBatch, chunks: list[_Chunk]) -> CohortResult:
        """Train the cohort with its reports kept on the actors (``partial_sums``)."""
        k = len(batch.clients)
        losses, samples, finite = np.zeros(k), np.zeros(k, dtype=np.int64), np.zeros(k, dtype=bool)
        buffers: list[dict] = [{}] * k
        held = RayHeldReports(self, batch, chunks, finite)

        def arrive(holder: tuple, chunk: _Chunk, replies: list[tuple]) -> None:
            for row, mean_loss, n, bufs, ok in replies:
                losses[row], samples[row], finite[row] = mean_loss, n, ok
                buffers[row] = {name: from_wire(v) for name, v in bufs.items()}
            held.arrive(holder, chunk, replies)

        self._train(batch, chunks, arrive, hold=True)
        return CohortResult(updates=held, losses=losses, samples=samples, buffers=buffers)

    def _add_overhead(self, seconds: float) -> None:
        """Count ``seconds`` of driver-side work (a held sum, rows read back) as the current round's overhead."""
        if self.overheads_s:
            self.overheads_s[-1] += seconds

    def _train(self, batch: ClientBatch, chunks: list[_Chunk], arrive, hold: bool) -> None:
        """Train ``chunks`` on the live actors, handing each trained chunk to ``arrive((slot, actor), chunk, replies)``;
        a lost actor's chunk goes back to the queue."""
        ray = _ray()
        g_np = to_wire(batch.global_params)
        g_arg = g_np if g_np.nbytes <= INLINE_BYTES else ray.put(g_np)  # put once per round when large
        buffers = {k: to_wire(v) for k, v in batch.buffers.items()}
        todo = deque(chunks)
        pending: dict = {}  # object ref of a train call → (slot, actor, chunk)
        working: set[int] = set()  # slots with a call in flight
        busy: dict[int, float] = {}  # slot → seconds its actor spent training this round
        waited_since = None
        t0 = time.perf_counter()

        def hand_out() -> None:
            if self._starting:  # actors that came up since: take them in now (a busy wait would starve them)
                up, _ = ray.wait(list(self._starting), num_returns=len(self._starting), timeout=0)
                for ref in up:
                    self._came_up(ref)
            for slot in sorted(self._up - working):
                if not todo:
                    return
                chunk = todo.popleft()
                actor = self.actors[slot]
                if self._loaded.get(slot) != self._generation:
                    actor.load.remote(self._generation, *self._refs)  # runs before the train call (same caller)
                    self._loaded[slot] = self._generation
                ref = actor.train.remote(self._generation, batch.stream_round, batch.seed, batch.lr, buffers, g_arg,
                                         chunk.tasks, hold)
                pending[ref] = (slot, actor, chunk)
                working.add(slot)

        while todo or pending:
            hand_out()
            waiting = list(pending) + list(self._starting)
            if not pending:  # work left, no actor up: wait for a replacement, but not forever
                waited_since = waited_since or time.monotonic()
                left = self.cfg.start_timeout_s - (time.monotonic() - waited_since)
                if left <= 0 or not waiting:
                    raise WorkerError(f"executor.ray: round {batch.round} has clients left to train and no actor: "
                                      f"{self._lost} were lost and no replacement started within "
                                      f"{self.cfg.start_timeout_s:g} s; check the cluster's nodes and free slots, or "
                                      "raise executor.start_timeout_s")
                ready, _ = ray.wait(waiting, num_returns=1, timeout=min(left, 1.0))
            else:
                waited_since = None
                ready, _ = ray.wait(waiting, num_returns=1)
            for ref in ready:
                if ref in self._starting:
                    self._came_up(ref)
                    continue
                slot, actor, chunk = pending.pop(ref)
                working.discard(slot)
                try:
                    replies, seconds = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    self._lose(slot, chunk, batch.round, exc)
                    todo.appendleft(chunk)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if exc.cause is not None else exc
                    raise WorkerError(f"executor.ray: actor {slot} failed while training round {batch.round}'s "
                                      f"clients {[t[1] for t in chunk.tasks]}: {type(cause).__name__}: {cause}") \
                        from None
                busy[slot] = busy.get(slot, 0.0) + seconds
                arrive((slot, actor), chunk, replies)
        self._add_overhead(time.perf_counter() - t0 - max(busy.values(), default=0.0))

    def _came_up(self, ref) -> None:
        ray = _ray()
        slot = self._starting.pop(ref)
        try:
            self._nodes.add(ray.get(ref))
            self._up.add(slot)
            self._failed_starts.pop(slot, None)
        except ray.exceptions.RayActorError as exc:  # died before it was up (its node went away, or it broke)
            self._lost += 1
            self._failed_starts[slot] = self._failed_starts.get(slot, 0) + 1
            if self._failed_starts[slot] > self.cfg.max_restarts:
                first = " ".join(str(exc).split())
                raise WorkerError(f"executor.ray: actor {slot} could not be started, {self._failed_starts[slot]} "
                                  f"time(s) ({type(exc).__name__}: {first[:200]}); check that every node has "
                                  "turnout and its dependencies installed, or raise executor.max_restarts") from None
            self._start(slot)

    def _lose(self, slot: int, chunk: _Chunk, batch_round: int, exc: Exception) -> None:
        """``slot``'s actor died with ``chunk``: count it, give up past ``max_restarts``, else replace the actor."""
        chunk.lost += 1
        self._lost += 1
        if chunk.lost > self.cfg.max_restarts:
            raise WorkerError(f"executor.ray: actor {slot} was lost while training round {batch_round}'s clients "
                              f"{[t[1] for t in chunk.tasks]}, {chunk.lost} time(s) for these clients "
                              f"({type(exc).__name__}); raise executor.max_restarts or check the cluster") from None
        self._start(slot)

    def _lost_holder(self, slot: int, actor, chunk: _Chunk, batch_round: int, exc: Exception) -> None:
        """The actor holding ``chunk``'s reports was lost before it answered: count it, and replace it unless its
        slot already has a replacement (it was lost while training another chunk)."""
        if self.actors[slot] is actor:
            self._lose(slot, chunk, batch_round, exc)
            return
        chunk.lost += 1
        if chunk.lost > self.cfg.max_restarts:
            raise WorkerError(f"executor.ray: the actor holding round {batch_round}'s reports of clients "
                              f"{[t[1] for t in chunk.tasks]} was lost {chunk.lost} time(s) ({type(exc).__name__}); "
                              "raise executor.max_restarts or check the cluster") from None

    def nodes(self) -> int:
        """How many Ray nodes this executor's actors have run on."""
        return len(self._nodes)

    def summary(self) -> dict:
        if not self.actors:
            return {}
        out = {"ray_actors": len(self.actors), "ray_nodes": len(self._nodes), "ray_actors_lost": self._lost}
        if self.overheads_s:
            out["ray_overhead_ms_per_round"] = round(1000 * float(np.median(self.overheads_s)), 3)
        return out

    def close(self) -> None:
        try:
            self._kill_actors()
        finally:
            if self._started_ray:
                _ray().shutdown()
                self._started_ray = False


__all__ = ["RayExecutor", "RayExecutorConfig", "balanced_chunks"]
