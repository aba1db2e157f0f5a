"""FedAsync (Xie, Koyejo and Gupta, 2019): every arriving client model is mixed into the server's.

``x ← (1 − α_τ) x + α_τ x_client`` with ``α_τ = α · s(τ)`` (FedAsync Algorithm 1 and §5.2; ``s`` in
:mod:`turnout.algorithms.staleness`), where ``x_client = x_origin + Δ`` is the client's trained model,
built on the version ``x_origin`` it downloaded ``τ`` updates ago — each report in flight carries the
version its client started from (:mod:`turnout.world.late`). FedAsync is the asynchronous round mode with
``buffer: 1``: each arrival is one server update. With a larger buffer the reports of a round are mixed
in one after another, in arrival order. Selector weights are not used (FedAsync mixes one model at a time);
``max_staleness`` drops older reports on arrival. With ``α = 1`` and τ = 0 the server's model becomes the
client's: training clients one after another. ``rho`` adds FedAsync's regularised client objective
``f_i(x) + (ρ/2)‖x − x_τ‖²`` (Algorithm 1; ``x_τ`` the version the client downloaded), through the same local
objective as FedProx's proximal term.
"""

from __future__ import annotations

import torch
from pydantic import Field, model_validator

from ..config.limits import MAX_SCALE
from ..training.local_sgd import LocalObjective
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports
from .late_reports import MaxStaleness
from .staleness import StalenessConfig, staleness_weights


class FedAsyncConfig(MaxStaleness):
    alpha: float = Field(0.6, gt=0.0, le=1.0, description="α: the mixing weight of a fresh client model (FedAsync: "
                                                            "0.6 or 0.9 in its experiments)")
    staleness: StalenessConfig = Field(default_factory=StalenessConfig,
                                       description="s(τ) scaling α: {rule: constant | polynomial | hinge, a, b}; "
                                                   "default polynomial with a = 0.5")
    rho: float = Field(0.0, ge=0.0, le=MAX_SCALE,
                       description="ρ of the client objective's term (ρ/2)·‖x − x_τ‖², x_τ the model the client "
                                   "downloaded (FedAsync Algorithm 1; 0: plain local training)")

    @model_validator(mode="after")
    def _one_at_a_time(self):
        if self.staleness.rule == "refl":
            raise ValueError("staleness.rule refl compares a stale report with a buffer's fresh ones, but FedAsync "
                             "mixes one report at a time: use constant, polynomial or hinge")
        return self


@ALGORITHMS.register("fedasync")
class FedAsync(Algorithm):
    """FedAsync: x ← (1 − α s(τ)) x + α s(τ) (x_origin + Δ) for every report, in arrival order."""

    Config = FedAsyncConfig
    reads_origin_models = True
    scratch_attrs = ("last_alpha_mean",)

    def __init__(self, cfg: FedAsyncConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.last_alpha_mean = float("nan")


    def local_objective(self, client: int, start: torch.Tensor) -> LocalObjective | None:
        return LocalObjective(prox_mu=self.cfg.rho) if self.cfg.rho else None

    def aggregate(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        alphas = self.cfg.alpha * staleness_weights(self.cfg.staleness, reports.staleness)
        self.last_alpha_mean = float(alphas.mean()) if len(reports) else float("nan")
        x = global_params.clone()
        if len(reports) == 0:
            return x
        origins, u = reports.origin_models, reports.updates
        for i, a in enumerate(alphas.tolist()):
            client_model = origins[i].to(x.dtype) + u[i].to(x.device, x.dtype)
            x = (1.0 - a) * x + a * client_model
        return x

    def round_metrics(self) -> dict[str, object]:
        """The mean mixing weight α·s(τ) of the round's reports."""
        return {"alpha_mean": self.last_alpha_mean}


__all__ = ["FedAsync", "FedAsyncConfig"]
