"""No compression: dense float32 uploads; downloads still send only what a client lacks."""

from __future__ import annotations

import numpy as np
import torch

from ..config.base import NoOptions
from .base import COMPRESSORS, VALUE_BYTES, Compressor


@COMPRESSORS.register("none")
class NoCompression(Compressor):
    """Dense float32 uploads; downloads carry the coordinates changed since the client's last sync."""

    Config = NoOptions
    passes_uploads_through = True

    def encode_uploads(self, round: int, clients: np.ndarray, updates: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        return updates, np.full(len(clients), self.dim * VALUE_BYTES, dtype=np.int64)
