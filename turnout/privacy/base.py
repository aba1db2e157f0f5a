"""The privacy seam: what a client-level DP mechanism does at the two seams around the server rule.

A mechanism sees each client's report where it becomes a report (:meth:`Privacy.clip`, before any
compressor encodes it), the round's reports just before the server rule reads them
(:meth:`Privacy.privatize`: noise on the clipped sum), who could have been chosen in each round
(:meth:`Privacy.record_selection`, for amplified accounting) and, at the end, how often each client was
aggregated (:meth:`Privacy.summary`). It never edits a server rule: a rule whose step is a weighted mean
of the reports (``Algorithm.reads_each_report == ""``) reads the noised estimate through ``Reports.weighted_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from pydantic import BaseModel

from ..core.capabilities import Deployable
from ..core.records import Reports
from ..core.registry import Registry
from ..core.state import Stateful

PRIVACY: Registry = Registry("privacy", "client-level differential privacy: clipping, noise, accounting")


@dataclass(frozen=True)
class PrivacyContext:
    """What a mechanism knows when it is built."""

    num_clients: int
    seed: int
    rounds: int


@dataclass(frozen=True)
class SelectionFacts:
    """What the selector declares about its choice, for accounting (see ``Selector.reads_client_data``)."""

    selector: str
    reads_client_data: str  # why its choice reads client data ("" : it does not)
    target: int  # K, the reports a round wants: the fixed denominator


class Privacy(Stateful, Deployable):
    """No privacy: reports pass unchanged and nothing is accounted (the ``none`` mechanism)."""

    Config: type[BaseModel]
    #: the mechanism reads (clips) each report, so reports cannot be summed where they were trained
    clips: ClassVar[bool] = False

    def __init__(self, cfg: BaseModel, ctx: PrivacyContext):
        self.cfg = cfg
        self.ctx = ctx

    @property
    def active(self) -> bool:
        """Whether this mechanism changes anything (adds columns to the run's tables)."""
        return False

    def attach(self, facts: SelectionFacts) -> None:
        """Called once the selector is built: its target K and what its choice reads."""

    def clip(self, round: int, clients: np.ndarray, updates: torch.Tensor) -> torch.Tensor:
        """Each client's report as the mechanism lets it leave the client (before any compressor)."""
        return updates

    def privatize(self, round: int, reports: Reports) -> Reports:
        """The reports the server rule reads (noise on their clipped sum)."""
        return reports

    def record_selection(self, round: int, available: np.ndarray, probabilities: np.ndarray | None) -> None:
        """Who could have been chosen this round, with what inclusion probability (None: not declared)."""

    def round_metrics(self) -> dict[str, object]:
        """This round's columns (clip norm, fraction clipped, noise std)."""
        return {}

    def summary(self, times_aggregated: np.ndarray, rounds_run: int) -> tuple[dict, dict[str, np.ndarray]]:
        """(``summary.json`` entries, ``clients.csv`` columns) once the run is over."""
        return {}, {}
