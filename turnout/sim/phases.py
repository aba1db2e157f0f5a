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
    #: which launch of the round: 0 at its open, 1, 2, … for slots refilled at arrivals (:class:`Launched`)
    launch: int = 0

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
class Launched:
    """Clients launched between a round's open and its close (an asynchronous round that refills free slots at
    arrivals, :meth:`turnout.sim.timing.Timing.refill`), one row each, in launch order. Their reports are in
    flight, or their tasks among the lost ones; the round charges them as it charges its cohort."""

    clients: np.ndarray
    start_s: np.ndarray  # when its work started (simulated seconds)
    finish_s: np.ndarray  # seconds from its start to its delivery
    busy_s: np.ndarray  # seconds its device works (until it delivers or goes offline)
    down: np.ndarray  # bytes downloaded
    up: np.ndarray  # upload bytes delivered
    wasted_s: np.ndarray  # seconds worked for nothing (it went offline, its report was rejected)
    late: np.ndarray  # bool: its report went in flight
    dropped: np.ndarray  # bool: it goes offline before it delivers
    rejected: np.ndarray  # bool: its report is not finite
    samples: np.ndarray
    probe_bytes_up: int = 0
    probe_bytes_down: int = 0
    probe_busy_s: float = 0.0

    def __len__(self) -> int:
        return len(self.clients)

    @classmethod
    def join(cls, parts: list[Launched]) -> Launched:
        """One record of several launches, in their order (none: an empty record)."""
        if not parts:
            z, b = np.zeros(0, np.int64), np.zeros(0, bool)
            return cls(clients=z, start_s=np.zeros(0), finish_s=np.zeros(0), busy_s=np.zeros(0), down=z, up=z,
                       wasted_s=np.zeros(0), late=b, dropped=b, rejected=b, samples=z)
        cat = {f: np.concatenate([getattr(p, f) for p in parts]) for f in
               ("clients", "start_s", "finish_s", "busy_s", "down", "up", "wasted_s", "late", "dropped",
                "rejected", "samples")}
        return cls(**cat, probe_bytes_up=sum(p.probe_bytes_up for p in parts),
                   probe_bytes_down=sum(p.probe_bytes_down for p in parts),
                   probe_busy_s=float(sum(p.probe_busy_s for p in parts)))


@dataclass(frozen=True, kw_only=True)
class Refilled:
    """What a round launched between its open and its close, and the close once they are in flight: ``duration_s``
    and ``end_s`` as the round's own (unchanged when nothing was launched). ``refills``: whether the run refills
    slots at arrivals at all (its rows then count ``n_refilled``)."""

    launched: Launched
    duration_s: float
    end_s: float
    refills: bool = False


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
    refilled: Refilled | None = None  # clients launched between the open and the close (None: nobody)


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
              sim_time_s: float, timed: Mapping[str, object], extra: Mapping[str, object]) -> dict[str, object]:
    """A round's row of ``rounds.csv`` from its phase records.

    ``timed``: the columns that describe whose reports were aggregated, as the run's timing says
    (:meth:`turnout.sim.timing.Timing.cohort_columns`: ``train_loss``, ``n_stale``, ``download_s``, ``compute_s``,
    ``upload_s``); ``extra``: the columns that follow the round's own. Only simulated quantities: the same config
    and seed give the same row, bit for bit. ``accuracy`` and ``loss`` are filled in by evaluation rounds.
    """
    ok = settled.stale_ok
    more = settled.refilled.launched if settled.refilled is not None else Launched.join([])  # mid-round launches
    return {
        "round": opened.round, "sim_time_s": sim_time_s, "round_duration_s": settled.duration_s,
        "accuracy": float("nan"), "loss": float("nan"),
        "train_loss": timed["train_loss"],
        "lr": trained.lr, "bytes_up": int(accounted.delivered_up.sum()) + opened.probe.bytes_up
        + (int(settled.secagg.up.sum()) if settled.secagg is not None else 0) + int(more.up.sum())
        + more.probe_bytes_up,
        "bytes_down": int(trained.down.sum()) + opened.probe.bytes_down
        + (int(settled.secagg.down.sum()) if settled.secagg is not None else 0) + int(more.down.sum())
        + more.probe_bytes_down,
        "n_available": int(len(opened.available)), "n_selected": opened.size + len(more),
        "n_aggregated": len(aggregated.reports),
        "n_stale": timed["n_stale"], "n_late": int(settled.late.sum()) + int(more.late.sum()),
        "n_stale_dropped": int((~ok).sum()),
        "n_dropped": int((settled.finish_s > settled.dropped_at_s).sum()) + int(more.dropped.sum()),
        "n_rejected": int(trained.rejected.sum()) + int(more.rejected.sum()),
        "download_s": timed["download_s"], "compute_s": timed["compute_s"], "upload_s": timed["upload_s"],
        "resource_s": float(settled.verdict.busy_s.sum()) + opened.probe.busy_s
        + float(more.busy_s.sum()) + more.probe_busy_s,
        "wasted_s": float(accounted.wasted.sum()) + accounted.stale_wasted
        + float(more.wasted_s.sum()),
        "tau": accounted.tau, "coords_changed": int(aggregated.coords_changed),
        **extra,
    }
