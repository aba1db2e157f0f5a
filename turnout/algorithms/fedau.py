"""FedAU (Wang & Ji, NeurIPS 2023) as coded in ``IBM/fedau`` ``main.py``: weight each update by the
client's mean participation interval.

Per client (struct-of-arrays over all N, no model-sized state): a counter ``c_i`` of rounds since
its last participation (init 0) and the running sum and count of its recorded intervals ``I_i``
(only ``mean(I_i)`` is ever used). With ``S_t`` the clients whose reports are aggregated:

    ω_i = mean(I_i) if I_i is non-empty else 1          (computed before this round's interval)
    D   = (1/N) Σ_{i∈S_t} ω_i Δ_i                        (denominator: all N clients)
    x  ← x + η_g · D

then, for ``i ∈ S_t``: append ``c_i + 1`` to ``I_i`` and set ``c_i = 0``; for every other client:
``c_i += 1`` and, once ``c_i ≥ K_cut`` (``interval_cutoff``), append ``c_i`` to ``I_i`` and reset
``c_i = 0``. An empty round gives ``D = 0`` (the model stays put) but still advances the counters.

Choices: a client "participates" when its report reaches the server rule this round (selected but
dropped or rejected counts as absent); the selector's weights are ignored (equal objective
weights, as in the code). Under full participation every ω_i is 1 and FedAU is FedAvg with equal
weights. ``last_weights`` holds the ω_i of the latest round (aligned with its reports).

Notes: ``docs/algorithms/baselines.md#fedau``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from pydantic import Field

from ..config.limits import MAX_ROUNDS
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports
from .server_step import ServerLRConfig


class FedAUConfig(ServerLRConfig):
    interval_cutoff: Optional[int] = Field(
        50, ge=1, le=MAX_ROUNDS,
        description="K_cut: an absence of this many rounds is recorded as an interval (FedSUM/FedAWE: 50; "
                    "null = never cut)")


@ALGORITHMS.register("fedau")
class FedAU(Algorithm):
    """FedAU: each update weighted by the client's estimated mean participation interval, averaged over all N."""

    Config = FedAUConfig

    state_attrs = ("absent", "interval_sum", "interval_count")
    scratch_attrs = ("last_weights",)  # ω_i of the latest round, for diagnostics

    def __init__(self, cfg: FedAUConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        n = int(ctx.num_clients)
        self.num_clients = n
        self.absent = np.zeros(n, dtype=np.int64)  # c_i
        self.interval_sum = np.zeros(n, dtype=np.float64)  # Σ I_i
        self.interval_count = np.zeros(n, dtype=np.int64)  # |I_i|
        self.last_weights = np.zeros(0)

    def weights(self, clients: np.ndarray) -> np.ndarray:
        """ω_i for ``clients`` from the intervals recorded so far."""
        cnt = self.interval_count[clients]
        return np.divide(self.interval_sum[clients], cnt, out=np.ones(len(clients)), where=cnt > 0)

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor | None:
        clients = np.asarray(reports.clients, dtype=np.int64)
        omega = self.weights(clients)
        self.last_weights = omega
        # counters: participants record c_i + 1; everyone else waits one more round (cut at K_cut)
        part = np.zeros(self.num_clients, dtype=bool)
        part[clients] = True
        self.interval_sum[clients] += self.absent[clients] + 1
        self.interval_count[clients] += 1
        self.absent[clients] = 0
        self.absent[~part] += 1
        if self.cfg.interval_cutoff is not None:
            cut = np.flatnonzero(self.absent >= self.cfg.interval_cutoff)
            self.interval_sum[cut] += self.absent[cut]
            self.interval_count[cut] += 1
            self.absent[cut] = 0
        if len(clients) == 0:
            return None
        w = torch.as_tensor(omega / self.num_clients, dtype=reports.updates.dtype)
        return w @ reports.updates

