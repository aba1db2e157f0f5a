"""FedVARP (Jhunjhunwala et al., UAI 2022) as coded in ``IBM/fedau`` ``main.py``: SAGA-style variance reduction.

The server keeps one memory ``y_i`` per client (initially 0, store slot ``fedvarp/y_i``) and their
mean ``ȳ = (1/N) Σ_i y_i``. With ``S_t`` the clients that reported this round:

    D = ȳ_old + (1/|S_t|) Σ_{i∈S_t} (Δ_i − y_i^old)
    y_i ← Δ_i for i ∈ S_t,  ȳ recomputed
    x ← x + η_g · D

If ``S_t`` is empty, ``D = 0`` (the model stays put) and ``ȳ`` is not refreshed — it cannot have
changed anyway. ``Σ_i y_i`` is a running float64 sum (O(reports · dim) per round).

Choices: equal objective weights (1/|S_t| and 1/N), ignoring the selector's weights, as in the
code bases FedSUM builds on. Under full participation ``D`` is the plain mean of the deltas, so
FedVARP is FedAvg with equal weights.

Notes: ``docs/algorithms/baselines.md#fedvarp``.
"""

from __future__ import annotations

import torch

from .base import ALGORITHMS, Reports
from .server_step import ServerLRConfig
from .update_memory import RememberingRule

SLOT = "fedvarp/y_i"


class FedVARPConfig(ServerLRConfig):
    pass


@ALGORITHMS.register("fedvarp")
class FedVARP(RememberingRule):
    """FedVARP: mean of stored client updates plus the participants' fresh corrections (variance reduction)."""

    Config = FedVARPConfig
    reads_each_report = "keeps every client's latest raw update on the server (its variance-reduction memory)"

    slot = SLOT  # y_i; the memory keeps Σ_i y_i too

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor | None:
        if len(reports) == 0:
            return None
        before = self.memory.sum / self.num_clients  # the memory's mean before this round's reports
        corr = self.memory.replace(reports.clients, reports.updates)
        d = before + corr / len(reports)
        return d.to(global_params.dtype)

