"""What runs inside a Ray actor of the ``ray`` executor (:mod:`turnout.executors.ray_actors`): the trainer that
holds a simulation's model and data and trains the chunks of clients it is sent, keeping their reports with
``partial_sums``, and how tensors cross to and from it (as numpy arrays, which Ray moves without a copy).

It imports no Ray: the driver wraps :class:`ClientTrainer` with ``ray.remote`` when it starts actors.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import torch

from ..core import faults
from ..models.flat import FlatModel
from ..training.local_sgd import LocalTrainer
from .cohort import train_client


class ClientTrainer:
    """The actor: trains the clients it is sent with the model and dataset it was last loaded with."""

    def __init__(self):
        faults.point("ray-actor-start")
        torch.set_num_threads(1)
        # Arrays from the object store are read-only views; training only reads them.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        self.key: int | None = None
        self.trainer: LocalTrainer | None = None
        self.x = self.y = self.offsets = None
        self.held: dict[int, torch.Tensor] = {}  # row → report of the clients this actor trained and keeps
        self.held_round: tuple[int, int] | None = None  # (simulation, round) of ``held``

    def node(self) -> str:
        """The Ray node this actor runs on (answers once the actor is up)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def load(self, key: int, module, cfg, grad_backend, device: str, x, y, offsets) -> None:
        """Take simulation ``key``'s model and data (Ray resolves the object references, mapping local ones)."""
        self.trainer = LocalTrainer(FlatModel(module), cfg, grad_backend, device=device)
        self.x, self.y, self.offsets, self.key = x, y, offsets, key

    def train(self, key: int, batch_round: int, seed: int, lr: float, buffers: dict, global_params: np.ndarray,
              tasks: list[tuple], hold: bool = False) -> tuple[list[tuple], float]:
        """Train each ``(row, client, steps, start or None for the global model, objective)`` task; also returns
        the seconds it took here (the driver counts the rest of the round as the executor's overhead).

        Each reply carries the client's end point, or, with ``hold``, only whether its report is finite: the
        report (end − start, the default ``client_update``) stays here for :meth:`weighted_sum` and :meth:`rows`.
        """
        if key != self.key:  # the driver loads an actor before its first chunk of a simulation
            raise RuntimeError(f"actor holds simulation {self.key}, was sent a chunk of simulation {key}")
        faults.point("ray-train")
        t0 = time.perf_counter()
        g, buffers = from_wire(global_params), {k: from_wire(v) for k, v in buffers.items()}
        if hold and self.held_round != (key, batch_round):  # a new round: the last one's reports are done with
            self.held, self.held_round = {}, (key, batch_round)
        out = []
        for row, client, steps, start, objective in tasks:
            start = g if start is None else from_wire(start)
            res = train_client(self.trainer, self.x, self.y, self.offsets, batch_round, seed, lr, buffers, client,
                               steps, start, objective)
            bufs = {k: to_wire(v) for k, v in res.buffers.items()}
            if hold:
                report = from_wire(to_wire(res.params)) - start  # bitwise what the driver's client_update makes
                self.held[row] = report
                out.append((row, res.mean_loss, res.samples, bufs, bool(torch.isfinite(report).all())))
            else:
                out.append((row, res.mean_loss, res.samples, bufs, to_wire(res.params),
                            None if res.grad_sum is None else to_wire(res.grad_sum)))
        return out, time.perf_counter() - t0

    def _held(self, key: int, batch_round: int, rows: list[int]) -> list[torch.Tensor]:
        if self.held_round != (key, batch_round) or any(r not in self.held for r in rows):
            raise RuntimeError(f"actor holds the reports of round {self.held_round}, was asked for rows {rows} of "
                               f"round {(key, batch_round)}")
        return [self.held[r] for r in rows]

    def weighted_sum(self, key: int, batch_round: int, rows: list[int], weights: np.ndarray) -> np.ndarray:
        """Σ weights[j] · report ``rows[j]``, accumulated in the order given (element-wise, so no BLAS kernel
        decides the order and the sum is the same on every machine)."""
        faults.point("ray-sum")
        reports = self._held(key, batch_round, rows)
        total = torch.zeros_like(reports[0])
        for report, w in zip(reports, weights.tolist()):
            total.add_(report, alpha=w)
        return to_wire(total)

    def rows(self, key: int, batch_round: int, rows: list[int]) -> list[np.ndarray]:
        """The held reports ``rows``, exactly as trained."""
        return [to_wire(r) for r in self._held(key, batch_round, rows)]


def to_wire(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as the numpy array it shares memory with: Ray moves numpy arrays without a copy in
    pickle (out-of-band buffers), while a torch tensor goes through torch's own, slower, serializer
    (measured: a two-actor call returning ten 61-float vectors took 4.9 ms as tensors, 2.8 ms as arrays)."""
    return t.detach().cpu().numpy()


def from_wire(a: np.ndarray) -> torch.Tensor:
    """The tensor of an array that came through Ray: shared when writable, else copied (object-store arrays
    are read-only, and training or an algorithm's hook may write into what it gets)."""
    return torch.from_numpy(a if a.flags.writeable else a.copy())
