"""The selector interface: choose a cohort from the available set and weight its members."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from ..registry import Registry

SELECTORS: Registry = Registry("selector", "cohort and aggregation weights, given the available set and history")


@dataclass
class Cohort:
    """Clients to launch this round and the weight each report gets in aggregation.

    ``normalize=True`` means weights are relative: the server divides by the sum over the reports
    that actually arrive (so dropouts do not shrink the update). ``normalize=False`` means the
    weights are absolute (unbiased estimators such as FedAvg's N/K·p_i form) and used as given.
    ``target`` is the number of reports the round wants (K); ``len(clients)`` may be larger when the
    round mode over-commits.
    """

    clients: np.ndarray
    weights: np.ndarray
    normalize: bool = True
    target: int = 0

    def __post_init__(self) -> None:
        if len(self.clients) != len(self.weights):
            raise ValueError("cohort clients and weights differ in length")
        if not self.target:
            self.target = len(self.clients)


class Selector(ABC):
    """Chooses who trains. State (counts, utilities, ...) is kept as arrays over the population."""

    Config: type[BaseModel]

    def __init__(self, cfg: BaseModel, n_train: np.ndarray, seed: int):
        self.cfg = cfg
        self.n_train = n_train
        self.seed = seed

    @property
    def num_clients(self) -> int:
        return len(self.n_train)

    @abstractmethod
    def target(self) -> int:
        """Reports wanted per round (K)."""

    @abstractmethod
    def select(self, round: int, available: np.ndarray, launch: int, rng: np.random.Generator) -> Cohort:
        """Pick ``launch`` clients (or fewer if fewer are available) from the ids in ``available``."""

    def observe(self, round: int, clients: np.ndarray, aggregated: np.ndarray, losses: np.ndarray,
                busy_s: np.ndarray) -> None:
        """Feedback after a round (utility-based selectors learn from it). Default: nothing."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """Arrays to checkpoint. Stateless selectors return nothing."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
