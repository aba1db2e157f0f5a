"""The records one round hands from phase to phase (see :mod:`turnout.sim.engine`).

open → :class:`Opened` (who is available, the cohort, the probe bill) → train → :class:`Trained`
(download bytes, what the clients computed and uploaded) → close → :class:`Closed` (timing, who is
aggregated or late, late reports that arrived) → aggregate → :class:`Aggregated` (the reports the
server rule saw, coordinates changed). Every record is frozen: a phase reads what the earlier ones
decided and adds its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.records import Cohort, CohortResult, Reports, RoundClose, RoundFeedback
from ..world.late import Arrived


@dataclass(frozen=True)
class ProbeBill:
    """What loss probes cost before training: the round starts after the slowest answer."""

    seconds: float
    bytes_down: int
    bytes_up: int
    busy_s: float

    @classmethod
    def none(cls) -> "ProbeBill":
        return cls(0.0, 0, 0, 0.0)


@dataclass(frozen=True)
class Opened:
    round: int
    start_s: float  # simulated time the round opened (before probes)
    train_start_s: float  # when the cohort starts its work (after probes)
    available: np.ndarray
    cohort: Cohort
    probe: ProbeBill

    @property
    def clients(self) -> np.ndarray:
        return self.cohort.clients

    @property
    def size(self) -> int:
        return len(self.cohort.clients)


@dataclass(frozen=True)
class Trained:
    lr: float
    down: np.ndarray  # bytes each client downloaded
    result: CohortResult
    decoded: torch.Tensor  # what the server decodes, (k, dim)
    up: np.ndarray  # upload bytes each client sends when it delivers
    rejected: np.ndarray  # non-finite reports, never aggregated


@dataclass(frozen=True)
class Closed:
    finish_s: np.ndarray  # seconds from the training start to each client's delivery
    dropped_at_s: np.ndarray
    close: RoundClose
    aggregated: np.ndarray  # bool: fresh reports used this round
    late: np.ndarray  # bool: reports that will arrive after the close
    duration_s: float
    end_s: float
    download_s: float  # GlueFL's DT for this round
    feedback: RoundFeedback
    weights: np.ndarray  # settled aggregation weights (aligned with the cohort)
    arrived: Arrived  # late reports that reached the server by the close
    stale_ok: np.ndarray  # bool over ``arrived``: used by the server rule
    compute_s: float = 0.0  # the critical client's compute seconds (GlueFL Fig. 9)
    upload_s: float = 0.0  # the critical client's upload seconds (GlueFL Fig. 9)


@dataclass(frozen=True)
class Aggregated:
    reports: Reports
    coords_changed: int
