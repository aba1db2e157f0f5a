"""MIFA (Gu et al., NeurIPS 2021) as coded in ``IBM/fedau`` ``main.py``: average the latest update of every client.

The server keeps one memory ``G_i`` per client (initially 0, in the client-state store under
``mifa/G_i``). Each round, ``G_i ← Δ_i`` (the raw model delta) for every client that reported, and
the server applies

    x ← x + η_g · (1/N) Σ_{i=1}^{N} G_i

**every** round — also when nobody reported, in which case it re-applies the stored memories.
``Σ_i G_i`` is kept as a running float64 sum, so a round costs O(reports · dim), not O(N · dim).

Choices: updates are stored raw, as the code does (the paper's lr-normalised memory is not used,
which we did not verify); the objective weights are equal (1/N) and the selector's weights are
ignored, as in the FedAU/FedAWE code bases. Under full participation this is FedAvg with equal
weights.

Notes: ``docs/algorithms/baselines.md#mifa``.
"""

from __future__ import annotations

import torch

from .base import ALGORITHMS, Reports
from .server_step import ServerLRConfig
from .update_memory import RememberingRule

SLOT = "mifa/G_i"


class MIFAConfig(ServerLRConfig):
    pass


@ALGORITHMS.register("mifa")
class MIFA(RememberingRule):
    """MIFA: the server averages every client's latest update (zeros until it first reports), every round."""

    Config = MIFAConfig
    reads_each_report = "keeps every client's latest raw update on the server and re-releases it each round"

    slot = SLOT  # G_i; the memory keeps Σ_i G_i too

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        if len(reports):
            self.memory.replace(reports.clients, reports.updates)
        return (self.memory.sum / self.num_clients).to(global_params.dtype)

