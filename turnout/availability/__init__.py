"""Availability seam: which clients can be reached at a round, and until when."""

from . import always, fedgs, fedsum, trace  # noqa: F401  (registers components)
from .base import AVAILABILITY, Availability

__all__ = ["AVAILABILITY", "Availability"]
