"""FedAWE (Xiang et al., NeurIPS 2024) as coded in ``mingxiang12/FedAWE`` ``varying_awe.py``.

Per client: a local copy ``x̂_i`` (initially ``x^0``; store slot ``fedawe/x_hat``, a missing row
means ``x^0``) and an echo counter ``e_i`` (initially 1; an int array over all N). A client of
``S_t`` (the clients whose reports reach the server this round):

* trains K steps **from its own copy** ``x̂_i`` (``client_start``), not from ``x^t``;
* sends ``Δ_i = x_i^K − x̂_i``; the server echoes it as ``e_i Δ_i`` and resets ``e_i = 1``.

Everyone else: ``e_i += 1`` (so ``e_i = t − τ_i(t−1)``). Server, if ``S_t ≠ ∅``:

    x^{t+1} = (1/|S_t|) Σ_{i∈S_t} x̂_i + η_g · clip_{0.5}( (1/|S_t|) Σ_{i∈S_t} e_i Δ_i )
    clip_c(v) = v · min(1, c/‖v‖₂)
    x̂_i ← x^{t+1} for i ∈ S_t

and if ``S_t = ∅`` the model is unchanged. The clip (``util.accumulation`` of the code, [QUIRK]:
not confirmed in the paper) is on by default; ``clip: null`` turns it off.

**Evaluation.** The code evaluates ``x̄ = (1/N) Σ_{i=1}^{N} x̂_i``, the average of *all* clients'
copies, not ``x^t``; :meth:`eval_params` returns it (``Σ x̂_i`` is a running float64 sum, so this is
O(dim)). The engine evaluates ``Algorithm.eval_params`` (server test set and per-client columns).

Choices: ``x̂_i ← x^{t+1}`` is committed lazily, at the next call that sees the engine's global
model (next round's ``client_start`` / ``aggregate``, or ``eval_params``), so the copy is exactly
what the engine holds after a compressor's ``server_update`` (identical to the returned model
without one). The selector's weights are ignored (equal weights, as in the code); the downlink is
counted by the engine when the client is next selected (one vector), not right after the round.
Under full participation with the clip off, FedAWE is FedAvg with equal weights.

Notes: ``docs/algorithms/baselines.md#fedawe``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from pydantic import Field

from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports
from .server_step import Direction, ServerLRConfig

SLOT = "fedawe/x_hat"


class FedAWEConfig(ServerLRConfig):
    clip: Optional[float] = Field(0.5, gt=0.0, description="L2-norm clip of the mean echoed update (code: 0.5; "
                                                           "null = off)")


@ALGORITHMS.register("fedawe")
class FedAWE(Algorithm):
    """FedAWE: clients train from stale local copies; updates echoed by the rounds missed; evaluated on the \
copies' mean."""

    Config = FedAWEConfig

    state_attrs = ("echo", "x0", "copy_sum", "pending")

    def __init__(self, cfg: FedAWEConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.store = ctx.state_store()
        self.num_clients = int(ctx.num_clients)
        self.echo = np.ones(self.num_clients, dtype=np.int64)  # e_i
        self.x0: torch.Tensor | None = None  # the initial model: every copy not yet written
        self.copy_sum: torch.Tensor | None = None  # Σ_i x̂_i (float64)
        self.pending = np.zeros(0, dtype=np.int64)  # S_{t−1}: copies to set to the next global model

    # ---- state ----------------------------------------------------------------------------------
    def _sync(self, global_params: torch.Tensor) -> None:
        """Capture x^0 on first sight; commit x̂_i ← (engine's) global model for last round's participants."""
        if self.x0 is None:
            self.x0 = global_params.detach().clone()
            self.copy_sum = self.x0.double() * self.num_clients
        if len(self.pending):
            clients, self.pending = self.pending, np.zeros(0, dtype=np.int64)
            old = self.copies(clients)
            self.copy_sum += global_params.double() * len(clients) - old.sum(0, dtype=torch.float64)
            self.store.put(SLOT, clients, global_params.detach().expand(len(clients), -1))

    def copies(self, clients: np.ndarray) -> torch.Tensor:
        """x̂_i for ``clients`` (rows not written yet are x^0)."""
        out = self.store.get(SLOT, clients)
        fresh = ~self.store.has(SLOT, clients)
        if fresh.any():
            out[torch.from_numpy(fresh)] = self.x0.to(out.dtype)
        return out

    # ---- client rule ----------------------------------------------------------------------------
    def client_start(self, client: int, global_params: torch.Tensor) -> torch.Tensor:
        self._sync(global_params)
        return self.copies(np.array([client]))[0].to(global_params.dtype)

    # ---- server rule ----------------------------------------------------------------------------
    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> Direction | None:
        self._sync(global_params)
        clients = np.asarray(reports.clients, dtype=np.int64)
        echo = self.echo[clients].copy()
        self.echo += 1
        self.echo[clients] = 1
        if len(clients) == 0:
            return None
        k = len(clients)
        base = self.copies(clients).sum(0, dtype=torch.float64) / k
        e = torch.as_tensor(echo, dtype=reports.updates.dtype)
        echoed = (e @ reports.updates).double() / k
        if self.cfg.clip is not None:
            norm = float(torch.linalg.vector_norm(echoed))
            if norm > self.cfg.clip:
                echoed = echoed * (self.cfg.clip / norm)
        self.pending = clients
        return Direction(echoed, base=base)  # the step moves the copies' mean, not the global model

    # ---- evaluation -----------------------------------------------------------------------------
    def eval_params(self, global_params: torch.Tensor) -> torch.Tensor:
        """The model FedAWE is evaluated on: x̄ = (1/N) Σ_i x̂_i (the code's ``evaluate(w_global, w_local)``)."""
        self._sync(global_params)
        return (self.copy_sum / self.num_clients).to(global_params.dtype)

