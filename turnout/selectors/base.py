"""The selector interface: choose a cohort from the available set and weight its members.

A selector sees one :class:`SelectionContext` per round — who is available, how many to launch,
its random stream, and the services some selectors need (the availability model for REFL's
oracle predictions and ``probe_loss`` for Power-of-Choice, whose cost the engine charges to the
round) — and gets a :class:`RoundFeedback` after the round closes (durations, losses, updates)
to learn from. Both records are frozen. A :class:`Cohort` may carry per-member ``tags`` (GlueFL's
sticky flags) that later seams of the same round read from the cohort itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
from pydantic import BaseModel

from ..core.capabilities import Deployable
from ..core.records import Cohort, RoundFeedback, SelectionContext
from ..core.registry import Registry
from ..core.state import Stateful
from ..world.context import WorldContext

SELECTORS: Registry = Registry("selector", "cohort and aggregation weights, given the available set and history")


class Selector(Stateful, Deployable, ABC):
    """Chooses who trains. State (counts, utilities, ...) is kept as arrays over the population.

    A selector declares the attributes that change during a run in ``state_attrs`` (see
    :mod:`turnout.core.state`), so a run can be checkpointed and resumed exactly.
    """

    Config: type[BaseModel]
    #: why the selector needs a trained model (it ranks clients by loss); empty: it decides from the
    #: world alone (availability, sizes, history), so it runs in the system-only mode (``--no-train``)
    needs_training: str = ""
    #: reads the clients' uploads (``RoundFeedback.updates``) on the CPU, so reports must come back from a GPU
    #: (or from the Ray actors that trained them, instead of being summed there)
    reads_uploads: bool = False
    #: chooses a cohort of any size up to ``ctx.launch``, one client included: asynchronous rounds ask it to
    #: refill the slots freed by arrivals. False: it builds a whole cohort of ``clients_per_round`` at once
    fills_free_slots: ClassVar[bool] = False
    #: why the choice of a cohort reads client data (losses, update norms, labels, sample counts): what such a
    #: choice releases is not covered by a DP mechanism's noise, and no amplification by sampling is claimed for
    #: it. Empty: the choice depends on the world alone (availability, device timings, its own randomness, history)
    reads_client_data: ClassVar[str] = "does not declare whether its choice reads client data"

    def __init__(self, cfg: BaseModel, world: WorldContext):
        self.cfg = cfg
        self.world = world
        self.n_train = world.n_train
        self.seed = world.seed

    @classmethod
    def cannot_fill_slots(cls, cfg: BaseModel) -> str:
        """Why this selector, under options ``cfg``, cannot refill free slots a few at a time (empty: it can)."""
        return "" if cls.fills_free_slots else f"chooses a whole cohort of {cfg.clients_per_round} at once" \
            if hasattr(cfg, "clients_per_round") else "chooses a whole cohort at once"

    @classmethod
    def weights_per_cohort(cls, cfg: BaseModel) -> tuple[str, str] | None:
        """``(option, why)`` when this selector, under options ``cfg``, gives absolute weights scaled to a cohort of
        ``clients_per_round`` reports (an unbiased estimate of the full-population mean only when that many
        reports are averaged); ``None``: its weights are relative, or it has no such option."""
        return None

    @property
    def num_clients(self) -> int:
        return self.world.num_clients

    def target(self) -> int:
        """Reports wanted per round (K): the config's ``clients_per_round`` (a selector that derives K otherwise,
        GlueFL's sticky groups or SAFA's "everyone", overrides this)."""
        return int(self.cfg.clients_per_round)

    @abstractmethod
    def select(self, ctx: SelectionContext) -> Cohort:
        """Pick up to ``ctx.launch`` clients from ``ctx.available``."""

    def inclusion_probabilities(self, available: np.ndarray, launch: int) -> np.ndarray | None:
        """Each available client's probability of being launched this round, when the selector can say it (its
        choice reads no client data and depends on no state it keeps); None: not declared (no amplified
        privacy accounting)."""
        return None

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
