"""Population-wide client state as struct-of-arrays.

One numpy array per attribute, indexed by client id — never one Python object per client — so
a million-client population is a few tens of MB and selection over it is a vector operation.
The recorder's per-client table is read straight from these arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.state import Stateful

#: ``synced_through`` value of a client that never downloaded the model.
NEVER = -2


@dataclass
class DeviceProfiles:
    """Per-client system speed: seconds of compute per training sample and link bandwidths."""

    compute_s_per_sample: np.ndarray  # float64 (N,)
    down_bytes_per_s: np.ndarray  # float64 (N,)
    up_bytes_per_s: np.ndarray  # float64 (N,)

    def __post_init__(self) -> None:
        n = len(self.compute_s_per_sample)
        for name in ("down_bytes_per_s", "up_bytes_per_s"):
            arr = getattr(self, name)
            if len(arr) != n:
                raise ValueError(f"device profile {name} has {len(arr)} entries, expected {n}")
            if np.any(arr <= 0):
                raise ValueError(f"device profile {name} must be > 0 for every client")
        if np.any(self.compute_s_per_sample < 0):
            raise ValueError("device profile compute_s_per_sample must be >= 0")


@dataclass(eq=False)
class Population(Stateful):
    """Everything the world knows per client, as parallel arrays of length ``size``.

    ``n_train`` and ``devices`` come from the dataset and the seed; the counters are run state.
    """

    state_attrs = ("times_selected", "times_aggregated", "bytes_up", "bytes_down", "resource_s", "wasted_s",
                   "last_round", "synced_through")

    n_train: np.ndarray
    devices: DeviceProfiles
    times_selected: np.ndarray = field(init=False)
    times_aggregated: np.ndarray = field(init=False)
    bytes_up: np.ndarray = field(init=False)
    bytes_down: np.ndarray = field(init=False)
    resource_s: np.ndarray = field(init=False)
    wasted_s: np.ndarray = field(init=False)
    last_round: np.ndarray = field(init=False)
    synced_through: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.n_train)
        self.times_selected = np.zeros(n, np.int64)
        self.times_aggregated = np.zeros(n, np.int64)
        self.bytes_up = np.zeros(n, np.int64)
        self.bytes_down = np.zeros(n, np.int64)
        self.resource_s = np.zeros(n, np.float64)
        self.wasted_s = np.zeros(n, np.float64)
        self.last_round = np.full(n, -1, np.int64)  # last round the client was selected (−1: never)
        self.synced_through = np.full(n, NEVER, np.int64)  # last aggregation round its model copy includes

    @property
    def size(self) -> int:
        return len(self.n_train)
