"""What world components (availability, devices) may know about the population when built."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class WorldContext:
    """Population facts shared by the world's components.

    ``label_hist`` (clients × classes training-label counts) is what data-dependent availability
    modes (FedGS's YMF/YC, FedSUM's label-mix P2) read; ``rounds`` lets schedules precompute.
    """

    num_clients: int
    n_train: np.ndarray
    label_hist: np.ndarray
    seed: int
    rounds: int
    extras: dict = field(default_factory=dict)
