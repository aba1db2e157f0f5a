"""Deadline rounds: aggregate what arrives within ``deadline_s``; later arrivals are kept as late reports.

Follows REFL's "DL" mode (REFL §5.1, the code's ``exp_type = 0``; notes:
``docs/algorithms/world.md#deadline-rounds``): by default no over-commitment; the clients that deliver within
the deadline ``d`` are collected in completion order; the clock advances by ``d``. Clients that miss
the deadline but do not drop out are the stragglers of REFL's SAA (REFL §4.2): they keep training
from the model they downloaded and are flagged ``late`` so that an engine / algorithm that uses
stale updates can apply them in a later round (physically consistent staleness,
``docs/algorithms/world.md#late-reports``). Whether a late report is eventually used — and so
whether its client-seconds count as wasted — is the engine's business, not the round mode's.

Choices and deviations:

- ``oc``: launch ``ceil(oc·K)`` clients for ``K`` reports wanted. REFL's comparison with SAFA (§5.3, Fig. 7)
  pre-selects 100 learners with an 80 % target and a 100-s deadline: ``K = 80``, ``oc = 1.25``,
  ``max_reports: target``, ``advance: last_arrival``. Default 1 (REFL's DL: exactly K launched).
- ``max_reports``: REFL collects the on-time clients "up to N_t" (``target``); since DL launches
  exactly K clients this only matters when a selector launches more than K (e.g. the SAFA
  emulation, ``baselines.md#safa``, which launches every online client). Default ``all``; on-time reports beyond
  the cap are handled like late ones (REFL's code puts them into its straggler cache).
- ``advance``: REFL advances the clock by ``d`` (``deadline``). ``last_arrival`` closes earlier
  when the server can know nothing more will be aggregated: once every launched client has
  delivered or gone offline, or — with ``max_reports: target`` — once K reports are in; never
  later than ``d``. This is the physically consistent version of REFL's ``last_worker`` flag.
- The moving-average duration μ_t of REFL §4.1 is *not* the round duration here: REFL only logs μ_t
  (its clock still advances by ``d``), and μ_t as the availability / stale window belongs to the
  selector and the engine. ``duration_s`` is always the clock advance.
- ``min_reports``: [QUIRK] — the REFL code never fails a round (``round_update = True``) even
  though the paper aborts rounds below target (REFL §2.1). Default 0 follows the code; with
  ``min_reports > 0`` a round that aggregates fewer reports fails: nothing is aggregated, the on-time
  work is wasted, late clients are still flagged late (they keep training and may be used in a later
  round).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..config.base import OverCommitment, Seconds, StrictModel
from ..config.limits import MAX_CLIENTS
from .base import ROUND_MODES, RoundClose, RoundMode
from .over_commit import first_to_deliver, over_committed


class DeadlineConfig(StrictModel):
    deadline_s: Seconds = Field(100.0, description="round deadline d in simulated seconds (REFL: 100; 300 for NLP; "
                                                 "at most 1e9)")
    keep_late: bool = Field(
        True, description="true: clients that miss the deadline but do not drop out keep training and are "
                          "flagged late (stale reports for a later round, REFL's SAA); false: the server "
                          "cuts them at the close and their work is wasted")
    max_reports: Literal["target", "all"] = Field(
        "all", description="all: aggregate every on-time report; target: at most K, in completion order "
                           "(REFL's 'up to N_t'); on-time reports over the cap are handled like late ones")
    advance: Literal["deadline", "last_arrival"] = Field(
        "deadline", description="deadline: the round always lasts d (REFL); last_arrival: it closes as soon "
                                "as every launched client has delivered or dropped out (or K reports are in "
                                "with max_reports=target), never later than d")
    oc: OverCommitment = Field(1.0, description="over-commitment: launch ceil(oc·K) clients for K wanted reports "
                                                "(1: exactly K, REFL's DL; REFL's Fig. 7 pre-selects 100 for an "
                                                "80 % target: K = 80, oc = 1.25)")
    min_reports: int = Field(
        0, ge=0, le=MAX_CLIENTS,
        description="round-failure rule (0 = rounds never fail, as in REFL's code): with fewer "
                    "aggregated reports the round aggregates nothing and its on-time work is wasted")


@ROUND_MODES.register("deadline")
class Deadline(RoundMode):
    """Aggregate the reports that arrive within a fixed deadline; keep later ones as stale (REFL DL)."""

    Config = DeadlineConfig

    def launch_count(self, target: int) -> int:
        return over_committed(target, self.cfg.oc)

    def close(self, finish_s: np.ndarray, dropped_at_s: np.ndarray, target: int) -> RoundClose:
        c = self.cfg
        finish_s = np.asarray(finish_s, dtype=np.float64)
        dropped_at_s = np.asarray(dropped_at_s, dtype=np.float64)
        n = len(finish_s)
        d = float(c.deadline_s)

        survives = finish_s <= dropped_at_s
        until_gone = np.minimum(finish_s, dropped_at_s)
        on_time = survives & (finish_s <= d)  # REFL DL: completion ≤ d
        cap = max(int(target), 0) if c.max_reports == "target" else n
        aggregated = first_to_deliver(finish_s, on_time, cap)  # completion order, ties by cohort index

        if n == 0:
            duration = 0.0
        elif c.advance == "deadline":
            duration = d  # REFL DL: clock += d
        elif c.max_reports == "target" and cap > 0 and int(aggregated.sum()) >= cap:
            duration = float(finish_s[aggregated].max())  # K reports in: nothing more will be aggregated
        else:
            duration = min(d, float(until_gone.max()))  # everyone delivered or dropped, or the deadline

        failed = int(aggregated.sum()) < c.min_reports
        if failed:
            aggregated = np.zeros(n, dtype=bool)  # optional failure rule (min_reports): aggregate nothing

        if c.keep_late:
            # Survivors not aggregated keep working to the end and are kept for later — except, in a
            # failed round, the on-time ones: their reports arrived for a round that was abandoned.
            late = survives & ~aggregated & ~(failed & on_time)
            busy = until_gone.copy()  # nobody is cut: doomed clients work until they go offline
        else:
            late = np.zeros(n, dtype=bool)
            # The server stops waiting at the close; reports already in (aggregated or not) took `finish`.
            busy = np.minimum(until_gone, duration) if n else np.zeros(0)
        busy = np.where(aggregated, finish_s, busy)
        return RoundClose(aggregated=aggregated, late=late, duration_s=float(duration), busy_s=busy)
