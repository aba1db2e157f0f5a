"""STC as coded in the GlueFL repository: client top-q per tensor and server top-q of the aggregate."""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from ..config.base import StrictModel
from .base import COMPRESSORS
from .sparse import ACCOUNTING_HELP, SCOPE_HELP, SparsifierBase


@COMPRESSORS.register("stc")
class STC(SparsifierBase):
    """STC: client top-q and server top-q of the aggregate (per tensor); ternarisation and error feedback as options.

    Notes: ``docs/algorithms/baselines.md#stc`` (``TCtower/GlueFL``, ``fl_method: STC``): each client keeps the
    ``max(1, ⌊q·numel⌋)`` largest coordinates of every tensor of its update, the server keeps as many
    of the weighted aggregate, and clients download the union of the server supports they missed.
    The code's baseline drops STC's ternarisation (Sattler et al. 2019), as does the GlueFL paper:
    ``ternary: true`` restores it on both sides (kept values become sign × mean magnitude per tensor;
    uploads cost positions + 1 bit per value + one float per tensor). The code computes a residual
    but never reloads it ([QUIRK], so the default has no error feedback); ``error_feedback: true``
    reloads it as STC intends, re-scaled by the ratio of aggregation weights.
    """

    class Config(StrictModel):
        ratio: float = Field(0.2, gt=0.0, le=1.0, description="q: fraction kept per tensor on both sides (GlueFL's "
                                                              "STC baseline: 0.2 ShuffleNet, 0.3 MobileNet/ResNet)")
        ternary: bool = Field(False, description="STC's ternarisation: kept values become sign × mean |value| per "
                                                 "tensor (off as in the GlueFL code and paper)")
        error_feedback: bool = Field(False, description="reload each client's residual into its next update (the "
                                                        "GlueFL code computes it but never reloads it)")
        server_error_feedback: bool = Field(False, description="the server keeps what its top-q dropped and adds it "
                                                               "to the next aggregate (STC paper; not in the code)")
        scope: Literal["tensor", "global"] = Field("tensor", description=SCOPE_HELP)
        accounting: Literal["exact", "gluefl_code"] = Field("exact", description=ACCOUNTING_HELP)

    residual_name = "stc/residual"

    def __init__(self, cfg: Config, dim: int, seed: int, store=None, layout: Sequence[int] | None = None):
        super().__init__(cfg, dim, seed, store, layout)
        self.client_ratio = self.server_ratio = cfg.ratio
        self.ternary = cfg.ternary
        self.ec = "rescaled" if cfg.error_feedback else "off"
        self.reload = "always"
        self.server_ec = cfg.server_error_feedback
