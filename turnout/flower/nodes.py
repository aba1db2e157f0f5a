"""Availability in a deployment: the clients whose devices are connected and not busy.

It stands in the engine's availability seam (injected, never configured), so the selectors see
the connected set exactly where the simulator hands them a modelled one. A device that failed
this round (an error reply, a lost copy, no reply before the timeout) is reported as having gone
offline at the moment the server learnt of it, which the round mode treats like a dropout.
"""

from __future__ import annotations

import numpy as np

from ..availability.base import Availability
from ..config.base import NoOptions
from ..world.context import WorldContext
from .link import Link


class ConnectedClients(Availability):
    """Online = the device is connected and holds no unanswered instruction."""

    Config = NoOptions
    scratch_attrs = ("dropped_at",)

    def __init__(self, world: WorldContext, link: Link):
        super().__init__(NoOptions(), world)
        self.link = link
        self.dropped_at: dict[int, float] = {}  # this round: client → seconds after the training start

    def available(self, round: int, time_s: float) -> np.ndarray:
        mask = np.zeros(self.num_clients, dtype=bool)
        online = np.asarray(self.link.clients_online(), dtype=np.int64)
        mask[online[(online >= 0) & (online < self.num_clients)]] = True
        mask[np.asarray(self.link.busy_clients(), dtype=np.int64)] = False
        return mask

    def online_until(self, clients: np.ndarray, round: int, time_s: float) -> np.ndarray:
        return time_s + np.array([self.dropped_at.get(int(c), np.inf) for c in clients], dtype=np.float64)


__all__ = ["ConnectedClients"]
