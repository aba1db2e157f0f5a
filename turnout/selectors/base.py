"""The selector interface: choose a cohort from the available set and weight its members.

A selector sees one :class:`SelectionContext` per round — who is available, how many to launch,
its random stream, and the services some selectors need (the availability model for REFL's
oracle predictions, the moving-average round duration μ_t, and ``probe_loss`` for
Power-of-Choice, whose cost the engine charges to the round) — and gets a
:class:`RoundFeedback` after the round closes (durations, losses, updates) to learn from.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from pydantic import BaseModel

from ..registry import Registry
from ..world.context import WorldContext

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


@dataclass
class SelectionContext:
    """Everything a selector may use in one round."""

    round: int
    time_s: float
    available: np.ndarray  # ids of clients that can be launched now
    launch: int  # how many the round mode wants launched (≥ target under over-commitment)
    rng: np.random.Generator  # the (seed, "selection", round) stream
    world: WorldContext
    availability: Any  # the Availability model (oracle predictions, e.g. REFL IPS)
    mean_round_s: float  # moving average of past round durations (REFL's μ_t); 0 before round 1
    #: ``probe_loss(clients, batch) -> loss per client`` of the current global model on each
    #: client's training data (a ``batch``-sample minibatch, or all of it when ``batch`` is None);
    #: the engine charges the probe's download, compute and upload to the round.
    probe_loss: Callable[[np.ndarray, int | None], np.ndarray]
    #: clients whose late reports are still in flight, and when each will reach the server
    #: (absolute simulated seconds) — REFL excludes them and APT counts the ones due this round.
    pending_clients: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pending_arrival_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass
class RoundFeedback:
    """What happened to a launched cohort, aligned with ``clients``."""

    round: int
    clients: np.ndarray
    aggregated: np.ndarray  # bool
    late: np.ndarray  # bool
    train_loss: np.ndarray  # mean local training loss (nan for clients that did not train)
    n_samples: np.ndarray  # samples processed
    finish_s: np.ndarray  # seconds from round start to delivery (if it had not been cut)
    busy_s: np.ndarray  # client-seconds actually spent
    updates: torch.Tensor  # (k, dim) decoded uploads
    duration_s: float


class Selector(ABC):
    """Chooses who trains. State (counts, utilities, ...) is kept as arrays over the population."""

    Config: type[BaseModel]

    def __init__(self, cfg: BaseModel, world: WorldContext):
        self.cfg = cfg
        self.world = world
        self.n_train = world.n_train
        self.seed = world.seed

    @property
    def num_clients(self) -> int:
        return self.world.num_clients

    @abstractmethod
    def target(self) -> int:
        """Reports wanted per round (K)."""

    @abstractmethod
    def select(self, ctx: SelectionContext) -> Cohort:
        """Pick up to ``ctx.launch`` clients from ``ctx.available``."""

    def settle_weights(self, cohort: Cohort, feedback: RoundFeedback) -> np.ndarray:
        """Final aggregation weights once the round has closed (aligned with ``cohort.clients``).

        Most selectors fix weights at selection; some can only weight by what happened (GlueFL's
        actual sticky/non-sticky counts under over-commitment, Adaptive-OU's top-k by training loss).
        """
        return cohort.weights

    def observe(self, feedback: RoundFeedback) -> None:
        """Learn from a closed round (utility-based selectors). Default: nothing."""

    def round_metrics(self) -> dict[str, object]:
        """Extra columns for this round's row of ``rounds.csv`` (e.g. FedGS's solver statistics)."""
        return {}

    def state_dict(self) -> dict[str, np.ndarray]:
        """Arrays to checkpoint. Stateless selectors return nothing."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
