"""Per-round observers: progress bars, live loggers, early stopping — outside the round loop.

:meth:`turnout.sim.engine.Simulation.advance` calls ``after_round(round, record)`` on each observer
after every round (evaluation included); a true return value stops the run after that round.
Observers see a read-only record and cannot reach into the engine or the components.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class RoundRecord:
    """One finished round as observers see it: which run, which round, its ``rounds.csv`` row."""

    variant: str
    seed: int
    round: int
    row: Mapping[str, object]


class Observer:
    """Base class: override :meth:`after_round` (return ``True`` to stop the run)."""

    def after_round(self, round: int, record: RoundRecord) -> bool | None:
        return None


class EarlyStop(Observer):
    """Stops a run once its server test accuracy reaches ``target`` (at an evaluation round)."""

    def __init__(self, target: float):
        self.target = float(target)
        self.stopped_at: int | None = None

    def after_round(self, round: int, record: RoundRecord) -> bool:
        acc = record.row.get("accuracy", math.nan)
        if isinstance(acc, float) and acc >= self.target:
            self.stopped_at = round
            return True
        return False


class Callback(Observer):
    """Wraps ``fn(variant, seed, round, row)`` (the progress bar's signature) as an observer."""

    def __init__(self, fn):
        self.fn = fn

    def after_round(self, round: int, record: RoundRecord) -> None:
        self.fn(record.variant, record.seed, round, dict(record.row))
