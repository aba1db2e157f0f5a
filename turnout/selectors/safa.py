"""SAFA's selection as REFL emulates it (REFL §5.2): launch every online client, wait for a share of them.

The server rule and the cache of client models live in ``algorithms/safa.py``; the deadline round
mode (``max_reports``) supplies the "first N_t reports" cut.
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_CLIENTS
from .base import SELECTORS, Cohort, SelectionContext, Selector


@SELECTORS.register("safa")
class SAFASelector(Selector):
    """SAFA as emulated by REFL: launch every online client; the round wants ⌊|online| · target_ratio⌋ reports."""

    class Config(StrictModel):
        target_ratio: float = Field(0.1, gt=0.0, le=1.0,
                                    description="share of the launched clients whose reports the round waits for "
                                                "(paper 0.1)")
        clients_per_round: Optional[int] = Field(
            None, ge=1, le=MAX_CLIENTS,
            description="cap on the clients launched (a random subset of the online ones); unset: all")
        weighting: Literal["n_samples", "equal"] = Field(
            "n_samples", description="aggregation weight of a report: n_k (relative) or equal")

    def target(self) -> int:
        return min(self.cfg.clients_per_round or self.num_clients, self.num_clients)

    def select(self, ctx: SelectionContext) -> Cohort:
        available = np.asarray(ctx.available, np.int64)
        k = min(ctx.launch, len(available))
        clients = available if k == len(available) else np.sort(ctx.rng.choice(available, size=k, replace=False))
        w = self.n_train[clients].astype(np.float64) if self.cfg.weighting == "n_samples" else np.ones(len(clients))
        quota = max(1, int(np.floor(len(clients) * self.cfg.target_ratio))) if len(clients) else 0
        return Cohort(clients, w, normalize=True, target=quota)
