"""What world components (availability, devices) may know about the population when built."""

from __future__ import annotations

from typing import Callable

import numpy as np


class WorldContext:
    """Population facts shared by the world's components.

    ``label_hist`` (clients × classes training-label counts) is what data-dependent availability
    modes (FedGS's YMF/YC, FedSUM's label-mix P2) read. Give it directly or as ``label_hist_fn``;
    the function form is evaluated on first use only, because at a million clients the histogram
    costs a pass over every training label. ``rounds`` lets schedules precompute.
    """

    def __init__(self, num_clients: int, n_train: np.ndarray, label_hist: np.ndarray | None = None,
                 seed: int = 0, rounds: int = 100, extras: dict | None = None,
                 label_hist_fn: Callable[[], np.ndarray] | None = None):
        if label_hist is None and label_hist_fn is None:
            raise ValueError("WorldContext needs label_hist or label_hist_fn")
        self.num_clients = int(num_clients)
        self.n_train = np.asarray(n_train)
        self.seed = int(seed)
        self.rounds = int(rounds)
        self.extras = extras or {}
        self._label_hist = label_hist
        self._label_hist_fn = label_hist_fn
        # Model access for selectors that compare clients through the model itself (FedGS's
        # functional graph): set by the engine once the model exists, None in model-free tools.
        self.model_forward: Callable | None = None  # (flat params, x) -> logits
        self.server_inputs = None  # a small batch of server-side inputs
        self.global_params: Callable | None = None  # () -> current flat global model

    @property
    def label_hist(self) -> np.ndarray:
        if self._label_hist is None:
            self._label_hist = np.asarray(self._label_hist_fn())
        return self._label_hist
