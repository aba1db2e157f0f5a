"""The server's memory of every client's latest update, and its running sum (MIFA, FedVARP).

Rows live in the per-client state store (never-seen clients read as zero and cost nothing); the
sum is kept in float64 so that replacing one row at a time does not drift over thousands of rounds.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.state import Stateful
from ..world.state_store import ClientStateStore
from .base import Algorithm, AlgorithmContext


class UpdateMemory(Stateful):
    """``y_i`` per client in ``store`` under ``slot``, plus ``Σ_i y_i``."""

    state_attrs = ("sum",)

    def __init__(self, store: ClientStateStore, slot: str, dim: int):
        self.store, self.slot = store, slot
        self.sum = torch.zeros(int(dim), dtype=torch.float64)

    def replace(self, clients: np.ndarray, updates: torch.Tensor) -> torch.Tensor:
        """Store ``updates`` as the clients' rows; returns ``Σ (new − old)`` over them (float64)."""
        change = (updates - self.store.get(self.slot, clients)).sum(0).double()
        self.sum += change
        self.store.put(self.slot, clients, updates)
        return change


class RememberingRule(Algorithm):
    """A rule that keeps every client's latest update (:class:`UpdateMemory` under ``slot``) to average it over
    all ``N`` clients every round, reported or not (MIFA, FedVARP)."""

    #: the memory's slot in the per-client state store
    slot: str

    state_attrs = ("memory",)

    def __init__(self, cfg, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.num_clients = int(ctx.num_clients)
        self.memory = UpdateMemory(ctx.state_store(), self.slot, ctx.dim)
