"""FedAvg with a server learning rate and optional server momentum (FedAvgM)."""

from __future__ import annotations

import torch
from pydantic import Field

from ..config.base import StrictModel
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports


class FedAvgConfig(StrictModel):
    server_lr: float = Field(1.0, gt=0.0, description="η_g: x ← x + η_g · update")
    server_momentum: float = Field(0.0, ge=0.0, lt=1.0, description="β of FedAvgM (0 = plain FedAvg)")


@ALGORITHMS.register("fedavg")
class FedAvg(Algorithm):
    """FedAvg: weighted mean of client deltas, server lr and optional server momentum."""

    Config = FedAvgConfig

    def __init__(self, cfg: FedAvgConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.momentum_buf: torch.Tensor | None = None

    def aggregate(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        update = reports.weighted_mean()  # zero when nobody reported: the model stays put
        if self.cfg.server_momentum:
            self.momentum_buf = update if self.momentum_buf is None else self.cfg.server_momentum * self.momentum_buf + update
            update = self.momentum_buf
        return global_params + self.cfg.server_lr * update
