"""When reports started in earlier rounds meet a round's close: the round loop's timing policy.

The one round loop (:class:`turnout.sim.engine.Simulation`) parks every report that arrives after its round
closed (:class:`~turnout.world.late.LateBuffer`). What a round then makes of the reports in flight is its
*timing*, chosen once, when the loop is built, from the round mode's :attr:`RoundMode.timing
<turnout.round_modes.base.RoundMode.timing>` through :data:`TIMINGS`:

* :class:`SynchronousTiming` (wait-all, deadline, over-commitment): a round closes on its own cohort; late
  reports arrive when they arrive and the server rule takes those it can use (at most the rule's
  ``max_staleness`` rounds old); the selector learns from the round's cohort; the row's cohort columns describe
  the launched cohort.
* :class:`AsynchronousTiming` (FedAsync, FedBuff; notes: ``docs/algorithms/asynchronous.md``): every report
  is in flight; the round mode closes on the usable reports in flight (:meth:`RoundMode.close_in_flight
  <turnout.round_modes.base.RoundMode.close_in_flight>`), a report arriving in the round it started in is
  fresh whatever the rule, the selector learns from what arrived, and the row describes the reports aggregated
  (their staleness) instead of one cohort. With ``round_mode.refill: arrival`` it also refills the free slots at
  the round's first K − 1 arrivals (:meth:`AsynchronousTiming.refill`, FedBuff's Algorithm 1).

A third timing (semi-asynchronous or tiered FL) is one more subclass registered here, named by its round
mode's ``timing``; the loop does not change (``ARCHITECTURE.md``, "Timing").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from ..algorithms.base import Algorithm
from ..core.records import RoundClose, RoundFeedback
from ..core.registry import Registry
from ..world.late import Arrived, LateBuffer
from ..world.lost import LostTasks
from .phases import Aggregated, Launched, Opened, Refilled, Settled, Trained

if TYPE_CHECKING:
    from .engine import Simulation

TIMINGS: Registry = Registry("timing", "how a round's close meets the reports started in earlier rounds")


class Timing(ABC):
    """What the reports in flight mean to one round: the close's view of them, which of them the server rule takes,
    what the selector learns and how the row describes the round. Stateless: everything it reads is the run's."""

    #: the reports of one update come from several cohorts (validation refuses components bound to one cohort)
    mixes_cohorts: ClassVar[bool] = False

    def __init__(self, algorithm: Algorithm):
        self.algorithm = algorithm

    def takes_stale(self, r: int, origin_round: np.ndarray) -> np.ndarray:
        """Which reports started in ``origin_round`` the server rule takes in round ``r`` by its own rule: it uses
        late reports and they are at most ``max_staleness`` rounds old."""
        age = r - np.asarray(origin_round, np.int64)
        bound = self.algorithm.max_staleness
        return np.zeros(len(age), bool) if bound is None else age <= bound

    @abstractmethod
    def usable(self, r: int, origin_round: np.ndarray) -> np.ndarray:
        """Which reports started in ``origin_round`` the server rule takes in round ``r``."""

    @abstractmethod
    def in_flight(self, r: int, t0: float, late: LateBuffer, lost: LostTasks) -> tuple[np.ndarray, np.ndarray]:
        """What the round mode's close sees of the tasks launched earlier, in seconds after ``t0``: when the usable
        reports in flight arrive, and when those that bring nothing usable end (lost, or too stale)."""

    @abstractmethod
    def arrivals(self, r: int, t_end: float, late: LateBuffer, limit: int | None) -> Arrived:
        """The parked reports that reach the server by the close at ``t_end`` (at most ``limit`` counted)."""

    @abstractmethod
    def feedback(self, opened: Opened, trained: Trained, settled: Settled) -> RoundFeedback:
        """What the selector learns from the round."""

    @abstractmethod
    def cohort_columns(self, trained: Trained, settled: Settled, aggregated: Aggregated) -> dict[str, object]:
        """The row's columns that describe whose reports were aggregated: ``train_loss``, ``n_stale`` and the
        critical path's ``download_s``, ``compute_s`` and ``upload_s``."""

    def extra_columns(self, settled: Settled, aggregated: Aggregated, in_flight: int) -> dict[str, object]:
        """Columns this timing adds at the end of the row (none by default)."""
        return {}

    def refill(self, sim: Simulation, opened: Opened, verdict: RoundClose, late: np.ndarray, duration_s: float,
               end_s: float) -> Refilled:
        """Clients launched between the round's open and its close, once its cohort is in flight (``late``) or
        lost, and the round's ``duration_s`` and ``end_s`` with them: nobody and unchanged, by default."""
        return Refilled(launched=Launched.join([]), duration_s=duration_s, end_s=end_s)


@TIMINGS.register("synchronous")
class SynchronousTiming(Timing):
    """A round closes on its own cohort; late reports arrive when they arrive (wait-all, deadline, over-commit)."""

    def usable(self, r: int, origin_round: np.ndarray) -> np.ndarray:
        return self.takes_stale(r, origin_round)

    def in_flight(self, r: int, t0: float, late: LateBuffer, lost: LostTasks) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(0), np.zeros(0)

    def arrivals(self, r: int, t_end: float, late: LateBuffer, limit: int | None) -> Arrived:
        return late.pop_arrived(t_end, limit)

    def feedback(self, opened: Opened, trained: Trained, settled: Settled) -> RoundFeedback:
        return settled.feedback

    def cohort_columns(self, trained: Trained, settled: Settled, aggregated: Aggregated) -> dict[str, object]:
        agg, result = settled.aggregated, trained.result
        return {"train_loss": float(np.average(result.losses[agg], weights=np.maximum(result.samples[agg], 1)))
                if agg.any() else float("nan"),
                "n_stale": int(settled.stale_ok.sum()),
                "download_s": settled.download_s, "compute_s": settled.compute_s, "upload_s": settled.upload_s}


#: the staleness histogram's bins of an asynchronous round's row: ``staleness_LO_HI`` counts reports with
#: LO ≤ τ ≤ HI (``staleness_16+``: τ ≥ 16)
STALENESS_BINS = ((0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, None))


@TIMINGS.register("asynchronous")
class AsynchronousTiming(Timing):
    """C clients in flight, an update at the K-th usable arrival (:mod:`turnout.round_modes.asynchronous`)."""

    mixes_cohorts = True

    def usable(self, r: int, origin_round: np.ndarray) -> np.ndarray:
        """The rule's own choice, and a report that arrives in the round it started in is fresh, whatever the rule."""
        age = r - np.asarray(origin_round, np.int64)
        return self.takes_stale(r, origin_round) | (age == 0)

    def in_flight(self, r: int, t0: float, late: LateBuffer, lost: LostTasks) -> tuple[np.ndarray, np.ndarray]:
        """The round closes at the K-th report the server rule can use (the max_staleness rule: a report too stale
        is dropped on arrival and does not count), or when the last one arrives or is lost. Tasks in flight that
        will bring nothing usable (a client that goes offline first, a report too stale) only end a round that has
        too few usable reports to wait for."""
        usable = self.usable(r, late.origin_round)
        return late.arrival_s[usable] - t0, np.concatenate([lost.gone_s, late.arrival_s[~usable]]) - t0

    def arrivals(self, r: int, t_end: float, late: LateBuffer, limit: int | None) -> Arrived:
        """Only usable reports count towards the buffer's K (FedScale's ``max_staleness``)."""
        return late.pop_arrived(t_end, limit, self.usable(r, late.origin_round))

    def feedback(self, opened: Opened, trained: Trained, settled: Settled) -> RoundFeedback:
        """The reports that arrived (their losses, sizes and durations, whatever round launched them) and the
        clients of this launch that were lost. A launched client's report is learnt from when it reaches the
        server, never at its launch."""
        arrived, lost = settled.arrived, ~settled.late
        more = settled.refilled.launched if settled.refilled is not None else Launched.join([])
        gone = ~more.late  # launched mid-round and lost
        n_lost = int(lost.sum()) + int(gone.sum())
        return RoundFeedback(
            opened.round, np.concatenate([arrived.clients, opened.clients[lost], more.clients[gone]]),
            np.concatenate([settled.stale_ok, np.zeros(n_lost, bool)]), np.zeros(len(arrived) + n_lost, bool),
            np.concatenate([arrived.losses, np.full(n_lost, np.nan)]),
            np.concatenate([arrived.n_samples, trained.result.samples[lost], more.samples[gone]]),
            np.concatenate([arrived.busy_s, settled.finish_s[lost], more.finish_s[gone]]),
            np.concatenate([arrived.busy_s, settled.verdict.busy_s[lost], more.busy_s[gone]]),
            torch.cat([arrived.updates, arrived.updates.new_zeros((n_lost, arrived.updates.shape[1]))]),
            settled.duration_s)

    def cohort_columns(self, trained: Trained, settled: Settled, aggregated: Aggregated) -> dict[str, object]:
        """Over the reports aggregated: ``train_loss`` weighted by their clients' sample counts (every report arrives
        from the in-flight buffer, so the fresh cohort's would be empty) and ``n_stale`` (those with τ > 0); the
        critical-path seconds are NaN: the reports of one update come from several cohorts."""
        reports = aggregated.reports
        tau = np.asarray(reports.staleness, np.int64)
        return {"train_loss": float(np.average(reports.losses, weights=np.maximum(reports.n_samples, 1)))
                if len(tau) else float("nan"),
                "n_stale": int(np.count_nonzero(tau > 0)),
                "download_s": float("nan"), "compute_s": float("nan"), "upload_s": float("nan")}

    def extra_columns(self, settled: Settled, aggregated: Aggregated, in_flight: int) -> dict[str, object]:
        """Arrivals, reports still in flight and the staleness of the reports aggregated (mean, max, histogram).
        ``n_late`` stays the launched clients that went in flight."""
        tau = np.asarray(aggregated.reports.staleness, np.int64)
        cols: dict[str, object] = {
            "n_arrived": len(settled.arrived), "n_in_flight": int(in_flight),
            "staleness_mean": float(tau.mean()) if len(tau) else float("nan"),
            "staleness_max": int(tau.max()) if len(tau) else 0,
        }
        for lo, hi in STALENESS_BINS:
            name = f"staleness_{lo}+" if hi is None else f"staleness_{lo}" if lo == hi else f"staleness_{lo}_{hi}"
            cols[name] = int(np.count_nonzero((tau >= lo) & (tau <= (hi if hi is not None else tau.max(initial=lo)))))
        if settled.refilled is not None and settled.refilled.refills:  # refill: arrival (FedBuff's Algorithm 1)
            cols["n_refilled"] = len(settled.refilled.launched)
        return cols

    def refill(self, sim: Simulation, opened: Opened, verdict: RoundClose, late: np.ndarray, duration_s: float,
               end_s: float) -> Refilled:
        """FedBuff's Algorithm 1 (``round_mode.refill: arrival``): each of the round's first ``K − 1`` usable
        arrivals (:meth:`RoundMode.refills <turnout.round_modes.base.RoundMode.refills>`) refills the slots free at
        that instant, ``C`` minus the devices still busy, from the model of this round; arrivals at one instant
        refill once. A client launched then can arrive before the K-th arrival itself, so the arrivals are taken
        again after each launch, in time order; the round closes at the K-th usable arrival of them all."""
        events = sim.round_mode.refills()
        if not events:
            return super().refill(sim, opened, verdict, late, duration_s, end_s)
        r, t0 = opened.round, opened.train_start_s
        busy = np.asarray(verdict.busy_s, np.float64)
        # the cohort's tasks that end with their client offline before the first close hold their devices until then
        ending = ~late & np.isfinite(busy) & ~(busy > verdict.duration_s)
        sim.lost.add(opened.clients[ending], t0 + busy[ending])
        parts: list[Launched] = []
        done = 0  # arrivals that refilled already (the first ones in time order, which later launches cannot precede)
        while True:
            arrivals = np.sort(sim.late.arrival_s[self.usable(r, sim.late.origin_round)])
            n = min(events, len(arrivals))
            if done >= n:
                break
            at = max(float(arrivals[done]), t0)  # one already in before the round started frees its slot now
            done = int(np.count_nonzero(arrivals[:n] <= at))
            free = sim.selector.target() - int(np.count_nonzero(sim.late.arrival_s > at)) \
                - int(np.count_nonzero(sim.lost.gone_s > at))
            if free > 0:
                parts.append(sim.launch_at(r, at, free, event=len(parts) + 1))
        if not parts:
            return Refilled(launched=Launched.join([]), duration_s=duration_s, end_s=end_s, refills=True)
        in_flight_s, lost_s = self.in_flight(r, t0, sim.late, sim.lost)
        close = sim.round_mode.close_in_flight(np.zeros(0), np.zeros(0), opened.cohort.target, in_flight_s, lost_s)
        end = t0 + close.duration_s
        k = sim.round_mode.arrivals_taken()
        arrivals = np.sort(sim.late.arrival_s[self.usable(r, sim.late.origin_round)])
        if k is not None and len(arrivals) >= k:  # the K-th arrival is in, whatever the rounding of t0 + (a − t0)
            end = max(end, float(arrivals[k - 1]))
        return Refilled(launched=Launched.join(parts), duration_s=end - opened.start_s, end_s=end, refills=True)


def timing_for(round_mode: type, key: str = "round_mode.name") -> type[Timing]:
    """The timing a round mode's class declares (``RoundMode.timing``); an unknown one is refused in one line."""
    return TIMINGS.get(round_mode.timing, key)


__all__ = ["STALENESS_BINS", "TIMINGS", "AsynchronousTiming", "SynchronousTiming", "Timing", "timing_for"]
