"""Which clock a deployment's round mode judges: the seconds measured, or the device model's seconds.

``measured``: a client's delivery time is the server's wall clock from the round's start to the
moment its reply was received (``inf`` while it has not come), and its download time is the
device's start of work minus the instruction's departure (both wall clocks, so the server's and
the devices' clocks should be synchronised). ``modelled``: the delivery time is the simulator's
``download / bw_down + samples × s_per_sample + upload / bw_up`` from the ``devices`` block, with the
bytes the ledger charged and the samples the device reported — the round mode then decides what the
simulation of the same run decides, which is how a deployment is compared with its simulation.
Either way a client whose device failed never delivers.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ..world.wire import WirePricer

Clock = Literal["measured", "modelled"]
CLOCKS = ("measured", "modelled")


class ReportedTiming(WirePricer):
    """A :class:`WirePricer` whose times come from this round's replies (measured clock) or the device model."""

    def __init__(self, *args, clock: Clock = "measured", **kwargs):
        super().__init__(*args, **kwargs)
        self.clock = clock
        self.finish_s: dict[int, float] = {}  # client → measured seconds to delivery (inf: not delivered)
        self.download_wait_s: dict[int, float] = {}  # client → measured seconds before its work started
        self.failed: set[int] = set()

    def measure(self, finish: dict[int, float], download: dict[int, float], failed: set[int]) -> None:
        """This round's replies: measured delivery and download seconds, and the clients that failed."""
        self.finish_s, self.download_wait_s, self.failed = dict(finish), dict(download), set(failed)

    def delivery_s(self, clients: np.ndarray, down: np.ndarray, samples: np.ndarray, up,
                   compute_fraction: float | None = None) -> np.ndarray:
        if self.clock == "modelled":
            out = np.asarray(super().delivery_s(clients, down, samples, up, compute_fraction), dtype=np.float64)
        else:
            out = np.array([self.finish_s.get(int(c), np.inf) for c in clients], dtype=np.float64)
        out[np.isin(np.asarray(clients), list(self.failed))] = np.inf
        return out

    def download_s(self, clients: np.ndarray, down: np.ndarray) -> np.ndarray:
        if self.clock == "modelled":
            return super().download_s(clients, down)
        return np.array([self.download_wait_s.get(int(c), 0.0) for c in clients], dtype=np.float64)


__all__ = ["CLOCKS", "Clock", "ReportedTiming"]
