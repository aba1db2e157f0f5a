"""The records one round hands from phase to phase (see :mod:`turnout.sim.engine`), and the row they make.

open → :class:`Opened` (who is available, the cohort, the probe bill) → train → :class:`Trained`
(download bytes, what the clients computed and uploaded) → settle → :class:`Settled` (timing, the
round mode's verdict, who is aggregated or late, late reports that arrived) → aggregate →
:class:`Aggregated` (the reports the server rule saw, coordinates changed) → account →
:class:`Accounted` (what each client is charged) → :func:`round_row`. Every record is frozen and
keyword-only: a phase reads what the earlier ones decided and adds its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch

from ..core.records import Cohort, CohortResult, HeldReports, Reports, RoundClose, RoundFeedback
from ..privacy.secagg import SecAggBill
from ..world.late import Arrived
from ..world.probe import ProbeBill


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Trained:
    lr: float
    down: np.ndarray  # bytes each client downloaded
    result: CohortResult
    decoded: torch.Tensor | HeldReports  # what the server decodes, (k, dim); held where trained (partial sums)
    up: np.ndarray  # upload bytes each client sends when it delivers
    rejected: np.ndarray  # non-finite reports, never aggregated


@dataclass(frozen=True, kw_only=True)
class Settled:
    finish_s: np.ndarray  # seconds from the training start to each client's delivery
    dropped_at_s: np.ndarray
    verdict: RoundClose  # the round mode's decision (who is aggregated, late; how long; busy seconds)
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
    secagg: SecAggBill | None = None  # what secure aggregation added (None: off)


@dataclass(frozen=True, kw_only=True)
class Aggregated:
    reports: Reports
    coords_changed: int


@dataclass(frozen=True, kw_only=True)
class Accounted:
    """What the round charged its clients: upload bytes delivered, seconds wasted, τ(t)."""

    delivered_up: np.ndarray
    wasted: np.ndarray
    stale_wasted: float
    tau: int


def round_row(*, opened: Opened, trained: Trained, settled: Settled, aggregated: Aggregated, accounted: Accounted,
              sim_time_s: float, extra: Mapping[str, object]) -> dict[str, object]:
    """A round's row of ``rounds.csv`` from its phase records.

    Only simulated quantities: the same config and seed give the same row, bit for bit.
    ``accuracy`` and ``loss`` are filled in by evaluation rounds.
    """
    agg, result, ok = settled.aggregated, trained.result, settled.stale_ok
    return {
        "round": opened.round, "sim_time_s": sim_time_s, "round_duration_s": settled.duration_s,
        "accuracy": float("nan"), "loss": float("nan"),
        "train_loss": float(np.average(result.losses[agg], weights=np.maximum(result.samples[agg], 1)))
        if agg.any() else float("nan"),
        "lr": trained.lr, "bytes_up": int(accounted.delivered_up.sum()) + opened.probe.bytes_up
        + (int(settled.secagg.up.sum()) if settled.secagg is not None else 0),
        "bytes_down": int(trained.down.sum()) + opened.probe.bytes_down
        + (int(settled.secagg.down.sum()) if settled.secagg is not None else 0),
        "n_available": int(len(opened.available)), "n_selected": opened.size, "n_aggregated": len(aggregated.reports),
        "n_stale": int(ok.sum()), "n_late": int(settled.late.sum()), "n_stale_dropped": int((~ok).sum()),
        "n_dropped": int((settled.finish_s > settled.dropped_at_s).sum()), "n_rejected": int(trained.rejected.sum()),
        "download_s": settled.download_s, "compute_s": settled.compute_s, "upload_s": settled.upload_s,
        "resource_s": float(settled.verdict.busy_s.sum()) + opened.probe.busy_s,
        "wasted_s": float(accounted.wasted.sum()) + accounted.stale_wasted,
        "tau": accounted.tau, "coords_changed": int(aggregated.coords_changed),
        **extra,
    }


#: the staleness histogram's bins of an asynchronous round's row: ``staleness_LO_HI`` counts reports with
#: LO ≤ τ ≤ HI (``staleness_16+``: τ ≥ 16)
STALENESS_BINS = ((0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, None))


def asynchronous_columns(settled: Settled, aggregated: Aggregated, in_flight: int) -> dict[str, object]:
    """What an asynchronous round adds to its row, or says differently: arrivals, reports still in flight, the
    staleness of the reports aggregated (mean, max, histogram; ``n_stale``: those with τ > 0), and ``train_loss``
    over them weighted by their clients' sample counts (every report arrives from the in-flight buffer, so
    :func:`round_row`'s fresh-cohort columns would be empty). ``n_late`` stays the launched clients that went in
    flight; the critical-path seconds are NaN: the reports of one update come from several cohorts."""
    reports = aggregated.reports
    tau = np.asarray(reports.staleness, np.int64)
    cols: dict[str, object] = {
        "n_arrived": len(settled.arrived), "n_in_flight": int(in_flight), "n_stale": int(np.count_nonzero(tau > 0)),
        # the critical path of a round is its cohort's; an asynchronous round's reports come from several cohorts
        "download_s": float("nan"), "compute_s": float("nan"), "upload_s": float("nan"),
        "staleness_mean": float(tau.mean()) if len(tau) else float("nan"),
        "staleness_max": int(tau.max()) if len(tau) else 0,
        "train_loss": float(np.average(reports.losses, weights=np.maximum(reports.n_samples, 1)))
        if len(tau) else float("nan"),
    }
    for lo, hi in STALENESS_BINS:
        name = f"staleness_{lo}+" if hi is None else f"staleness_{lo}" if lo == hi else f"staleness_{lo}_{hi}"
        cols[name] = int(np.count_nonzero((tau >= lo) & (tau <= (hi if hi is not None else tau.max(initial=lo)))))
    return cols
