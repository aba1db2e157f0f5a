"""Reports still in flight after their round closed (deadline / over-commit stragglers).

A client cut by a deadline keeps computing; its report reaches the server at a definite
simulated time, and from then on it can be aggregated with its staleness = current round −
the round it started from (physically consistent staleness; notes:
``docs/algorithms/world.md#late-reports``). Algorithms that do not use stale updates drop it on
arrival, and its client-seconds become waste. While a report is in flight the device is busy, so
the engine does not launch it again.

A rule that mixes models (FedAsync: ``x ← (1 − α) x + α (x_origin + Δ)``) needs the model each report's
client downloaded: a parked report then carries its origin model by reference — one copy per round that
parked a report, shared by that round's reports and forgotten when the last of them leaves the buffer (never
more than the concurrency C; the run's pre-flight says how much memory that is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..core.state import Stateful


@dataclass
class Arrived:
    """Late reports that reached the server by a round's close, aligned by row."""

    clients: np.ndarray
    origin_round: np.ndarray
    updates: torch.Tensor
    weights: np.ndarray
    n_samples: np.ndarray
    losses: np.ndarray
    busy_s: np.ndarray
    #: the model each report's client started from (shared references), or ``None`` when none was held
    origin_models: Sequence[torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.clients)

    def origin_rows(self, fresh: int, current: torch.Tensor, taken: np.ndarray) -> torch.Tensor:
        """The models one aggregation's reports started from, one row each: ``fresh`` reports of the round's own
        cohort (they started from ``current``), then the arrivals ``taken`` selects."""
        rows = [current] * fresh + [self.origin_models[i] for i in np.flatnonzero(taken)]
        if not rows:
            return torch.zeros((0, current.numel()), dtype=current.dtype)
        return torch.stack(rows)


class LateBuffer(Stateful):
    """Struct-of-arrays store of in-flight reports."""

    state_attrs = ("clients", "origin_round", "arrival_s", "weights", "n_samples", "losses", "busy_s", "updates",
                   "models")

    def __init__(self, dim: int):
        self.dim = dim
        self.clients = np.zeros(0, np.int64)
        self.origin_round = np.zeros(0, np.int64)
        self.arrival_s = np.zeros(0, np.float64)
        self.weights = np.zeros(0, np.float64)
        self.n_samples = np.zeros(0, np.int64)
        self.losses = np.zeros(0, np.float64)
        self.busy_s = np.zeros(0, np.float64)
        self.updates = torch.zeros((0, dim))
        #: origin round → the model its parked reports started from (held only when ``add`` is handed it)
        self.models: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.clients)

    def busy_clients(self) -> np.ndarray:
        return self.clients

    def add(self, round: int, clients: np.ndarray, arrival_s: np.ndarray, updates: torch.Tensor,
            weights: np.ndarray, n_samples: np.ndarray, losses: np.ndarray, busy_s: np.ndarray,
            origin_model: torch.Tensor | None = None) -> None:
        """Park reports started in ``round``; with ``origin_model`` (the model they downloaded) they carry it."""
        if len(clients) == 0:
            return
        if origin_model is not None and int(round) not in self.models:
            self.models[int(round)] = origin_model.detach().cpu().clone()  # the global model is replaced, not copied
        self.clients = np.concatenate([self.clients, clients])
        self.origin_round = np.concatenate([self.origin_round, np.full(len(clients), round, np.int64)])
        self.arrival_s = np.concatenate([self.arrival_s, arrival_s])
        self.weights = np.concatenate([self.weights, weights])
        self.n_samples = np.concatenate([self.n_samples, n_samples])
        self.losses = np.concatenate([self.losses, losses])
        self.busy_s = np.concatenate([self.busy_s, busy_s])
        self.updates = torch.cat([self.updates, updates.cpu()])  # parked on the CPU, even when trained on a GPU

    def pending_row(self, client: int, origin_round: int) -> int | None:
        """The row of ``client``'s report from ``origin_round`` whose arrival time is not known yet, if any."""
        rows = np.flatnonzero((self.clients == client) & (self.origin_round == origin_round)
                              & np.isinf(self.arrival_s))
        return int(rows[0]) if len(rows) else None

    def complete(self, row: int, arrival_s: float, busy_s: float, loss: float, update: torch.Tensor) -> None:
        """A report whose reply was awaited came in: its arrival time, the seconds it took, its loss and values.

        The buffer writes its own arrays (no record handed out shares them); callers hand it values.
        """
        self.arrival_s[row], self.busy_s[row], self.losses[row] = arrival_s, busy_s, loss
        self.updates[row] = update.to(self.updates.dtype)

    def withdraw(self, row: int) -> None:
        """Forget a report that will never reach the server (its device failed)."""
        mask = np.zeros(len(self), dtype=bool)
        mask[row] = True
        self._take(mask)

    def pop_arrived(self, until_s: float, limit: int | None = None, usable: np.ndarray | None = None) -> Arrived:
        """Remove and return the reports that arrive no later than ``until_s`` (in arrival order), at most
        ``limit`` of them: the first to arrive, ties to the one parked first (an asynchronous buffer of K).

        With ``usable`` (a mask over the buffer) only usable reports count towards ``limit``: the reports taken
        are those that arrive up to the ``limit``-th usable one (the unusable ones among them are dropped on
        arrival by the caller, FedScale's ``max_staleness``)."""
        due = self.arrival_s <= until_s
        counts = due if usable is None else due & np.asarray(usable, bool)
        if limit is not None and int(counts.sum()) > limit:
            idx = np.flatnonzero(due)
            order = idx[np.argsort(self.arrival_s[idx], kind="stable")]
            taken = np.cumsum(counts[order]) if limit > 0 else np.zeros(len(order), np.int64)
            # up to and including the limit-th counted report (none when limit is 0)
            cut = int(np.searchsorted(taken, limit)) + 1 if limit > 0 else 0
            due = np.zeros(len(self), dtype=bool)
            due[order[:cut]] = True
        return self._take(due)

    def pop_all(self) -> Arrived:
        return self._take(np.ones(len(self), dtype=bool))

    def _take(self, mask: np.ndarray) -> Arrived:
        idx = np.flatnonzero(mask)
        idx = idx[np.argsort(self.arrival_s[idx], kind="stable")]
        out = Arrived(self.clients[idx], self.origin_round[idx], self.updates[torch.from_numpy(idx)],
                      self.weights[idx], self.n_samples[idx], self.losses[idx], self.busy_s[idx],
                      [self.models[int(o)] for o in self.origin_round[idx]] if self.models else None)
        keep = ~mask
        keep_t = torch.from_numpy(keep)
        self.clients, self.origin_round = self.clients[keep], self.origin_round[keep]
        self.arrival_s, self.weights = self.arrival_s[keep], self.weights[keep]
        self.n_samples, self.losses, self.busy_s = self.n_samples[keep], self.losses[keep], self.busy_s[keep]
        self.updates = self.updates[keep_t]
        if self.models:  # a model no parked report started from any more is forgotten
            held = set(self.origin_round.tolist())
            self.models = {o: m for o, m in self.models.items() if o in held}
        return out
