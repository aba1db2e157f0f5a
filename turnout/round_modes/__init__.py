"""Round-mode seam: when a round closes and what happens to the clients still working."""

from . import asynchronous, deadline, over_commit, wait_all  # noqa: F401  (registers components)
from .base import ROUND_MODES, RoundClose, RoundMode

__all__ = ["ROUND_MODES", "RoundClose", "RoundMode"]
