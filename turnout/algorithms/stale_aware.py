"""Staleness-aware aggregation of late arrivals (REFL's SAA and the rules it compares against).

REFL §4.2, Eq. (2), as coded in ``ahmedcs/REFL`` ``core/aggregator.py`` (notes:
``docs/algorithms/refl.md#staleness-weights``). Deadline and over-commit rounds leave stragglers
that keep training; the engine delivers their reports when they arrive, with ``staleness τ_s`` =
current round − the round whose model they started from (the physically consistent default). This
server rule folds them into the round's aggregate:

    x_{t+1} = x_t + η_g · Σ_{i∈F∪S} (v_i f_i / Σ v f) u_i

with ``f_i = 1`` for fresh reports and a staleness weight ``f_s`` for stale ones, and ``v_i`` the
selector's weight (REFL's ``w_f = 1`` is the selector's ``weighting: equal``; with absolute selector
weights the sum is used as given). Rules (the paper's names; the code swaps DynSGD / AdaSGD labels):

* ``refl`` (``stale_factor = −4``): ``Λ_s = ‖u_s − û_F‖² / ((n_F+1)² ‖û_F‖²)``, ``Λ_max = max_s Λ_s``,
  ``f_s = (1−β)/(τ_s+1) + β (1 − e^{−Λ_s/Λ_max} / c)`` with β = 0.35 and ``c = scale_coff`` (1 in the
  run scripts, the paper's formula; the parser default is 10). ``û_F`` is the weighted mean of the
  fresh reports. Λ_s/Λ_max does not depend on the normaliser, so a zero ``û_F`` is harmless; with no
  fresh report (nothing to deviate from) we take Λ_s/Λ_max = 1 for every stale report, and 0 when all
  stale reports equal ``û_F``;
* ``equal``: ``f = 1``; ``dynsgd``: ``f = 1/(τ+1)``; ``adasgd``: ``f = e^{−(τ+1)}``;
  ``average``: ``f = 1/mean_s(τ_s+1)`` (one weight for every stale report of the round).

Choices:

* ``combine: deltas`` (default): ``u`` are model deltas, each stale delta applied to the current model
  (the paper's "updates"). ``combine: models`` follows the code (``send_delta = 0``): ``u_i = x_{o_i} + Δ_i``
  is the client's full local model built on its origin model ``x_{o_i}`` (kept for ``max_staleness``
  rounds, or for the whole run when there is no bound), and ``x_{t+1} = x_t + η_g (Σ w u − x_t)``.
* The public code's [BUG] (stale models never added to the sum, their weights still in the
  normaliser) is not replicated.
* ``timing: refl_code`` emulates the code's one-round-late application ([QUIRK]): a stale report
  that reaches the server in round r is applied in round r+1 with the staleness it had on arrival (so
  ``τ_s`` understates its age by 1). The engine still counts it as aggregated in round r; reports left
  waiting when the run ends are never applied.
* ``use_stale: false`` gives the same server rule with late reports dropped on arrival (their work
  counted as waste by the engine) — the baseline the stale rules are compared with.
* ``adapt_scale_coff`` (accuracy-driven adaptation of c) is not implemented: the server rule does not
  see accuracy.
* ``server_optimizer: {name: yogi, ...}`` applies REFL's YoGi (or Adam) server step
  (:mod:`turnout.algorithms.server_step`) to the staleness-weighted aggregate instead of
  ``η_g ·`` aggregate: ``x_{t+1} = x_t + step(Σ w u)`` (REFL §5.1 uses YoGi for every benchmark but CIFAR-10).
  Its own ``server_lr`` is the step size; the rule's ``server_lr`` must then stay 1. Default ``none``. It is the
  old spelling of ``server_step: {name: yogi, lr: ..., init: fedscale, ...}``, which any rule takes.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from ..config.base import Fraction
from ..config.limits import MAX_SCALE
from ..core.state import Stateful
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports
from .late_reports import UNBOUNDED, MaxStaleness
from .server_step import ServerLRConfig, ServerOptimizer, ServerOptimizerOption

#: the old name of the ``server_optimizer`` block
StaleServerOptimizer = ServerOptimizer


class StaleAwareConfig(ServerOptimizerOption, ServerLRConfig, MaxStaleness):
    legacy_step_keys: ClassVar[tuple[str, ...]] = (*ServerLRConfig.legacy_step_keys, "server_optimizer")

    rule: Literal["refl", "equal", "dynsgd", "adasgd", "average"] = Field(
        "refl", description="staleness weight of a stale report: refl (deviation boost Λ_s), equal (1), dynsgd "
                            "(1/(τ+1)), adasgd (e^{−(τ+1)}), average (1/mean(τ+1))")
    beta: Fraction = Field(0.35, description="β of the REFL rule")
    scale_coff: float = Field(1.0, gt=0.0, le=MAX_SCALE,
                              description="c of the REFL rule (run scripts: 1, the paper's formula; parser default 10)")
    use_stale: bool = Field(True, description="aggregate late reports when they arrive (false: drop them)")
    timing: Literal["physical", "refl_code"] = Field(
        "physical", description="physical: apply a late report in the round it arrives; refl_code: one round "
                                "later with its arrival staleness (the code's quirk)")
    combine: Literal["deltas", "models"] = Field(
        "deltas", description="deltas: stale deltas applied to the current model (paper); models: average full "
                              "local models x_origin + Δ (REFL code's send_delta = 0)")

    def staleness_bound(self) -> int | None:
        return super().staleness_bound() if self.use_stale else None


def staleness_factors(rule: str, staleness: np.ndarray, deviation: np.ndarray | None = None, beta: float = 0.35,
                      scale_coff: float = 1.0) -> np.ndarray:
    """``f_s`` for stale reports with staleness ``τ`` (``deviation`` = Λ_s/Λ_max, for the REFL rule)."""
    tau = np.asarray(staleness, np.float64)
    if rule == "equal":
        return np.ones_like(tau)
    if rule == "dynsgd":
        return 1.0 / (tau + 1.0)
    if rule == "adasgd":
        return np.exp(-(tau + 1.0))
    if rule == "average":
        return np.full_like(tau, 1.0 / np.mean(tau + 1.0)) if len(tau) else tau
    if rule == "refl":
        ratio = np.ones_like(tau) if deviation is None else np.asarray(deviation, np.float64)
        return (1.0 - beta) / (tau + 1.0) + beta * (1.0 - np.exp(-ratio) / scale_coff)
    raise ValueError(f"unknown stale rule {rule!r}")


def refl_deviation(fresh: torch.Tensor, fresh_w: np.ndarray, stale: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(Λ_s, Λ_s/Λ_max)`` of the stale rows against the weighted mean ``û_F`` of the fresh rows."""
    n_f = len(fresh)
    if len(stale) == 0:
        return np.zeros(0), np.zeros(0)
    if n_f == 0:
        return np.full(len(stale), np.nan), np.ones(len(stale))
    w = np.asarray(fresh_w, np.float64)
    w = w / w.sum() if w.sum() > 0 else np.full(n_f, 1.0 / n_f)
    u_f = torch.as_tensor(w, dtype=torch.float64) @ fresh.double()
    dist = ((stale.double() - u_f) ** 2).sum(dim=1).numpy()
    norm = float((u_f ** 2).sum()) * (n_f + 1) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = dist / norm if norm > 0 else np.full(len(stale), np.inf)
    top = dist.max()
    ratio = dist / top if top > 0 else np.zeros(len(stale))
    return lam, ratio


class _Pending(Stateful):
    """Stale reports held back one round (``timing: refl_code``)."""

    state_attrs = ("clients", "updates", "weights", "staleness", "n_samples", "losses")

    def __init__(self, dim: int):
        self.clients = np.zeros(0, np.int64)
        self.updates = torch.zeros((0, dim))
        self.weights = np.zeros(0)
        self.staleness = np.zeros(0, np.int64)
        self.n_samples = np.zeros(0, np.int64)
        self.losses = np.zeros(0)


@ALGORITHMS.register("stale_aware")
class StaleAware(Algorithm):
    """Stale-aware aggregation of late arrivals: REFL (deviation boost), Equal, DynSGD, AdaSGD or Average weights."""

    Config = StaleAwareConfig

    state_attrs = ("pending", "history")
    scratch_attrs = ("last_stale_factor_mean", "last_deviation")

    def __init__(self, cfg: StaleAwareConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        self.pending = _Pending(ctx.dim)
        self.history: dict[int, torch.Tensor] = {}  # origin round → model (combine: models)
        self.last_stale_factor_mean = math.nan
        self.last_deviation = np.zeros(0)

    # ------------------------------------------------------------------------------------------
    def _with_pending(self, round: int, reports: Reports) -> tuple[Reports, np.ndarray]:
        """``refl_code`` timing: this round's stale arrivals wait; last round's are applied now.

        Returns the reports to apply and each one's origin round (a held report keeps the staleness
        it had on arrival, one round ago, so its origin is ``round − 1 − τ``).
        """
        stale = reports.staleness > 0
        held = self.pending
        fresh = ~stale
        ft = torch.from_numpy(fresh)
        out = Reports(
            clients=np.concatenate([reports.clients[fresh], held.clients]),
            updates=torch.cat([reports.updates[ft], held.updates.to(reports.updates.dtype)]),
            weights=np.concatenate([np.asarray(reports.weights, np.float64)[fresh], held.weights]),
            normalize=reports.normalize,
            n_samples=np.concatenate([reports.n_samples[fresh], held.n_samples]),
            losses=np.concatenate([reports.losses[fresh], held.losses]),
            staleness=np.concatenate([reports.staleness[fresh], held.staleness]))
        st = torch.from_numpy(stale)
        nxt = _Pending(self.ctx.dim)
        nxt.clients, nxt.updates = reports.clients[stale], reports.updates[st].clone()
        nxt.weights = np.asarray(reports.weights, np.float64)[stale]
        nxt.staleness, nxt.n_samples = reports.staleness[stale], reports.n_samples[stale]
        nxt.losses = reports.losses[stale]
        self.pending = nxt
        origins = np.concatenate([round - reports.staleness[fresh], round - 1 - held.staleness]).astype(np.int64)
        return out, origins

    def factors(self, reports: Reports, u: torch.Tensor) -> np.ndarray:
        """Staleness factor per report (1 for fresh ones)."""
        stale = np.asarray(reports.staleness) > 0
        f = np.ones(len(reports))
        if stale.any():
            dev = None
            if self.cfg.rule == "refl":
                fresh = ~stale
                _, dev = refl_deviation(u[torch.from_numpy(fresh)], np.asarray(reports.weights)[fresh],
                                        u[torch.from_numpy(stale)])
                self.last_deviation = dev
            f[stale] = staleness_factors(self.cfg.rule, reports.staleness[stale], dev, self.cfg.beta,
                                         self.cfg.scale_coff)
        return f

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor | None:
        cfg = self.cfg
        if cfg.combine == "models":
            self.history[round] = global_params.detach().clone()
            if cfg.max_staleness is not None:
                for old in [r for r in self.history if r < round - cfg.max_staleness - (cfg.timing == "refl_code")]:
                    del self.history[old]
        if cfg.timing == "refl_code":
            reports, origins = self._with_pending(round, reports)
        else:
            origins = round - np.asarray(reports.staleness, np.int64)
        k = len(reports)
        self.last_stale_factor_mean = math.nan
        if k == 0:
            return None
        u = reports.updates.to(global_params.dtype)
        if cfg.combine == "models":  # full local models built on each report's origin model
            base = torch.stack([self.history.get(int(o), global_params) for o in origins])
            u = base + u
        f = self.factors(reports, u)
        stale = np.asarray(reports.staleness) > 0
        if stale.any():
            self.last_stale_factor_mean = float(f[stale].mean())
        w = np.asarray(reports.weights, np.float64) * f
        if reports.normalize:
            total = w.sum()
            w = w / total if total > 0 else np.full(k, 1.0 / k)
        agg = torch.as_tensor(w, dtype=u.dtype) @ u
        if cfg.combine == "models":
            agg = agg - (global_params if reports.normalize else float(w.sum()) * global_params)
        return agg

    def round_metrics(self) -> dict[str, object]:
        """Extra row columns: mean staleness factor of the stale reports."""
        return {"stale_weight_mean": self.last_stale_factor_mean}

__all__ = ["StaleAware", "refl_deviation", "staleness_factors", "UNBOUNDED"]
