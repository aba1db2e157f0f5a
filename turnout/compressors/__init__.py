"""Compressor seam: what goes on the wire up and down, and what that costs in bytes."""

from . import apf, gluefl, none, quantize, stc, topk  # noqa: F401  (registers components)
from .base import COMPRESSORS, Compressor, sparse_bytes

__all__ = ["COMPRESSORS", "Compressor", "sparse_bytes"]
