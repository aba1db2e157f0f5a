"""Top-k sparsification on the client side, the server side or both, per tensor or global, with error feedback."""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from ..config.base import StrictModel
from ..core.capabilities import UploadKind
from .base import COMPRESSORS
from .sparse import ACCOUNTING_HELP, SCOPE_HELP, SparsifierBase


@COMPRESSORS.register("topk")
class TopK(SparsifierBase):
    """Top-k sparsification (client uploads, server update or both; per tensor or global) with optional error feedback.

    A client sends the ``k = max(1, ⌊ratio·numel⌋)`` largest-magnitude coordinates of its update
    (per parameter tensor with ``scope: tensor``, else over the whole vector); the server keeps the
    ``k`` largest coordinates of its model change, so only their support changes and a stale client
    downloads the union of the supports it missed. Client error feedback keeps what was not sent in
    the per-client state store and adds it to the next update, re-scaled by the ratio of the
    client's aggregation weights (GlueFL eq. 7; plain error feedback when weights do not change).
    Server error feedback does the same for what the server's top-k dropped.
    """

    class Config(StrictModel):
        ratio: float = Field(0.1, gt=0.0, le=1.0,
                             description="q: fraction of coordinates kept (k = max(1, ⌊q·numel⌋))")
        side: Literal["client", "server", "both"] = Field(
            "client", description="client: sparsify uploads; server: sparsify the server's model change (what "
                                  "clients download); both")
        scope: Literal["tensor", "global"] = Field("tensor", description=SCOPE_HELP)
        error_feedback: bool = Field(True, description="clients keep the unsent part and add it to their next update")
        server_error_feedback: bool = Field(False, description="the server keeps what its top-k dropped and adds it "
                                                               "to the next round's change")
        accounting: Literal["exact", "gluefl_code"] = Field("exact", description=ACCOUNTING_HELP)

    residual_name = "topk/residual"
    #: model deltas and FedSUM-style gradient differences are additive vectors top-k applies to
    accepts = frozenset({UploadKind.MODEL_DELTA, UploadKind.GRADIENT_DIFFERENCE})

    def __init__(self, cfg: Config, dim: int, seed: int, store=None, layout: Sequence[int] | None = None):
        super().__init__(cfg, dim, seed, store, layout)
        client, server = cfg.side in ("client", "both"), cfg.side in ("server", "both")
        self.client_ratio = cfg.ratio if client else None
        self.server_ratio = cfg.ratio if server else None
        self.ec = "rescaled" if (cfg.error_feedback and client) else "off"
        self.reload = "always"
        self.server_ec = bool(cfg.server_error_feedback and server)
