"""Model architectures in plain torch.nn, and the flat-vector view of their parameters."""

from . import cnn, linear, lstm, mobile, resnet  # noqa: F401  (register components)
from .flat import FlatModel
from .registry import MODELS

__all__ = ["MODELS", "FlatModel"]
