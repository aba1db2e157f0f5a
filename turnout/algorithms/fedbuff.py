"""FedBuff (Nguyen et al., AISTATS 2022): one server step on the staleness-weighted mean of a buffer of K deltas.

With the asynchronous round mode (``round_mode: {name: async, buffer: K}``) a round aggregates the first
K reports to arrive, each a model delta ``Δ_i`` computed from the version its client downloaded ``τ_i``
updates ago. FedBuff's Algorithm 1 sums ``s(τ_i) Δ_i`` over the buffer and divides by K; with selector
weights ``v_i`` (uniform in FedBuff) that is

    Δ̄ = Σ_i (v_i / Σ_j v_j) · s(τ_i) · Δ_i        (absolute weights ``v_i`` are used as given)

— the staleness weights ``s`` (:mod:`turnout.algorithms.staleness`) are not renormalised, so a stale
buffer moves the model less. The server step on ``Δ̄`` is any of turnout's: ``x ← x + η_g Δ̄`` with
optional server momentum (FedAvgM), or FedAdam / FedYogi (``server_optimizer``), the old spellings of
``server_step`` (:mod:`turnout.algorithms.server_step`). With every τ = 0 and
``s(0) = 1`` the rule is FedAvg's, bit for bit. ``max_staleness`` drops older reports on arrival (their
work counts as wasted).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from pydantic import Field

from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports
from .fedavg import FedAvgConfig
from .late_reports import MaxStaleness
from .server_step import ServerOptimizerOption
from .staleness import StalenessConfig, staleness_weights


class FedBuffConfig(ServerOptimizerOption, FedAvgConfig, MaxStaleness):
    legacy_step_keys: ClassVar[tuple[str, ...]] = (*FedAvgConfig.legacy_step_keys, "server_optimizer")

    staleness: StalenessConfig = Field(default_factory=StalenessConfig,
                                       description="s(τ): {rule: constant | polynomial | hinge | refl, a, b, beta}; "
                                                   "default polynomial with a = 0.5 (1/√(1+τ), FedBuff)")


@ALGORITHMS.register("fedbuff")
class FedBuff(Algorithm):
    """FedBuff: the staleness-weighted mean of a buffer of K reports, then one server step (SGD, Adam or Yogi)."""

    Config = FedBuffConfig
    scratch_attrs = ("last_weight_mean",)

    def __init__(self, cfg: FedBuffConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.last_weight_mean = float("nan")

    def buffer_mean(self, reports: Reports) -> torch.Tensor:
        """Σ (v_i/Σv) s(τ_i) Δ_i, with FedAvg's arithmetic (so that s ≡ 1 gives FedAvg's mean bit for bit)."""
        u = reports.updates
        k = len(reports)
        w = torch.as_tensor(np.asarray(reports.weights, np.float64).copy(), dtype=u.dtype)
        if reports.normalize:
            total = float(w.sum())
            w = w / total if total > 0 else torch.full_like(w, 1.0 / k)
        s = staleness_weights(self.cfg.staleness, reports.staleness, u, reports.weights)
        self.last_weight_mean = float(s.mean())
        if not np.all(s == 1.0):
            w = w * torch.as_tensor(s, dtype=u.dtype)
        return (w.to(u.device) @ u).cpu()

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor | None:
        self.last_weight_mean = float("nan")
        if len(reports) == 0:  # nothing arrived: neither the model nor the server step moves
            return None
        return self.buffer_mean(reports).to(global_params.dtype)

    def round_metrics(self) -> dict[str, object]:
        """The mean staleness weight s(τ) of the round's buffer."""
        return {"staleness_weight_mean": self.last_weight_mean}


__all__ = ["FedBuff", "FedBuffConfig"]
