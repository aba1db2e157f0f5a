"""Adaptive server optimisers (Reddi et al., ICLR 2021): FedAdam and FedYogi.

The clients run plain local SGD as in FedAvg; the server treats the weighted mean of the client
deltas ``Δ_t = Σ_i w_i Δ_i`` (selector weights, as FedAvg) as a pseudo-gradient (pointing downhill) and
applies

    m_t = β₁ m_{t−1} + (1 − β₁) Δ_t
    v_t = β₂ v_{t−1} + (1 − β₂) Δ_t²                          (Adam)
    v_t = v_{t−1} − (1 − β₂) Δ_t² · sign(v_{t−1} − Δ_t²)       (Yogi)
    x_{t+1} = x_t + η_g · m_t / (√v_t + τ)

with no bias correction (Reddi et al., Algorithm 2). ``η_g`` is ``server_lr`` (with its optional
decay). Initialisation, ``init``:

* ``reddi`` (default): ``m = 0``, ``v = τ²`` (Algorithm 2's ``v_{−1} ≥ τ²``).
* ``fedscale``: the FedScale/REFL ``YoGi`` class (``core/utils/yogi.py`` of ``ahmedcs/REFL``): the
  first non-empty round sets ``m = Δ``, ``v = Δ²`` and applies ``Δ`` unchanged (a plain FedAvg step,
  no η_g); later rounds follow the rule above. REFL's defaults are η = 3e−3, τ = 1e−8, β₁ = 0.9,
  β₂ = 0.99 (REFL's run scripts; ``docs/algorithms/baselines.md#fedadam-and-fedyogi``).

A round with no reports changes nothing: neither the model nor the moments (our choice; Δ = 0
would otherwise keep moving the model along the decaying momentum).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from ..config.limits import MAX_SCALE, MAX_SERVER_LR
from ..core.state import Stateful
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports
from .fedavg import ServerLRConfig


class AdaptiveServerConfig(ServerLRConfig):
    server_lr: float = Field(1e-2, gt=0.0, le=MAX_SERVER_LR,
                             description=f"η_g of the adaptive server step (at most {MAX_SERVER_LR:g})")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="β₁: decay of the first moment m")
    beta2: float = Field(0.99, ge=0.0, lt=1.0, description="β₂: decay of the second moment v")
    tau: float = Field(1e-3, gt=0.0, le=MAX_SCALE, description="τ: adaptivity floor in m / (√v + τ)")
    init: Literal["reddi", "fedscale"] = Field(
        "reddi",
        description="reddi: m = 0, v = τ²; fedscale: the first round's Δ sets m = Δ, v = Δ² and is applied as is")


class AdaptiveStep(Stateful):
    """Adam or Yogi moments over the server's pseudo-gradient; any server rule can apply it to its aggregate.

    ``step(round, delta)`` returns the increment to add to the model (REFL, for instance, applies
    YoGi to its staleness-weighted aggregate).
    """

    state_attrs = ("m", "v")

    def __init__(self, cfg: AdaptiveServerConfig, rule: Literal["adam", "yogi"]):
        self.cfg, self.rule = cfg, rule
        self.m: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def step(self, round: int, delta: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        d2 = delta * delta
        if self.m is None:
            if cfg.init == "fedscale":
                self.m, self.v = delta.clone(), d2.clone()
                return delta
            self.m = torch.zeros_like(delta)
            self.v = torch.full_like(delta, cfg.tau * cfg.tau)
        self.m = cfg.beta1 * self.m + (1.0 - cfg.beta1) * delta
        if self.rule == "adam":
            self.v = cfg.beta2 * self.v + (1.0 - cfg.beta2) * d2
        else:
            self.v = self.v - (1.0 - cfg.beta2) * d2 * torch.sign(self.v - d2)
        return cfg.server_lr_at(round) * self.m / (torch.sqrt(self.v) + cfg.tau)


class _AdaptiveServer(Algorithm):
    Config = AdaptiveServerConfig
    rule: Literal["adam", "yogi"]
    state_attrs = ("opt",)
    sums_reports = True  # FedAvg's model deltas, read through Reports.weighted_mean() alone
    dp_unsound = ""  # an optimizer step on the weighted mean of client deltas (post-processing of the noised sum)

    def __init__(self, cfg: AdaptiveServerConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.opt = AdaptiveStep(cfg, self.rule)

    @property
    def m(self) -> torch.Tensor | None:
        return self.opt.m

    @property
    def v(self) -> torch.Tensor | None:
        return self.opt.v

    def aggregate(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        if len(reports) == 0:
            return global_params
        return global_params + self.opt.step(round, reports.weighted_mean())

@ALGORITHMS.register("fedadam")
class FedAdam(_AdaptiveServer):
    """FedAdam (Reddi et al. 2021): FedAvg clients, Adam on the server over the mean client delta."""

    rule = "adam"


@ALGORITHMS.register("fedyogi")
class FedYogi(_AdaptiveServer):
    """FedYogi (Reddi et al. 2021; REFL's server optimiser): FedAvg clients, Yogi on the server over the mean delta."""

    rule = "yogi"
