"""The availability interface: population-wide, vectorised, deterministic per seed.

Two optional capabilities are declared here with a "cannot say" default, so a caller (REFL's
oracle predictor) asks the model instead of probing for attributes: :meth:`Availability.window_fraction`
(the share of a time window each client is online) and :meth:`Availability.online_throughout`
(online for a whole window, answered without side effects).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from pydantic import BaseModel

from ..core.registry import Registry
from ..core.state import Stateful
from ..world.context import WorldContext

AVAILABILITY: Registry = Registry("availability", "which clients can be reached at round t (and until when)")


class Availability(Stateful, ABC):
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

    def window_fraction(self, clients: np.ndarray, round: int, t0: float, t1: float) -> np.ndarray | None:
        """Fraction of ``[t0, t1]`` (simulated seconds; round ``round``) each client is online.

        ``None`` (the default) means the model cannot say exactly; callers then sample instants.
        Bernoulli models answer with the round's probabilities, traces with the exact covered share.
        """
        return None

    def online_throughout(self, clients: np.ndarray, round: int, t0: float, t1: float) -> np.ndarray | None:
        """Whether each client is online for the whole ``[t0, t1]``, answered without changing any state.

        ``None`` (the default) means the model cannot answer statelessly; callers then combine
        :meth:`available` and :meth:`online_until`.
        """
        return None
