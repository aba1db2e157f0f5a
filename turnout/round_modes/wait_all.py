"""Wait for every launched client that does not drop out (classic synchronous FL)."""

from __future__ import annotations

import numpy as np

from ..config.base import NoOptions
from .base import ROUND_MODES, RoundClose, RoundMode


@ROUND_MODES.register("wait_all")
class WaitAll(RoundMode):
    """The server waits for every selected client; dropped clients are lost, nothing arrives late."""

    Config = NoOptions

    def close(self, finish_s: np.ndarray, dropped_at_s: np.ndarray, target: int) -> RoundClose:
        delivers = finish_s <= dropped_at_s
        busy = np.where(delivers, finish_s, dropped_at_s)
        # With dropouts the server still waits until it learns a client is gone (its dropout time).
        duration = float(busy.max()) if len(busy) else 0.0
        return RoundClose(aggregated=delivers, late=np.zeros_like(delivers), duration_s=duration, busy_s=busy)
