"""Staleness weights ``s(τ)`` of asynchronous server rules (FedAsync, FedBuff).

``τ`` is the number of server updates between a client's download and its upload. The rules, with the
names of FedAsync (Xie et al., 2019, §5.2) and FedBuff (Nguyen et al., AISTATS 2022, §3):

* ``constant``: ``s = 1``;
* ``polynomial``: ``s = (1 + τ)^(−a)`` (FedBuff and FedScale use ``a = 0.5``: ``1/√(1+τ)``);
* ``hinge``: ``s = 1`` for ``τ ≤ b``, else ``1 / (a (τ − b) + 1)``;
* ``refl``: REFL's stale-aware weight (REFL §4.2, Eq. 2; :func:`turnout.algorithms.stale_aware.staleness_factors`),
  ``(1 − β)/(τ + 1) + β (1 − e^{−Λ/Λ_max})``, where ``Λ`` is a stale report's deviation from the mean of the
  buffer's fresh (``τ = 0``) reports; fresh reports weigh 1. It needs a buffer of reports to compare.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from ..config.base import Fraction, StrictModel
from ..config.limits import MAX_ROUNDS, MAX_SCALE
from .stale_aware import refl_deviation, staleness_factors


class StalenessConfig(StrictModel):
    rule: Literal["constant", "polynomial", "hinge", "refl"] = Field(
        "polynomial", description="s(τ): constant (1), polynomial ((1+τ)^−a), hinge (1 up to b, then 1/(a(τ−b)+1)) "
                                  "or refl (REFL's stale-aware weight against the buffer's fresh reports)")
    a: float = Field(0.5, ge=0.0, le=MAX_SCALE, description="a of the polynomial and hinge rules (FedBuff: 0.5)")
    b: int = Field(4, ge=0, le=MAX_ROUNDS, description="b of the hinge rule: staleness that is not discounted")
    beta: Fraction = Field(0.35, description="β of the refl rule (REFL: 0.35)")


def staleness_weights(cfg: StalenessConfig, staleness: np.ndarray, updates: torch.Tensor | None = None,
                      weights: np.ndarray | None = None) -> np.ndarray:
    """``s(τ)`` per report; the ``refl`` rule also reads the reports' ``updates`` and selector ``weights``."""
    tau = np.asarray(staleness, np.float64)
    if cfg.rule == "constant":
        return np.ones_like(tau)
    if cfg.rule == "polynomial":
        return (1.0 + tau) ** (-cfg.a)
    if cfg.rule == "hinge":
        return np.where(tau <= cfg.b, 1.0, 1.0 / (cfg.a * (tau - cfg.b) + 1.0))
    s = np.ones_like(tau)  # refl: fresh reports weigh 1
    stale = tau > 0
    if stale.any():
        if updates is None or weights is None:
            raise ValueError("the refl staleness rule compares stale reports with the fresh ones: pass updates")
        fresh_t, stale_t = torch.from_numpy(~stale), torch.from_numpy(stale)
        _, ratio = refl_deviation(updates[fresh_t], np.asarray(weights, np.float64)[~stale], updates[stale_t])
        s[stale] = staleness_factors("refl", tau[stale], ratio, cfg.beta, 1.0)
    return s


__all__ = ["StalenessConfig", "staleness_weights"]
