"""The round-mode interface: from per-client finish times to who is aggregated and how long it took."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from ..registry import Registry

ROUND_MODES: Registry = Registry("round_mode", "when a round closes and what happens to the rest")


@dataclass
class RoundClose:
    """The outcome of closing a round over the launched cohort (arrays aligned with the cohort).

    ``aggregated``: reports used this round. ``late``: reports that will arrive after the close and
    are kept for a later round (with their staleness). Everything else launched is wasted.
    ``busy_s``: client-seconds each launched client spent (up to its finish, its dropout, or the
    moment the server stopped waiting for it).
    """

    aggregated: np.ndarray
    late: np.ndarray
    duration_s: float
    busy_s: np.ndarray


class RoundMode(ABC):
    """Decides how many clients to launch for a target of K and when the round closes."""

    Config: type[BaseModel]
    #: simulated seconds a round takes when nobody could be launched (nobody online): the server
    #: waits this long before trying again, so trace-driven time still advances.
    empty_round_s: float = 60.0

    def __init__(self, cfg: BaseModel):
        self.cfg = cfg

    def launch_count(self, target: int) -> int:
        """How many clients to launch for ``target`` reports (over-commitment launches more)."""
        return target

    @abstractmethod
    def close(self, finish_s: np.ndarray, dropped_at_s: np.ndarray, target: int) -> RoundClose:
        """Close a round.

        ``finish_s``: seconds after the round start at which each launched client would deliver.
        ``dropped_at_s``: seconds after the start at which it goes offline (``inf`` if it does not).
        A client with ``dropped_at_s < finish_s`` never delivers.
        """
