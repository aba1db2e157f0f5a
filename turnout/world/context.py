"""What world components (availability, selectors) may know about the population when built."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from .model import ModelView


class WorldContext:
    """Population facts shared by the world's components; immutable once built.

    ``label_hist`` (clients × classes training-label counts) is what data-dependent availability
    modes (FedGS's YMF/YC, FedSUM's label-mix P2) read. Give it directly or as ``label_hist_fn``;
    the function form is evaluated on first use only, because at a million clients the histogram
    costs a pass over every training label. ``rounds`` lets schedules precompute. ``model`` is the
    read-only view of the global model (``None`` in model-free tools such as availability plots).
    """

    __slots__ = ("num_clients", "n_train", "seed", "rounds", "extras", "model", "_hist")

    def __init__(self, num_clients: int, n_train: np.ndarray, label_hist: np.ndarray | None = None,
                 seed: int = 0, rounds: int = 100, extras: Mapping[str, Any] | None = None,
                 label_hist_fn: Callable[[], np.ndarray] | None = None, model: ModelView | None = None):
        if label_hist is None and label_hist_fn is None:
            raise ValueError("WorldContext needs label_hist or label_hist_fn")
        for name, value in (("num_clients", int(num_clients)), ("n_train", np.asarray(n_train)),
                            ("seed", int(seed)), ("rounds", int(rounds)), ("extras", dict(extras or {})),
                            ("model", model), ("_hist", [label_hist, label_hist_fn])):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"WorldContext is immutable (cannot set {name})")

    @property
    def label_hist(self) -> np.ndarray:
        cell = self._hist
        if cell[0] is None:
            cell[0] = np.asarray(cell[1]())
        return cell[0]
