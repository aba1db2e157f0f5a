"""One place that prices the wire: what a client downloads and how long its work takes.

A client that last synced after round r lacks exactly the coordinates changed since
(:class:`~turnout.world.ledger.CoordinateLedger`); the compressor prices that many coordinates,
times the model vectors the algorithm sends down, plus the model's buffers (sent dense). A
launched client's delivery time is ``download / bw_down + samples × s_per_sample × fraction +
upload / bw_up`` (fraction 1 for training, 1/3 for a forward-only loss probe). The engine and
the loss probe both price through :class:`WirePricer`, so the two can never disagree.
"""

from __future__ import annotations

import numpy as np

from .ledger import CoordinateLedger
from .population import Population


class WirePricer:
    """Download sizes from the ledger, delivery times from the device profiles."""

    def __init__(self, population: Population, ledger: CoordinateLedger, compressor, downlink_vectors: int,
                 buffer_bytes: int):
        self.population, self.ledger, self.compressor = population, ledger, compressor
        self.downlink_vectors, self.buffer_bytes = int(downlink_vectors), int(buffer_bytes)

    def download(self, clients: np.ndarray, round: int) -> np.ndarray:
        """Bytes each client downloads to hold the current model; marks them synced through ``round − 1``."""
        pop = self.population
        lacking = self.ledger.lacking(pop.synced_through[clients])
        down = (self.compressor.download_bytes(lacking) * self.downlink_vectors + self.buffer_bytes).astype(np.int64)
        pop.synced_through[clients] = round - 1
        return down

    def delivery_s(self, clients: np.ndarray, down: np.ndarray, samples: np.ndarray, up,
                   compute_fraction: float | None = None) -> np.ndarray:
        """Seconds from the start of a client's work until its upload is in."""
        dev = self.population.devices
        compute = samples * dev.compute_s_per_sample[clients]
        if compute_fraction is not None:
            compute = compute * compute_fraction
        return down / dev.down_bytes_per_s[clients] + compute + up / dev.up_bytes_per_s[clients]

    def download_s(self, clients: np.ndarray, down: np.ndarray) -> np.ndarray:
        return down / self.population.devices.down_bytes_per_s[clients]

    def compute_s(self, clients: np.ndarray, samples: np.ndarray) -> np.ndarray:
        return samples * self.population.devices.compute_s_per_sample[clients]

    def upload_s(self, clients: np.ndarray, up: np.ndarray) -> np.ndarray:
        return up / self.population.devices.up_bytes_per_s[clients]
