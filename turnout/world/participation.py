"""Participation metrics: FedSUM's delays τ(t), FedGS's sampling counts, GlueFL's re-sampling gaps.

All per-client state is arrays over the population, updated once per round in O(N) numpy.

- ``τ_i(t)``: last round ≤ t in which client i participated (its report was aggregated); −1 if never.
- ``τ(t) = t − min_i τ_i(t)`` (spec §1.1, counting round t's own participation), so full
  participation gives τ(t) = 0 and cyclic blocks of m out of n give τ_max = n/m − 1.
- Re-sampling gaps: rounds between consecutive selections of a client (GlueFL Props. 1–2).
"""

from __future__ import annotations

import numpy as np


class ParticipationTracker:
    """Last-participation times, delay per round, and per-client selection-gap statistics."""

    def __init__(self, num_clients: int):
        self.last_participation = np.full(num_clients, -1, np.int64)
        self.last_selected = np.full(num_clients, -1, np.int64)
        self.gap_sum = np.zeros(num_clients, np.int64)
        self.gap_count = np.zeros(num_clients, np.int64)
        self.gap_max = np.zeros(num_clients, np.int64)
        self.taus: list[int] = []

    def record(self, round: int, selected: np.ndarray, participated: np.ndarray) -> int:
        """Update with round ``round``'s selected and participating client ids; return τ(round)."""
        seen = selected[self.last_selected[selected] >= 0]
        gaps = round - self.last_selected[seen]
        self.gap_sum[seen] += gaps
        self.gap_count[seen] += 1
        np.maximum.at(self.gap_max, seen, gaps)
        self.last_selected[selected] = round
        self.last_participation[participated] = round
        tau = int(round - self.last_participation.min()) if len(self.last_participation) else 0
        self.taus.append(tau)
        return tau

    def summary(self, times_selected: np.ndarray) -> dict[str, float]:
        taus = np.asarray(self.taus, dtype=np.float64)
        return {
            "tau_max": float(taus.max()) if len(taus) else 0.0,
            "tau_avg": float(taus.mean()) if len(taus) else 0.0,
            "selection_count_mean": float(times_selected.mean()),
            "selection_count_var": float(times_selected.var()),
            "never_selected": int((times_selected == 0).sum()),
        }

    def client_columns(self) -> dict[str, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_gap = np.where(self.gap_count > 0, self.gap_sum / np.maximum(self.gap_count, 1), np.nan)
        return {"last_participation": self.last_participation, "reselect_gap_mean": mean_gap,
                "reselect_gap_max": np.where(self.gap_count > 0, self.gap_max, -1)}
