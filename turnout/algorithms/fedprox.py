"""FedProx (Li et al., MLSys 2020): FedAvg whose clients minimise f_i(w) + (μ/2)·‖w − w_start‖².

The proximal term enters local training as the client's objective, ``g ← g + μ (w − w_start)``,
before the trainer's weight decay, momentum and clipping, so it is exactly the gradient of the
proximal objective. The server rule is FedAvg's (server lr, its decay, server momentum); FedProx's
experiments pair it with MD sampling, which is a selector choice here. μ = 0 changes nothing, so it is
FedAvg bit for bit.
"""

from __future__ import annotations

import torch
from pydantic import Field

from ..config.limits import MAX_SCALE
from ..training.local_sgd import LocalObjective
from .base import ALGORITHMS
from .fedavg import FedAvg, FedAvgConfig


class FedProxConfig(FedAvgConfig):
    mu: float = Field(0.01, ge=0.0, le=MAX_SCALE,
                      description="μ of the proximal term (μ/2)·‖w − w_start‖² (0 = FedAvg)")


@ALGORITHMS.register("fedprox")
class FedProx(FedAvg):
    """FedProx: FedAvg with a proximal term μ/2·‖w − w_start‖² in the clients' local objective."""

    Config = FedProxConfig

    def local_objective(self, client: int, start: torch.Tensor) -> LocalObjective | None:
        return LocalObjective(prox_mu=self.cfg.mu) if self.cfg.mu else None
