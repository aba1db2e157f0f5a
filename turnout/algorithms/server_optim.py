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

The step is the shared one (:mod:`turnout.algorithms.server_step`): FedAdam / FedYogi are FedAvg's rule with
its flat options (``server_lr``, ``beta1``, ...) read as ``server_step: {name: adam | yogi, ...}``; every other
rule takes the same step through its own ``server_step`` option.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch

from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports
from .server_step import AdaptiveServerConfig, ServerStep

__all__ = ["AdaptiveServerConfig", "FedAdam", "FedYogi"]


class _AdaptiveServer(Algorithm):
    Config = AdaptiveServerConfig
    rule: ClassVar[Literal["adam", "yogi"]]
    reads_each_report = ""  # a step on the weighted mean of client deltas (post-processing of the noised sum)

    def __init__(self, cfg: AdaptiveServerConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.server_step = ServerStep(cfg.server_step or cfg.adaptive(self.rule))  # the flat options: this rule's

    @property
    def m(self) -> torch.Tensor | None:
        return self.server_step.m

    @property
    def v(self) -> torch.Tensor | None:
        return self.server_step.v

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor | None:
        return reports.weighted_mean() if len(reports) else None


@ALGORITHMS.register("fedadam")
class FedAdam(_AdaptiveServer):
    """FedAdam (Reddi et al. 2021): FedAvg clients, Adam on the server over the mean client delta."""

    rule = "adam"


@ALGORITHMS.register("fedyogi")
class FedYogi(_AdaptiveServer):
    """FedYogi (Reddi et al. 2021; REFL's server optimiser): FedAvg clients, Yogi on the server over the mean delta."""

    rule = "yogi"
