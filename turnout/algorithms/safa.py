"""SAFA (Wu et al., IEEE TC 2021) as REFL emulates it, plus SAFA's cache of the latest client models.

REFL §3.2 and §5.2 (notes: ``docs/algorithms/baselines.md#safa``). REFL's emulation (``wandb_tags``
starting with ``safa``) is a combination of seams:

* selector ``safa`` (``selectors/safa.py``): **every online client is launched** each round, and the round wants
  ``N_t = ⌊|online| · target_ratio⌋`` reports (paper: 0.1; [AMBIG] ``run_E2.sh`` uses 0.8 — we follow
  the paper);
* round mode ``{name: deadline, deadline_s: 100, max_reports: target}``: the first ``N_t`` on-time
  reports are aggregated, the others are late reports (REFL's straggler cache, REFL §4.2): those past
  the deadline arrive in a later round as stale reports; those on time beyond the quota reach the
  server before the close and are aggregated in the round with staleness 0 — every on-time report
  is used, as in REFL's code, whose deadline cut replaces the quota whenever a client is late
  (``advance: last_arrival`` closes the round at the quota's last report instead);
* algorithm ``safa`` (below): stale reports are used up to a staleness bound of 5 rounds
  (``max_staleness``), no IPS.

The server rule, ``aggregation``:

* ``cache`` (default; the original SAFA's server): the server keeps each client's latest model
  ``m_k = x_{o_k} + Δ_k`` (built on the model the client started from, round ``o_k``) in the per-client
  state store (slot ``safa_cache``; a client without a row holds ``x^0``), and the new global model is
  the weighted average over the whole cache, ``x^{t+1} = Σ_k p_k m_k`` with ``p_k = n_k / Σ n``
  (``cache_weighting``). Lag tolerance: an entry older than ``max_staleness`` rounds is *deprecated* and
  replaced by the current global model (the client is forced to synchronise) before the round's reports
  are merged. A running sum keeps the average O(reports + deprecated entries) per round.
* ``fedavg`` (REFL's emulation exactly): ``x^{t+1} = x^t + η_g · Σ_i w_i Δ_i / Σ w`` over the fresh and
  stale reports of the round (selector weights, no staleness discount).

Not modelled: SAFA's asynchronous local training of "tolerable" clients (every client here trains from
the model it downloads) and its compensatory priority for clients left out earlier (the deadline round
mode's first-come order decides). The forced synchronisation of a deprecated entry does not charge a
download (the client's next real download is charged by the engine's ledger).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from ..config.limits import MAX_ROUNDS
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports
from .late_reports import LateReportsOption
from .server_step import ServerLRConfig

CACHE_SLOT = "safa_cache"


class SAFAConfig(ServerLRConfig, LateReportsOption):
    aggregation: Literal["cache", "fedavg"] = Field(
        "cache", description="cache: weighted average of every client's latest model (SAFA); fedavg: weighted mean "
                             "of the round's fresh and stale deltas (REFL's SAFA emulation)")
    max_staleness: int = Field(5, ge=0, le=MAX_ROUNDS,
                               description="staleness bound / lag tolerance in rounds (SAFA in REFL: 5)")
    cache_weighting: Literal["n_samples", "uniform"] = Field(
        "n_samples", description="p_k of the cache average: n_k / Σ n (SAFA) or 1/N")

    def staleness_bound(self) -> int:
        return int(self.max_staleness)


@ALGORITHMS.register("safa")
class SAFA(Algorithm):
    """SAFA: stale updates up to a lag tolerance (5), global model = weighted average of the cache of latest \
client models."""

    Config = SAFAConfig
    reads_each_report = "keeps a cache of every client's latest raw model on the server"

    state_attrs = ("version", "x0", "cache_sum", "history")
    scratch_attrs = ("last_deprecated",)

    def __init__(self, cfg: SAFAConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        n = ctx.num_clients
        self.p = ctx.client_shares(uniform=cfg.cache_weighting == "uniform")
        self.store = ctx.state_store()
        self.version = np.zeros(n, np.int64)  # round of the global model each cache entry is built on
        self.x0: torch.Tensor | None = None
        self.cache_sum: torch.Tensor | None = None  # Σ_k p_k m_k (float64)
        self.history: dict[int, torch.Tensor] = {}
        self.last_deprecated = 0

    def cache_rows(self, clients: np.ndarray) -> torch.Tensor:
        """Cached models of ``clients`` (``x^0`` for clients without a row), float64."""
        rows = self.store.get(CACHE_SLOT, clients).double()
        missing = ~self.store.has(CACHE_SLOT, clients)
        if missing.any():
            rows[torch.from_numpy(missing)] = self.x0.double()
        return rows

    def _replace(self, clients: np.ndarray, models: torch.Tensor, versions: np.ndarray) -> None:
        old = self.cache_rows(clients)
        p = torch.as_tensor(self.p[clients], dtype=torch.float64)
        self.cache_sum += p @ (models.double() - old)
        self.store.put(CACHE_SLOT, clients, models)
        self.version[clients] = versions

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        cfg = self.cfg
        if cfg.aggregation == "fedavg":
            return reports.weighted_mean().to(global_params.dtype)
        if self.x0 is None:
            self.x0 = global_params.detach().clone()
            self.cache_sum = self.x0.double() * float(self.p.sum())
        self.history[round] = global_params.detach().clone()
        for old in [r for r in self.history if r < round - self.max_staleness]:
            del self.history[old]

        # Lag tolerance: entries built on a model more than max_staleness rounds old are re-synced to x^t.
        dep = np.flatnonzero(round - self.version > self.max_staleness)
        self.last_deprecated = len(dep)
        for a in range(0, len(dep), 4096):  # bounded memory for large populations
            chunk = dep[a:a + 4096]
            self._replace(chunk, global_params.detach().expand(len(chunk), -1), np.full(len(chunk), round))

        if len(reports):
            # one entry per client: its freshest report
            order = np.lexsort((np.asarray(reports.staleness), reports.clients))
            first = np.ones(len(order), dtype=bool)
            first[1:] = reports.clients[order][1:] != reports.clients[order][:-1]
            idx = order[first]
            origins = round - np.asarray(reports.staleness, np.int64)[idx]
            base = torch.stack([self.history.get(int(o), global_params) for o in origins])
            models = base + reports.updates[torch.from_numpy(idx)].to(base.dtype)
            self._replace(reports.clients[idx], models, origins)
        target = (self.cache_sum / float(self.p.sum())).to(global_params.dtype)
        return target - global_params  # η_g = 1 (the default) moves the model to the cache's average

    def round_metrics(self) -> dict[str, object]:
        """Extra row columns: cache entries force-synced this round."""
        return {"safa_deprecated": self.last_deprecated}

__all__ = ["SAFA"]
