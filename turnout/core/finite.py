"""Which rows of a stacked tensor hold only finite values, cheaply: a per-round check on every cohort's reports."""

from __future__ import annotations

import torch


def finite_rows(x: torch.Tensor) -> torch.Tensor:
    """``isfinite(x).all(dim=1)`` as a bool tensor on ``x``'s device, without testing every element.

    A row holding a NaN or an infinity sums to NaN or ±inf (IEEE propagation), so only rows whose sum
    is not finite — such a row, or finite values whose sum overflows — are checked element by element.
    Stacked reports are large (39 × 159,010 floats for GlueFL's MLP cohort) and the element-wise test
    over all of them cost about a tenth of GlueFL's upload encoding in a profiled round.
    """
    ok = torch.isfinite(x.sum(dim=1))
    suspect = torch.nonzero(~ok).flatten()
    if len(suspect):
        ok[suspect] = torch.isfinite(x[suspect]).all(dim=1)
    return ok
