"""Uniform sampling without replacement (FedAvg's default)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_CLIENTS
from .base import SELECTORS, Cohort, SelectionContext, Selector


class UniformConfig(StrictModel):
    clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS, description="K: reports wanted per round")
    weighting: Literal["n_samples", "equal", "unbiased"] = Field(
        "n_samples",
        description="n_samples: n_k / Σ n over the reports received; equal: 1/K over the reports received; "
                    "unbiased: (N/K)·p_k with p_k = n_k / Σ_all n (FedAvg's unbiased form, not renormalised)")


@SELECTORS.register("uniform")
class UniformSelector(Selector):
    """K clients uniformly at random, without replacement, from the available ones."""

    Config = UniformConfig
    fills_free_slots = True
    reads_client_data = ""  # the available set and its own draw

    def inclusion_probabilities(self, available: np.ndarray, launch: int) -> np.ndarray:
        """k of the |available| drawn without replacement: each has probability k / |available|."""
        n = len(available)
        return np.full(n, min(launch, n) / n) if n else np.zeros(0)

    @classmethod
    def weights_per_cohort(cls, cfg: UniformConfig) -> tuple[str, str] | None:
        if cfg.weighting != "unbiased":
            return None
        return "weighting", f"unbiased weights N·p_i/{cfg.clients_per_round} estimate the mean of a cohort of " \
                            f"{cfg.clients_per_round} reports"

    def select(self, ctx: SelectionContext) -> Cohort:
        k = min(ctx.launch, len(ctx.available))
        clients = np.sort(ctx.rng.choice(ctx.available, size=k, replace=False)) if k else np.zeros(0, np.int64)
        n = self.n_train[clients].astype(np.float64)
        w = self.cfg.weighting
        if w == "n_samples":
            return Cohort(clients, n, normalize=True, target=min(self.target(), k))
        if w == "equal":
            return Cohort(clients, np.ones(k), normalize=True, target=min(self.target(), k))
        p = n / float(self.n_train.sum())
        return Cohort(clients, p * self.num_clients / max(1, self.target()), normalize=False,
                      target=min(self.target(), k))
