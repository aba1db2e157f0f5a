"""FedAvg with a server learning rate (optionally decayed) and optional server momentum (FedAvgM)."""

from __future__ import annotations

import torch
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_ROUNDS, MAX_SERVER_LR
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports


class ServerLRConfig(StrictModel):
    """The server learning rate η_g and its step decay, shared by every server rule of the form x ← x + η_g·D.

    ``η_g(t) = max(server_lr · decay^⌊t / every⌋, server_lr_min)`` once at least one decay has
    happened (``t`` is the 0-based round), so the first ``every`` rounds use ``server_lr`` itself.
    GlueFL's ``lr ← max(0.98·lr, 5e−5)`` every 10 rounds (GlueFL §5.1, as coded) is ``server_lr_decay: 0.98,
    server_lr_decay_every: 10, server_lr_min: 5e-5``. The default (decay 1) keeps η_g constant.
    """

    server_lr: float = Field(1.0, gt=0.0, le=MAX_SERVER_LR,
                             description=f"η_g: x ← x + η_g · update (at most {MAX_SERVER_LR:g})")
    server_lr_decay: float = Field(1.0, gt=0.0, le=1.0,
                                   description="multiply η_g by this every server_lr_decay_every rounds (1 = constant)")
    server_lr_decay_every: int = Field(1, ge=1, le=MAX_ROUNDS, description="rounds between two decays of η_g")
    server_lr_min: float = Field(0.0, ge=0.0, le=MAX_SERVER_LR, description="floor of the decayed η_g")

    def server_lr_at(self, round: int) -> float:
        """η_g used to apply round ``round``'s aggregate."""
        decays = max(0, int(round)) // self.server_lr_decay_every
        if self.server_lr_decay == 1.0 or decays == 0:
            return self.server_lr
        return max(self.server_lr * self.server_lr_decay ** decays, self.server_lr_min)


class FedAvgConfig(ServerLRConfig):
    server_momentum: float = Field(0.0, ge=0.0, lt=1.0, description="β of FedAvgM (0 = plain FedAvg)")


@ALGORITHMS.register("fedavg")
class FedAvg(Algorithm):
    """FedAvg: weighted mean of client deltas, server lr (with optional decay) and optional server momentum."""

    Config = FedAvgConfig

    state_attrs = ("momentum_buf",)
    aggregates_on_device = True  # a weighted mean of the reports; the momentum buffer is the CPU global's size
    sums_reports = True  # model deltas, read through Reports.weighted_mean() alone
    dp_unsound = ""  # a weighted mean of client deltas: the noised clipped sum replaces it

    def __init__(self, cfg: FedAvgConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.momentum_buf: torch.Tensor | None = None

    def aggregate(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        update = reports.weighted_mean()  # zero when nobody reported: the model stays put
        if self.cfg.server_momentum:
            self.momentum_buf = (update if self.momentum_buf is None
                                 else self.cfg.server_momentum * self.momentum_buf + update)
            update = self.momentum_buf
        return global_params + self.cfg.server_lr_at(round) * update
