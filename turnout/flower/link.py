"""The server's view of the connected devices: who is online, send instructions, collect what came back.

:class:`FlowerRun <turnout.flower.run.FlowerRun>` talks to devices only through this interface;
:class:`~turnout.flower.transport.FlowerLink` implements it with Flower's ``Grid``. Replies are
collected by polling, each stamped with the server's wall clock when it was received, so the
round mode can judge measured delivery times, and a reply to an earlier round's instruction (a late
report) is handed over whenever it arrives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .protocol import Instruction, Report


@dataclass(frozen=True)
class Arrival:
    """A reply to instruction ``ticket``: the device's report, or ``None`` when the device failed."""

    ticket: int
    report: Report | None
    at: float  # server wall clock (time.time()) when the reply was received
    record_bytes: int = 0  # serialized size of the reply's records as the transport counts it
    error: str = ""


@dataclass(frozen=True)
class Sent:
    """An instruction on its way: its ticket, when it left, and its serialized size."""

    ticket: int
    at: float
    record_bytes: int = 0


class Link(ABC):
    """Connected devices, addressed by turnout client id (the transport maps ids to its own node ids)."""

    @abstractmethod
    def clients_online(self) -> np.ndarray:
        """Client ids whose devices are connected now."""

    @abstractmethod
    def busy_clients(self) -> np.ndarray:
        """Client ids still working on an instruction whose reply has not come back."""

    @abstractmethod
    def send(self, instructions: list[Instruction]) -> list[Sent]:
        """Send each instruction to its client's device."""

    @abstractmethod
    def poll(self) -> list[Arrival]:
        """Replies received since the last poll (not those of dropped tickets)."""

    @abstractmethod
    def drop(self, tickets: list[int]) -> None:
        """Stop waiting for these replies; they are discarded when they come (the device stays busy until then)."""

    def node_of(self, client: int) -> int:
        """The transport's address of a client's device (for the cohort log); -1 when it has none."""
        return -1


__all__ = ["Arrival", "Link", "Sent"]
