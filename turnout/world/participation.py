"""Participation metrics: FedSUM's delays τ(t), FedGS's sampling counts, gaps between rounds.

All per-client state is arrays over the population, updated once per round in O(N) numpy.

- ``τ_i(t)``: last round ≤ t in which client i participated (its report was aggregated); −1 if never.
- ``τ(t) = t − min_i τ_i(t)`` (FedSUM Eq. (4), counting round t's own participation), so full
  participation gives τ(t) = 0 and cyclic blocks of m out of n give τ_max = n/m − 1.
- Gaps: rounds between consecutive selections of a client (GlueFL's re-sampling gaps, Props. 1–2)
  and between consecutive participations (FedSUM's inter-participation times).
"""

from __future__ import annotations

import numpy as np

from ..core.state import Stateful


class GapStats(Stateful):
    """Per-client count, mean and max of the gaps between consecutive events (rounds)."""

    state_attrs = ("last", "total", "count", "max")

    def __init__(self, num_clients: int):
        self.last = np.full(num_clients, -1, np.int64)
        self.total = np.zeros(num_clients, np.int64)
        self.count = np.zeros(num_clients, np.int64)
        self.max = np.zeros(num_clients, np.int64)

    def record(self, round: int, clients: np.ndarray) -> None:
        clients = np.unique(clients)
        seen = clients[self.last[clients] >= 0]
        gaps = round - self.last[seen]
        self.total[seen] += gaps
        self.count[seen] += 1
        self.max[seen] = np.maximum(self.max[seen], gaps)
        self.last[clients] = round

    def columns(self, prefix: str) -> dict[str, np.ndarray]:
        mean = np.where(self.count > 0, self.total / np.maximum(self.count, 1), np.nan)
        return {f"{prefix}_gap_mean": mean, f"{prefix}_gap_max": np.where(self.count > 0, self.max, -1)}


class ParticipationTracker(Stateful):
    """Last-participation times, the delay τ(t) per round, and selection/participation gaps."""

    state_attrs = ("selection", "participation", "taus")

    def __init__(self, num_clients: int):
        self.selection = GapStats(num_clients)
        self.participation = GapStats(num_clients)
        self.taus: list[int] = []

    @property
    def last_participation(self) -> np.ndarray:
        return self.participation.last

    def record(self, round: int, selected: np.ndarray, participated: np.ndarray) -> int:
        """Update with round ``round``'s selected and participating client ids; return τ(round)."""
        self.selection.record(round, selected)
        self.participation.record(round, participated)
        last = self.participation.last
        tau = int(round - last.min()) if len(last) else 0
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
        return {"last_participation": self.participation.last, **self.selection.columns("reselect"),
                **self.participation.columns("participation")}
