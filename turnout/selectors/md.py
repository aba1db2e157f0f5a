"""MD sampling (FedProx / FedGS ``MDSample``): draws with replacement ∝ n_k, uniform average over the draws.

Notes: ``docs/algorithms/baselines.md#md-sampling`` (``WwZzz/FedGS`` ``algorithm/mdsample.py``):
``m`` draws with replacement from the available clients, client ``k`` drawn with probability
``n_k / Σ_{avail} n``; each distinct client trains once and the server takes the uniform average
over the *draws* (duplicates counted). Since every draw of one client carries the same update, a client drawn
``c_k`` times gets aggregation weight ``c_k``; with ``normalize: true`` (default) the server divides
by the draws whose reports arrive, so a full round gives ``(1/m) Σ_draws Δ``, an unbiased estimate
of ``Σ_k p_k Δ_k`` (FedProx's MD scheme, with ``p_k`` the data share among the available clients).

Choices:

- Like the FedGS code we always make ``m = clients_per_round`` draws, even when fewer clients are
  available: the cohort is then the distinct clients drawn, which need not be every available one.
- Over-commitment (``ctx.launch > K``) scales the draws: ``launch`` draws are made, the distinct
  clients among them are launched, and the round wants as many reports as there are distinct
  clients among the first ``K`` draws. Weights are the multiplicities over all draws.
- ``normalize: false`` uses each draw's absolute weight ``1/m`` (``c_k / m``, ``m`` the number of
  draws), so a report that never arrives shrinks the update instead of being renormalised away.

Sampling is vectorised: one cumulative sum over the available clients and a ``searchsorted`` of
the draws, so a million-client population costs a few milliseconds per round.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_CLIENTS
from .base import SELECTORS, Cohort, SelectionContext, Selector


def draw_with_replacement(rng: np.random.Generator, candidates: np.ndarray, weights: np.ndarray,
                          size: int) -> np.ndarray:
    """``size`` draws from ``candidates`` with replacement, ∝ ``weights`` (uniform if they sum to 0)."""
    if size <= 0 or len(candidates) == 0:
        return np.zeros(0, np.int64)
    w = np.asarray(weights, dtype=np.float64)
    cdf = np.cumsum(w)
    total = cdf[-1]
    if not total > 0:
        return candidates[rng.integers(0, len(candidates), size)]
    u = rng.random(size) * total
    idx = np.searchsorted(cdf, u, side="right")
    np.minimum(idx, len(candidates) - 1, out=idx)
    return candidates[idx]


@SELECTORS.register("md")
class MDSelector(Selector):
    """FedProx MD sampling: K draws with replacement ∝ n_k from the available, uniform average over draws."""

    reads_client_data = "draws clients in proportion to their sample counts"

    class Config(StrictModel):
        clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS,
                                       description="K: draws per round (distinct clients train once)")
        normalize: bool = Field(
            True, description="true: weight = number of draws, divided over the draws whose reports arrive "
                              "(FedGS MDSample); false: absolute weight draws / number of draws (a lost report "
                              "shrinks the update)")

    def select(self, ctx: SelectionContext) -> Cohort:
        avail = np.asarray(ctx.available, dtype=np.int64)
        k = self.cfg.clients_per_round
        draws_n = max(int(ctx.launch), k)
        draws = draw_with_replacement(ctx.rng, avail, self.n_train[avail], draws_n)
        if len(draws) == 0:
            return Cohort(np.zeros(0, np.int64), np.zeros(0), normalize=self.cfg.normalize, target=0)
        clients, counts = np.unique(draws, return_counts=True)
        target = len(np.unique(draws[:k]))
        w = counts.astype(np.float64)
        if not self.cfg.normalize:
            w = w / draws_n
        return Cohort(clients, w, normalize=self.cfg.normalize, target=target)
