"""The round-mode interface: from per-client finish times to who is aggregated and how long it took."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
from pydantic import BaseModel

from ..core.capabilities import Deployable
from ..core.records import RoundClose
from ..core.registry import Registry
from ..core.state import Stateful

ROUND_MODES: Registry = Registry("round_mode", "when a round closes and what happens to the rest")


class RoundMode(Stateful, Deployable, ABC):
    """Decides how many clients to launch for a target of K and when the round closes."""

    Config: type[BaseModel]
    #: simulated seconds a round takes when nobody could be launched (nobody online): the server
    #: waits this long before trying again, so trace-driven time still advances.
    empty_round_s: float = 60.0

    def __init__(self, cfg: BaseModel):
        self.cfg = cfg

    #: what the reports still in flight mean to a round, by name (:data:`turnout.sim.timing.TIMINGS`, chosen once
    #: when the loop is built): ``"synchronous"`` closes on the launched cohort; ``"asynchronous"`` closes on
    #: reports from earlier rounds too, handing :meth:`close_in_flight` the arrival times of the usable reports
    #: still in flight, and a report that arrives in the round its client started in is aggregated as fresh
    #: (staleness 0) whatever the algorithm
    timing: ClassVar[str] = "synchronous"

    def __init_subclass__(cls, **kwargs):
        """``cls.asynchronous``, derived from :attr:`timing`: for readers of the flag that came before it (scripts,
        plugins); the loop and validation read the timing."""
        super().__init_subclass__(**kwargs)
        cls.asynchronous = cls.timing == "asynchronous"

    def launch_count(self, target: int) -> int:
        """How many clients to launch for ``target`` reports (over-commitment launches more)."""
        return target

    def launch(self, target: int, in_flight: int) -> int:
        """How many clients to launch this round while ``in_flight`` reports from earlier rounds are still
        being computed. Synchronous modes ignore those: :meth:`launch_count`."""
        return self.launch_count(target)

    def refills(self) -> int:
        """At how many of a round's first arrivals the free slots are refilled before the round closes (0: only
        at the round's open, as every synchronous mode does)."""
        return 0

    def arrivals_taken(self) -> int | None:
        """How many of the reports that arrived by the close one round takes (``None``: all of them)."""
        return None

    def close_in_flight(self, finish_s: np.ndarray, dropped_at_s: np.ndarray, target: int,
                        in_flight_s: np.ndarray, lost_s: np.ndarray | None = None) -> RoundClose:
        """Close a round while reports from earlier rounds arrive at ``in_flight_s`` seconds after the start, and
        tasks launched earlier that will bring nothing usable end at ``lost_s`` seconds after it (a client that
        goes offline before it delivers, a report too stale for the server rule).

        Synchronous modes close on the launched cohort alone (:meth:`close`); the reports in flight arrive
        when they arrive.
        """
        return self.close(finish_s, dropped_at_s, target)

    @abstractmethod
    def close(self, finish_s: np.ndarray, dropped_at_s: np.ndarray, target: int) -> RoundClose:
        """Close a round.

        ``finish_s``: seconds after the round start at which each launched client would deliver.
        ``dropped_at_s``: seconds after the start at which it goes offline (``inf`` if it does not).
        A client with ``dropped_at_s < finish_s`` never delivers.
        """
