"""Every client is always reachable (the idealised setting, FedGS's IDL)."""

from __future__ import annotations

import numpy as np

from ..config.base import NoOptions
from .base import AVAILABILITY, Availability


@AVAILABILITY.register("always")
class AlwaysAvailable(Availability):
    """Every client is online in every round and never drops out."""

    Config = NoOptions

    def available(self, round: int, time_s: float) -> np.ndarray:
        return np.ones(self.num_clients, dtype=bool)
