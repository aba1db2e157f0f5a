"""Loss probes: the current global model evaluated on candidate clients, paid for in the world.

Power-of-Choice asks candidates for their local loss before choosing. That costs each candidate
a model download (what it lacks, per the coordinate ledger), a forward pass over the samples it
evaluates, and a 4-byte upload, and the server cannot start the round before the slowest answer.
:class:`LossProbe` does the evaluation and keeps the bill, which the engine adds to the round.
A forward pass is priced at 1/3 of a training step per sample (FedScale's convention that
forward + backward ≈ 3 × forward).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core import rng as rngmod
from ..models.scoring import cross_entropy
from .model import GlobalModel
from .wire import WirePricer

FORWARD_FRACTION = 1.0 / 3.0
LOSS_BYTES = 4


@dataclass(frozen=True)
class ProbeBill:
    """What loss probes cost before training: the round starts after the slowest answer."""

    seconds: float
    bytes_down: int
    bytes_up: int
    busy_s: float

    @classmethod
    def none(cls) -> "ProbeBill":
        return cls(0.0, 0, 0, 0.0)


class LossProbe:
    """Callable ``probe(clients, batch) -> losses`` for one round, accumulating its cost."""

    def __init__(self, pricer: WirePricer, model: GlobalModel, data, seed: int, round: int):
        self.pricer, self.model, self.data, self.seed, self.round = pricer, model, data, seed, round
        self.clients: list[np.ndarray] = []
        self.bytes_down: list[np.ndarray] = []
        self.seconds: list[np.ndarray] = []

    def __call__(self, clients: np.ndarray, batch: int | None = None) -> np.ndarray:
        clients = np.asarray(clients, dtype=np.int64)
        flat = self.model.flat
        params = flat.unflatten(self.model.params)
        losses = np.full(len(clients), np.nan)
        samples = np.zeros(len(clients), np.int64)
        flat.module.eval()
        with torch.no_grad():
            for i, c in enumerate(clients.tolist()):
                x, y = self.data.client_train(c)
                if batch is not None and len(y) > batch:
                    idx = np.sort(rngmod.stream(self.seed, "probe", self.round, c).choice(len(y), batch, replace=False))
                    x, y = x[idx], y[idx]
                if len(y):
                    xt = torch.from_numpy(np.ascontiguousarray(x))
                    logits = flat.forward(params, self.model.buffers, xt)
                    losses[i] = float(cross_entropy(logits, xt, torch.from_numpy(np.ascontiguousarray(y))))
                samples[i] = len(y)
        down = self.pricer.download(clients, self.round)  # the probed client now holds the current model
        secs = self.pricer.delivery_s(clients, down, samples, LOSS_BYTES, compute_fraction=FORWARD_FRACTION)
        self.clients.append(clients)
        self.bytes_down.append(down)
        self.seconds.append(secs)
        return losses

    def settle(self) -> ProbeBill:
        """Bill the probes to the population: phase seconds (slowest answer), bytes, client-seconds."""
        if not self.clients:
            return ProbeBill.none()
        pop = self.pricer.population
        clients = np.concatenate(self.clients)
        down, secs = np.concatenate(self.bytes_down), np.concatenate(self.seconds)
        np.add.at(pop.bytes_down, clients, down)
        np.add.at(pop.bytes_up, clients, LOSS_BYTES)
        np.add.at(pop.resource_s, clients, secs)
        return ProbeBill(float(secs.max()), int(down.sum()), LOSS_BYTES * len(clients), float(secs.sum()))
