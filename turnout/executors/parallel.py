"""Train a cohort's clients in worker processes, one torch thread each.

For models whose CPU kernels one client already saturates (MLPs, CNNs), batching clients does
not pay on a CPU; using every core does. Each worker runs the sequential executor's trainer on
its clients with one thread, so results are bitwise those of ``executor: sequential`` (at the
default ``runtime.torch_threads: 1``), whatever the number of workers or the order they finish.

The driver keeps everything that is not training: every client's ``client_start`` and
``local_objective`` run here first, in client order, then the workers train while the driver runs
``client_update`` in client order on the end points that have come back (the hooks read state
that training does not change). The pool is started on the first round as
:class:`~turnout.core.worker_process.WorkerProcess` children, which never import the user's script,
and lives until :meth:`ParallelExecutor.close`; the model is sent once, the dataset is written
once to mapped files every worker reads, and start points, offsets, end points and gradient sums
travel through a mapped board reused across rounds. A free worker gets a share of the clients
left, shrinking to one at the end of the round, so a slow worker gets fewer and none idles long
at the end. A worker that dies or fails stops the run with one line saying which and why.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import weakref
from multiprocessing.connection import wait

import numpy as np
import torch

from ..algorithms.base import Algorithm
from ..core.errors import ConfigError, TurnoutError
from ..core.worker_process import WorkerProcess
from ..data.federated import FederatedDataset
from ..training.local_sgd import LocalTrainer
from . import worker as worker_module
from .base import EXECUTORS, ClientBatch, CohortResult, Executor, WorkersOption
from .cohort import InOrderUpdates, chunk_size, empty_result, prepare
from .shared import SharedDir

#: seconds a stopping worker gets before it is terminated
STOP_TIMEOUT_S = 5.0


class WorkerError(TurnoutError):
    """A worker process died or failed; the simulation cannot go on."""


#: What a worker process is taken to hold when it cannot be measured (its interpreter, torch and turnout).
FALLBACK_WORKER_BYTES = 512 << 20
_measured: list[int] = []


def worker_process_bytes() -> int:
    """Peak resident memory of a fresh interpreter that imported what a worker imports, measured once a process.

    A spawned worker starts a new interpreter and imports torch and turnout's worker module before it holds any
    client: on the machines these docs were written on that is 330–420 MB, so 256 workers need ~100 GB whatever
    the model. Measured by starting one such interpreter (about a second, only for plans with worker processes);
    :data:`FALLBACK_WORKER_BYTES` if that fails.
    """
    if not _measured:
        probe = ("import resource, turnout.executors.worker; "
                 "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
        try:
            out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                                 check=True, stdin=subprocess.DEVNULL)
            _measured.append(int(out.stdout.split()[-1]) * 1024)  # Linux reports kB
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            _measured.append(FALLBACK_WORKER_BYTES)
    return _measured[0]


class ParallelConfig(WorkersOption):
    pass


class WorkerPool:
    """Worker processes with a pipe each, the mapped files they read, and what they hold."""

    def __init__(self, n: int):
        self.shared = SharedDir()
        self.conns, self.procs = [], []
        self._cleanup = weakref.finalize(self, _terminate, self.procs, self.shared)
        for _ in range(n):
            proc = WorkerProcess(worker_module.main)
            self.conns.append(proc.conn)
            self.procs.append(proc)
        self.trainer_ref = self.data_ref = None
        self.board: dict[str, np.ndarray] = {}
        self.capacity = -1

    # ---- messages ---------------------------------------------------------------------------
    def send(self, i: int, msg: tuple, context: str) -> None:
        try:
            self.conns[i].send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            raise self._died(i, context) from None

    def receive(self, pending: dict[int, str]):
        """The next reply among workers in ``pending`` (worker → what it is doing) as ``(worker, value)``."""
        by_conn = {self.conns[i]: i for i in pending}
        by_sentinel = {self.procs[i].sentinel: i for i in pending}
        ready = wait(list({*by_conn, *by_sentinel}))  # a worker's pipe may be its sentinel too
        for obj in ready:  # replies first: a worker that answered and then exited still answered
            if obj in by_conn:
                i = by_conn[obj]
                try:
                    reply = pickle.loads(obj.recv_bytes())
                except (EOFError, OSError):
                    raise self._died(i, pending[i]) from None
                if reply[0] == "error":
                    raise WorkerError(f"executor.parallel: worker {i} failed while {pending[i]}: {reply[1]}")
                return i, reply[1]
        i = by_sentinel[ready[0]]
        raise self._died(i, pending[i])

    def broadcast(self, msg: tuple, context: str) -> None:
        for i in range(len(self.procs)):
            self.send(i, msg, context)
        pending = {i: context for i in range(len(self.procs))}
        while pending:
            i, _ = self.receive(pending)
            del pending[i]

    def _died(self, i: int, context: str) -> WorkerError:
        """The error to raise for worker ``i``, which stopped answering while ``context``."""
        proc = self.procs[i]
        proc.join(timeout=1.0)
        return WorkerError(f"executor.parallel: worker {i} (pid {proc.pid}) {proc.describe_exit()} — while "
                           f"{context}; the simulation cannot continue")

    # ---- what the workers hold ---------------------------------------------------------------
    def prepare(self, trainer: LocalTrainer, data: FederatedDataset, rows: int, dim: int, dtype: torch.dtype) -> None:
        """Send the model and the data when they changed since the last round; grow the board to ``rows``."""
        if self.trainer_ref is None or self.trainer_ref() is not trainer:
            self.broadcast(("model", trainer.model.module, trainer.cfg, trainer.grad_backend), "receiving the model")
            self.trainer_ref = weakref.ref(trainer)
        if self.data_ref is None or self.data_ref() is not data:
            x, _ = self.shared.array(data.x_train.shape, data.x_train.dtype, data.x_train)
            y, _ = self.shared.array(data.y_train.shape, data.y_train.dtype, data.y_train)
            off, _ = self.shared.array(data.train_offsets.shape, np.int64, data.train_offsets)
            self.broadcast(("data", x, y, off), "mapping the dataset")
            self.data_ref = weakref.ref(data)
        if rows > self.capacity or self.board["end"].shape[1] != dim or self.board["end"].dtype != _np_dtype(dtype):
            cap = max(rows, 2 * max(self.capacity, 0))
            specs = {}
            for name, n in (("start", cap + 1), ("offset", cap), ("end", cap), ("grad", cap)):
                specs[name], self.board[name] = self.shared.array((n, dim), _np_dtype(dtype))
            self.broadcast(("board", specs), "mapping the parameter board")
            self.capacity = cap

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send_bytes(pickle.dumps(("stop",)))
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=STOP_TIMEOUT_S)
        self._cleanup()
        for conn in self.conns:
            conn.close()


def _terminate(procs: list, shared: SharedDir) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=STOP_TIMEOUT_S)
    shared.remove()


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


@EXECUTORS.register("parallel")
class ParallelExecutor(Executor):
    """Trains the cohort's clients in worker processes (one torch thread each); bitwise equal to sequential."""

    Config = ParallelConfig

    def __init__(self, cfg: ParallelConfig):
        super().__init__(cfg)
        self.workers = cfg.worker_count()
        self.pool: WorkerPool | None = None

    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        if trainer.device.type != "cpu":
            raise ConfigError("executor.name", "parallel", f"trains in CPU worker processes, but runtime.device is "
                                                           f"{trainer.device}; use vectorized or sequential there")
        k, g = len(batch.clients), batch.global_params
        dim = g.numel()
        if k == 0:  # nobody to train: no reason to start the pool
            return empty_result(batch)
        clients, starts, objectives = prepare(batch, algorithm)
        if self.pool is None:
            self.pool = WorkerPool(self.workers)
        pool = self.pool
        cohort = InOrderUpdates(algorithm, clients, starts, dim, g.dtype)

        def collect(replies: list[tuple]) -> None:
            for row, mean_loss, n, has_grad, bufs in replies:
                end = torch.from_numpy(np.array(pool.board["end"][row]))  # copies: the board is reused
                grad = torch.from_numpy(np.array(pool.board["grad"][row])) if has_grad else None
                cohort.arrive(row, mean_loss, n, bufs, end, grad)

        try:
            pool.prepare(trainer, data, k, dim, g.dtype)
            board = pool.board
            board["start"][pool.capacity] = g.reshape(-1).numpy()
            tasks = []
            for row, (c, steps, s, o) in enumerate(zip(clients, batch.steps.tolist(), starts, objectives)):
                start_row = pool.capacity
                if s is not g:  # the client starts from its own point (FedAWE)
                    board["start"][row] = s.reshape(-1).to(g.dtype).numpy()
                    start_row = row
                has_offset = o is not None and o.offset is not None
                if has_offset:
                    board["offset"][row] = o.offset.reshape(-1).to(g.dtype).numpy()
                tasks.append((row, c, int(steps), start_row, 1.0 if o is None else o.scale,
                              0.0 if o is None else o.prox_mu, o is not None and o.freeze, has_offset))
            self._train(pool, batch, tasks, collect)
        except BaseException:
            self.close()  # a failed pool is not reused
            raise
        return cohort.result()

    def _train(self, pool: WorkerPool, batch: ClientBatch, tasks: list[tuple], collect) -> None:
        """Hand tasks out to whichever worker is free, in shrinking chunks; pass replies to ``collect``.

        The driver's share of the work (``client_update``) runs while workers train the rest.
        """
        workers = len(pool.procs)
        todo = list(reversed(tasks))
        pending: dict[int, str] = {}

        def hand_out(i: int) -> None:
            size = chunk_size(len(todo), workers)
            chunk = [todo.pop() for _ in range(min(size, len(todo)))]
            what = f"training round {batch.round}'s clients {[t[1] for t in chunk]}"
            pool.send(i, ("train", batch.stream_round, batch.seed, batch.lr, batch.buffers, chunk), what)
            pending[i] = what

        for i in range(workers):
            if todo:
                hand_out(i)
        while pending:
            i, replies = pool.receive(pending)
            del pending[i]
            if todo:
                hand_out(i)
            collect(replies)

    def close(self) -> None:
        if self.pool is not None:
            pool, self.pool = self.pool, None
            pool.close()
