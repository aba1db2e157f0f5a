"""Uniform b-bit quantisation of uploads (Adaptive-OU's 8-bit compression experiment), optionally of downloads."""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
import torch
from pydantic import Field

from ..config.base import StrictModel
from ..core import rng as rngmod
from ..core.capabilities import UploadKind
from ..core.finite import finite_rows
from ..core.records import SentStep
from .base import COMPRESSORS, Compressor
from .sparse import Layout, index_bytes

UP_PURPOSE = "compressor/quantize-up"
DOWN_PURPOSE = "compressor/quantize-down"


def quantize(x: torch.Tensor, noise: torch.Tensor | None, bits: int, scheme: str, layout: Layout) -> torch.Tensor:
    """Quantise each row of ``x`` per tensor; ``noise`` (uniform [0,1)) gives stochastic rounding, None nearest."""
    out = torch.empty_like(x)
    for a, b, _ in layout.segments():
        seg = x[:, a:b].to(torch.float64)
        u = noise[:, a:b].to(torch.float64) if noise is not None else None
        if scheme == "minmax":  # 2^b levels between the tensor's min and max
            lo = seg.min(dim=1, keepdim=True).values
            hi = seg.max(dim=1, keepdim=True).values
            step = (hi - lo) / (2 ** bits - 1)
            safe = torch.where(step > 0, step, torch.ones_like(step))
            q = (seg - lo) / safe
            lvl = torch.floor(q + u) if u is not None else torch.round(q)
            dec = lo + lvl.clamp(0, 2 ** bits - 1) * safe
            out[:, a:b] = torch.where(step > 0, dec, seg).to(x.dtype)
        else:  # QSGD: 1 sign bit + (b − 1)-bit level of |x|/‖x‖₂
            s = 2 ** (bits - 1) - 1
            norm = seg.norm(dim=1, keepdim=True)
            safe = torch.where(norm > 0, norm, torch.ones_like(norm))
            q = seg.abs() / safe * s
            lvl = torch.floor(q + u) if u is not None else torch.round(q)
            out[:, a:b] = (torch.sign(seg) * safe * lvl.clamp(0, s) / s).to(x.dtype)
    return out


@COMPRESSORS.register("quant8")
class Quantize(Compressor):
    """8-bit quantisation of uploads (min–max or QSGD levels, stochastic or nearest rounding); downloads optional.

    Adaptive-OU (§4.3.3, Fig. 3) compresses the model to 8 bits and shows that neither it nor
    FedAvg is much affected; the seed names no scheme, so ``minmax`` (2^b levels between each
    tensor's min and max, two float32 per tensor) with unbiased stochastic rounding is the default
    and ``qsgd`` (sign + (b−1)-bit level of |x|/‖x‖₂, one float32 per tensor) the alternative.
    Rounding noise comes from the (seed, purpose, round, client) streams. Uploads cost
    ``⌈D·b/8⌉`` bytes plus the per-tensor scales. With ``downlink: true`` the server's model change
    is quantised too and a download costs ``⌈lacking·b/8⌉`` + the cheaper of indices and bitmap +
    scales (a client that missed several rounds is assumed to receive its missing coordinates
    quantised and reconstruct the global model exactly, the accounting device of GlueFL's code).
    """

    class Config(StrictModel):
        bits: int = Field(8, ge=2, le=16, description="bits per value (8 in Adaptive-OU's experiment)")
        scheme: Literal["minmax", "qsgd"] = Field(
            "minmax", description="minmax: 2^bits levels between each tensor's min and max; qsgd: sign + "
                                  "(bits−1)-bit level of |x|/‖x‖₂")
        rounding: Literal["stochastic", "nearest"] = Field(
            "stochastic", description="stochastic (unbiased, seeded per round and client) or nearest level")
        scope: Literal["tensor", "global"] = Field(
            "tensor", description="tensor: one scale per parameter tensor (needs the model layout from the engine, "
                                  "else the whole vector counts as one tensor); global: one scale for the vector")
        downlink: bool = Field(False, description="also quantise the server's model change and price downloads "
                                                  "at bits per value")

    # any numeric upload but Adaptive-OU's NACK encoding (it has its own 8-bit option)
    accepts = frozenset({UploadKind.MODEL_DELTA, UploadKind.GRADIENT_DIFFERENCE,
                         UploadKind.CONTROL_VARIATE})

    def __init__(self, cfg: Config, dim: int, seed: int, store=None, layout: Sequence[int] | None = None):
        super().__init__(cfg, dim, seed, store)
        self.layout = Layout.build(layout, dim, cfg.scope)
        self.scale_bytes = (8 if cfg.scheme == "minmax" else 4) * len(self.layout)

    def _noise(self, purpose: str, round: int, clients) -> torch.Tensor | None:
        if self.cfg.rounding == "nearest":
            return None
        rows = [rngmod.stream(self.seed, purpose, round, int(c)).random(self.dim, dtype=np.float32) for c in clients]
        return torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, self.dim)

    def dense_upload_bytes(self, count: int) -> np.ndarray:
        return np.full(count, (self.dim * self.cfg.bits + 7) // 8 + self.scale_bytes, dtype=np.int64)

    def encode_uploads(self, round: int, clients: np.ndarray, updates: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        k = len(clients)
        size = int(self.dense_upload_bytes(1)[0])
        if k == 0:
            return updates, np.zeros(0, dtype=np.int64)
        dec = quantize(updates, self._noise(UP_PURPOSE, round, clients), self.cfg.bits, self.cfg.scheme, self.layout)
        bad = ~finite_rows(updates)
        dec[bad] = updates[bad]
        return dec, np.full(k, size, dtype=np.int64)

    def server_update(self, round: int, update: torch.Tensor) -> SentStep:
        if not self.cfg.downlink:
            return SentStep(update)
        if not bool(torch.isfinite(update).all()):
            return SentStep(update, update != 0)
        sent = quantize(update.unsqueeze(0), self._noise(DOWN_PURPOSE, round, [rngmod.NONE]), self.cfg.bits,
                        self.cfg.scheme, self.layout)[0]
        return SentStep(sent, sent != 0)  # a coordinate quantised to zero is not sent

    def download_bytes(self, lacking: np.ndarray) -> np.ndarray:
        lacking = np.asarray(lacking, dtype=np.int64)
        if not self.cfg.downlink:
            return super().download_bytes(lacking)
        vals = (lacking * self.cfg.bits + 7) // 8
        return np.where(lacking > 0, vals + index_bytes(lacking, self.dim) + self.scale_bytes, 0).astype(np.int64)
