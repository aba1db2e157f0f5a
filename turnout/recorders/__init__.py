"""Recorder seam: where per-round and per-client tables go."""

from . import parquet, tables  # noqa: F401  (registers components)
from .base import RECORDERS, Recorder

__all__ = ["RECORDERS", "Recorder"]
