"""FedAvg with a server learning rate (optionally decayed) and optional server momentum (FedAvgM).

The step itself is the shared server step (:mod:`turnout.algorithms.server_step`); ``server_momentum`` is
the old spelling of ``server_step: {name: sgd, momentum: β}``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from .base import ALGORITHMS, Algorithm, Reports
from .server_step import ServerLRConfig, ServerStepConfig

__all__ = ["FedAvg", "FedAvgConfig", "ServerLRConfig"]


class FedAvgConfig(ServerLRConfig):
    legacy_step_keys: ClassVar[tuple[str, ...]] = (*ServerLRConfig.legacy_step_keys, "server_momentum")

    server_momentum: float = Field(0.0, ge=0.0, lt=1.0, description="β of FedAvgM (0 = plain FedAvg)")

    def legacy_step(self) -> ServerStepConfig:
        return ServerStepConfig(name="sgd", momentum=self.server_momentum, **self.schedule())


@ALGORITHMS.register("fedavg")
class FedAvg(Algorithm):
    """FedAvg: weighted mean of client deltas, applied by the server step (SGD with lr decay / momentum, Adam, ...)."""

    Config = FedAvgConfig

    aggregates_on_device = True  # a weighted mean of the reports; the step's state is the CPU global's size
    reads_each_report = ""  # a weighted mean of client deltas: the noised clipped sum replaces it

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        return reports.weighted_mean()  # zero when nobody reported: plain SGD leaves the model put
