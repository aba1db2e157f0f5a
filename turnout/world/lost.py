"""Tasks that will end with their client going offline, while the client is still computing them.

A client launched into a task it cannot finish (it goes offline before it would deliver) keeps its device
busy until the moment it goes offline; only then is it lost. Its report never exists, so it is not in the
:class:`~turnout.world.late.LateBuffer`, but the device must not be launched again before that moment, and
an asynchronous round counts it among the clients in flight until the first update after it is lost
(docs/algorithms/asynchronous.md, "Lost clients"). Its seconds are charged, as wasted, in the round that
launched it.
"""

from __future__ import annotations

import numpy as np

from ..core.state import Stateful


class LostTasks(Stateful):
    """Struct-of-arrays of doomed tasks still running: the client and when it goes offline (absolute seconds)."""

    state_attrs = ("clients", "gone_s")

    def __init__(self):
        self.clients = np.zeros(0, np.int64)
        self.gone_s = np.zeros(0, np.float64)

    def __len__(self) -> int:
        return len(self.clients)

    def add(self, clients: np.ndarray, gone_s: np.ndarray) -> None:
        if len(clients):
            self.clients = np.concatenate([self.clients, np.asarray(clients, np.int64)])
            self.gone_s = np.concatenate([self.gone_s, np.asarray(gone_s, np.float64)])

    def release(self, time_s: float) -> None:
        """Forget the tasks whose client went offline by ``time_s``: their devices and slots are free."""
        keep = self.gone_s > time_s
        self.clients, self.gone_s = self.clients[keep], self.gone_s[keep]

    def busy_clients(self) -> np.ndarray:
        return self.clients
