"""FedProx (Li et al., MLSys 2020): FedAvg whose clients minimise f_i(w) + (μ/2)·‖w − w_start‖².

The proximal term enters local training through the gradient hook, ``g ← g + μ (w − w_start)``,
before the trainer's weight decay, momentum and clipping, so it is exactly the gradient of the
proximal objective. The server rule is FedAvg's (server lr, its decay, server momentum); FedProx's
experiments pair it with MD sampling, which is a selector choice here. μ = 0 installs no hook, so
it is FedAvg bit for bit.
"""

from __future__ import annotations

import torch
from pydantic import Field

from ..training.local_sgd import GradHook, Params
from .base import ALGORITHMS, AlgorithmContext
from .fedavg import FedAvg, FedAvgConfig


def split_like(flat: torch.Tensor, params: Params) -> Params:
    """Views of the flat vector ``flat`` shaped like ``params`` (whose order is the flat layout)."""
    sizes = [p.numel() for p in params.values()]
    return {k: t.view(p.shape) for (k, p), t in zip(params.items(), torch.split(flat, sizes))}


class FedProxConfig(FedAvgConfig):
    mu: float = Field(0.01, ge=0.0, description="μ of the proximal term (μ/2)·‖w − w_start‖² (0 = FedAvg)")


@ALGORITHMS.register("fedprox")
class FedProx(FedAvg):
    """FedProx: FedAvg with a proximal term μ/2·‖w − w_start‖² in the clients' local objective."""

    Config = FedProxConfig

    def __init__(self, cfg: FedProxConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)

    def grad_hook(self, client: int, start: torch.Tensor) -> GradHook | None:
        mu = self.cfg.mu
        if mu == 0.0:
            return None
        anchor: dict[str, Params] = {}

        def hook(params: Params, grads: Params) -> Params:
            if not anchor:
                anchor["w"] = split_like(start.detach(), params)
            w0 = anchor["w"]
            return {k: g + mu * (params[k].detach() - w0[k]) for k, g in grads.items()}

        return hook
