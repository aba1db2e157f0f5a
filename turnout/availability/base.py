"""The availability interface: population-wide, vectorised, deterministic per seed."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from pydantic import BaseModel

from ..registry import Registry
from ..world.context import WorldContext

AVAILABILITY: Registry = Registry("availability", "which clients can be reached at round t (and until when)")


class Availability(ABC):
    """Decides, for every client at once, whether it is online at a round / simulated time.

    Implementations draw from streams keyed by (seed, purpose, round[, client]) so every variant
    of a comparison sees the same availability draws.
    """

    Config: type[BaseModel]

    def __init__(self, cfg: BaseModel, world: WorldContext):
        self.cfg = cfg
        self.world = world
        self.seed = world.seed

    @property
    def num_clients(self) -> int:
        return self.world.num_clients

    @abstractmethod
    def available(self, round: int, time_s: float) -> np.ndarray:
        """Boolean mask (N,) of clients reachable at the start of ``round`` (simulated ``time_s``)."""

    def online_until(self, clients: np.ndarray, round: int, time_s: float) -> np.ndarray:
        """Simulated time at which each of ``clients`` goes offline (``inf``: stays for the round).

        A client whose work would finish after this time drops out mid-round and its work is lost.
        """
        return np.full(len(clients), np.inf)
