"""GlueFL mask shifting: a shared mask plus unique top-k per client, mask regeneration, re-scaled error compensation."""

from __future__ import annotations

from typing import Literal, Optional, Sequence

from pydantic import Field, model_validator

from ..config.base import Fraction, StrictModel
from ..config.limits import MAX_ROUNDS
from .base import COMPRESSORS
from .sparse import ACCOUNTING_HELP, SCOPE_HELP, SparsifierBase


@COMPRESSORS.register("gluefl")
class GlueFLMaskShifting(SparsifierBase):
    """GlueFL mask shifting: shared mask + unique top-k, mask regeneration every I rounds, re-scaled error compensation.

    GlueFL §3.2–3.3, Algorithm 3, Eqs. (5)–(7) and App. E; notes: ``docs/algorithms/gluefl.md#mask-shifting``.
    With the ``sticky`` selector this is GlueFL; alone it works with any selector and any algorithm that
    uploads model deltas.

    - **Client** (per tensor, ``k = max(1, ⌊q·numel⌋)``): on a regeneration round plain top-q; otherwise
      every position of the shared mask M plus the largest positions outside M, q in total.
    - **Server**: the same rule on the algorithm's model change (the weighted aggregate), then
      ``M ← top_{q_shr}`` of the applied change (its non-zero positions), so consecutive server
      supports share ≥ q_shr of each tensor. Regeneration rounds (``round % I == 0``: the code's rounds
      1, 11, 21, …) use plain top-q, so the next mask is drawn afresh.
    - **Error compensation** (``rescaled``, eq. 7): ``g ← g + h̃/ν_now`` then ``h̃ ← ν_now·(g − sent)``,
      i.e. ``h ← (ν_prev/ν_now)·h``; the residual is reloaded only for clients sampled as sticky
      (``compensation_reload: sticky``, the code's rule; selectors without a sticky group have no
      sticky clients) or for every returning client (``always``). ``unscaled`` adds h as stored
      (App. E's "EC"), ``off`` drops it (App. E's "None").
    - **Wire**: uploads carry |M| values at known positions + the unique values and their indices
      (or a bitmap); downloads carry what the client lacks plus the mask M (``accounting: exact``).
      BatchNorm buffers are sent dense and averaged by the engine.
    """

    class Config(StrictModel):
        ratio: float = Field(0.2, gt=0.0, le=1.0, description="q: total fraction sent per tensor (0.2 ShuffleNet, "
                                                              "0.3 MobileNet/ResNet-34)")
        shared_ratio: Fraction = Field(
            0.16, description="q_shr: fraction of each tensor in the shared mask (0.16 / 0.24); "
                                              "0 = no shared mask (STC-like)")
        regenerate_every: Optional[int] = Field(
            10, ge=1, le=MAX_ROUNDS,
            description="I: every I rounds both sides use plain top-q and the shared mask is regenerated "
                        "from scratch; null = never regenerate (ablation I = ∞)")
        error_compensation: Literal["rescaled", "unscaled", "off"] = Field(
            "rescaled", description="rescaled: residual re-scaled by ν_prev/ν_now (eq. 7, REC); unscaled: residual "
                                    "added as stored (ablation EC); off: no residual (ablation None)")
        compensation_reload: Literal["sticky", "always"] = Field(
            "sticky", description="which clients reload their residual: sticky — only those sampled from the sticky "
                                  "group (the code's rule); always — every returning client (the paper's eq. 7)")
        scope: Literal["tensor", "global"] = Field("tensor", description=SCOPE_HELP)
        accounting: Literal["exact", "gluefl_code"] = Field("exact", description=ACCOUNTING_HELP)

        @model_validator(mode="after")
        def _shared_below_total(self):
            if self.shared_ratio > self.ratio:
                raise ValueError(f"shared_ratio = {self.shared_ratio} must be <= ratio = {self.ratio} "
                                 "(the shared mask is part of what is sent)")
            return self

    residual_name = "gluefl/residual"

    def __init__(self, cfg: Config, dim: int, seed: int, store=None, layout: Sequence[int] | None = None):
        super().__init__(cfg, dim, seed, store, layout)
        self.client_ratio = self.server_ratio = cfg.ratio
        self.shared_ratio = cfg.shared_ratio if cfg.shared_ratio > 0 else None
        self.regenerate_every = cfg.regenerate_every
        self.ec = cfg.error_compensation
        self.reload = cfg.compensation_reload
        self.code_unique_ratio = cfg.ratio - cfg.shared_ratio
