"""What every executor that trains clients out of process shares with the driver's side of a round.

The parallel and Ray executors both keep the algorithm's hooks in the driver and ship only training
out: :func:`prepare` runs every client's ``client_start`` and ``local_objective`` in client order,
:func:`train_client` is the one training call a worker makes (the sequential executor's trainer and
the client's own (seed, "batches", round, client) stream, so end points are bitwise the same), and
:class:`InOrderUpdates` runs ``client_update`` in client order on end points that arrive in any
order (the hooks read state that training does not change, so this order gives the sequential
executor's reports).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..algorithms.base import Algorithm
from ..core import rng as rngmod
from ..training.local_sgd import LocalObjective, LocalResult, LocalTrainer
from .base import ClientBatch, CohortResult

#: a free worker gets ceil(remaining clients / (workers · SHARE)) of them (guided self-scheduling):
#: big chunks first for few messages, single clients at the end so no worker idles long
SHARE = 2


def prepare(batch: ClientBatch, algorithm: Algorithm) -> tuple[list[int], list[torch.Tensor], list]:
    """The cohort's clients, their start points and local objectives (driver side, client order)."""
    clients = batch.clients.tolist()
    starts = [algorithm.client_start(c, batch.global_params) for c in clients]
    objectives = [algorithm.local_objective(c, s) for c, s in zip(clients, starts)]
    return clients, starts, objectives


def empty_result(batch: ClientBatch) -> CohortResult:
    g = batch.global_params
    return CohortResult(torch.empty((0, g.numel()), dtype=g.dtype), np.zeros(0), np.zeros(0, np.int64), [])


def chunk_size(remaining: int, workers: int) -> int:
    """How many of the ``remaining`` clients a free worker gets next (guided self-scheduling)."""
    return max(1, math.ceil(remaining / (workers * SHARE)))


def train_client(trainer: LocalTrainer, x: np.ndarray, y: np.ndarray, offsets: np.ndarray, batch_round: int,
                 seed: int, lr: float, buffers: dict, client: int, steps: int, start: torch.Tensor,
                 objective: LocalObjective | None) -> LocalResult:
    """Train one client on its rows of the pooled arrays, exactly as the sequential executor does."""
    a, b = int(offsets[client]), int(offsets[client + 1])
    return trainer.train(start, buffers, x[a:b], y[a:b], steps, lr, rngmod.stream(seed, "batches", batch_round, client),
                         objective=objective)


class InOrderUpdates:
    """Collects trained clients in any order and runs ``client_update`` in client order as far as it can."""

    def __init__(self, algorithm: Algorithm, clients: list[int], starts: list[torch.Tensor], dim: int,
                 dtype: torch.dtype):
        self.algorithm, self.clients, self.starts, self.dim = algorithm, clients, starts, dim
        k = len(clients)
        self.updates = torch.empty((k, dim), dtype=dtype)
        self.losses, self.samples = np.zeros(k), np.zeros(k, dtype=np.int64)
        self.buffers: list[dict] = [{}] * k
        self._arrived: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.done = 0

    def arrive(self, row: int, mean_loss: float, samples: int, buffers: dict, end: torch.Tensor,
               grad_sum: torch.Tensor | None) -> None:
        self.losses[row], self.samples[row], self.buffers[row] = mean_loss, samples, buffers
        self._arrived[row] = (end, grad_sum)
        while self.done in self._arrived:
            row = self.done
            end, grad = self._arrived.pop(row)
            update = self.algorithm.client_update(self.clients[row], self.starts[row], end, grad_sum=grad)
            # A report of the wrong shape is kept as NaN so the engine rejects it before aggregation.
            self.updates[row] = update.reshape(-1) if update.numel() == self.dim else float("nan")
            self.done += 1

    def result(self) -> CohortResult:
        if self.done != len(self.clients):
            raise RuntimeError(f"{len(self.clients) - self.done} clients of the cohort never came back")
        return CohortResult(updates=self.updates, losses=self.losses, samples=self.samples, buffers=self.buffers)


__all__ = ["InOrderUpdates", "chunk_size", "empty_result", "prepare", "train_client"]
