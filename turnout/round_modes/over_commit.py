"""Over-commitment: launch more clients than needed and close the round at the K-th report.

Follows the FedScale / GlueFL ``tictak_client_tasks`` round (notes:
``docs/algorithms/world.md#over-commitment``), which is also REFL's "OC" mode (REFL §5.1, the code's
``exp_type = 1``) and the over-commitment step of GlueFL (GlueFL §5.1, App. F):

1. launch ``ceil(oc·K)`` clients (``rounding: round`` gives FedScale's ``round(K·oc)``);
2. a client "survives" if it delivers before it goes offline (``finish_s <= dropped_at_s``);
3. the K fastest survivors are aggregated and the round lasts as long as the K-th of them;
4. every other launched client is a straggler: the server stops waiting at the close, so its
   work up to then (or up to its dropout) is wasted — FedScale discards stragglers.

Deviations, each documented where the code makes it:

- FedScale learns of dropouts from an oracle before the round starts (a sampled client is "lost"
  if not active at clock + its completion time), so when fewer than K clients survive its round
  lasts only until the last survivor delivers. Here the server learns of a dropout only when it
  happens, so in that case the round lasts until the last survivor has delivered *and* every
  dropped client has gone offline, i.e. the largest busy time (the same rule as ``wait_all``).
- ``keep_stragglers: true`` turns REFL's stale-update buffering (REFL §4.2) on for this mode: stragglers
  that will still deliver keep training and are flagged ``late`` instead of being discarded.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Literal

import numpy as np
from pydantic import Field

from ..config.base import OverCommitment, StrictModel
from .base import ROUND_MODES, RoundClose, RoundMode


class OverCommitConfig(StrictModel):
    oc: OverCommitment = Field(1.3, description="over-commitment factor: launch oc·K clients for K wanted "
                                                "reports (FedScale / GlueFL / REFL default 1.3)")
    rounding: Literal["ceil", "round"] = Field(
        "ceil", description="how oc·K becomes a client count: ceil (never fewer than oc·K) or round "
                            "(FedScale's Python round(K·oc), half to even)")
    keep_stragglers: bool = Field(
        False, description="false: stragglers are discarded at the close and their work is wasted (FedScale); "
                           "true: stragglers that will still deliver keep training and are kept as late "
                           "(stale) reports for a later round (REFL's SAA)")


def over_committed(target: int, oc: float, rounding: str = "ceil") -> int:
    """How many clients to launch for ``target`` reports at over-commitment ``oc`` (never fewer than ``target``)."""
    if rounding == "round":
        # FedScale / REFL: ``num_to_sample = round(total_worker * overcommitment)`` on floats.
        return max(target, int(round(target * oc)))
    # Decimal on the option's shortest repr so that 1.3·10 is exactly 13, not 13.000000000000002 → 14.
    return max(target, math.ceil(Decimal(repr(oc)) * target))


def first_to_deliver(finish_s: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """Mask of the first ``k`` of ``candidates`` to deliver; ties go to the lower cohort index."""
    idx = np.flatnonzero(candidates)
    order = idx[np.argsort(finish_s[idx], kind="stable")]  # stable: equal times keep cohort order
    out = np.zeros(len(finish_s), dtype=bool)
    out[order[:max(k, 0)]] = True
    return out


@ROUND_MODES.register("over_commit")
class OverCommit(RoundMode):
    """Launch ceil(oc·K) clients, aggregate the first K to deliver, discard the stragglers (FedScale OC)."""

    Config = OverCommitConfig

    def launch_count(self, target: int) -> int:
        return over_committed(target, self.cfg.oc, self.cfg.rounding)

    def close(self, finish_s: np.ndarray, dropped_at_s: np.ndarray, target: int) -> RoundClose:
        finish_s = np.asarray(finish_s, dtype=np.float64)
        dropped_at_s = np.asarray(dropped_at_s, dtype=np.float64)
        n = len(finish_s)
        if n == 0:
            empty = np.zeros(0, dtype=bool)
            return RoundClose(aggregated=empty, late=empty.copy(), duration_s=0.0, busy_s=np.zeros(0))

        survives = finish_s <= dropped_at_s  # delivers before going offline (FedScale's "lost" otherwise)
        until_gone = np.minimum(finish_s, dropped_at_s)  # when the server hears a report or loses the client
        k = max(int(target), 0)
        aggregated = first_to_deliver(finish_s, survives, k)
        if k > 0 and int(survives.sum()) >= k:
            # FedScale / REFL OC: the round lasts until the K-th fastest survivor delivers.
            duration = float(finish_s[aggregated].max())
        elif k == 0:
            duration = 0.0
        else:
            # Fewer than K survivors: everything that survives is aggregated. Deviation from FedScale (see
            # the module docstring): the server waits until it has heard from, or lost, every client.
            duration = float(until_gone.max())

        stragglers = ~aggregated
        if self.cfg.keep_stragglers:
            # Nobody is cut: surviving stragglers train to the end and are kept as late reports;
            # doomed ones work until they go offline.
            late = stragglers & survives
            busy = until_gone.copy()
        else:
            # FedScale: the server stops waiting at the close; stragglers' work up to then is wasted.
            late = np.zeros(n, dtype=bool)
            busy = np.where(aggregated, finish_s, np.minimum(until_gone, duration))
        return RoundClose(aggregated=aggregated, late=late, duration_s=duration, busy_s=busy)
