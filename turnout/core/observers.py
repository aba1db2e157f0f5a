"""Observers of a run: the row stream, checkpoints, live loggers, early stopping — outside the round loop.

An observer is told when a run (or a continued run) begins (:meth:`Observer.begin`), after every
round (:meth:`Observer.after_round`, evaluation included: a true return value stops the run after
that round) and when it ends (:meth:`Observer.end`, with the summary when it finished). Observers
see read-only records and cannot reach into the engine or the components. :class:`Observers` runs
several as one and ends each exactly once, also when the run fails: ``with watching.running(start):``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping


@dataclass(frozen=True)
class RoundRecord:
    """One finished round as observers see it: which run, which round, its ``rounds.csv`` row."""

    variant: str
    seed: int
    round: int
    row: Mapping[str, object]


@dataclass(frozen=True, kw_only=True)
class RunStart:
    """A run (re)starting: which one, how many rounds it has, the round it starts from (a checkpoint's)."""

    variant: str
    seed: int
    rounds: int
    next_round: int


@dataclass(frozen=True, kw_only=True)
class RunEnd:
    """A run ending: finished (with its summary and per-client columns) or not (stopped, or failed)."""

    finished: bool
    summary: Mapping[str, object] | None = None
    clients: Mapping[str, object] | None = None


class Observer:
    """Base class: override what you need; :meth:`after_round` returning ``True`` stops the run."""

    def begin(self, start: RunStart) -> None:
        return None

    def after_round(self, round: int, record: RoundRecord) -> bool | None:
        return None

    def end(self, end: RunEnd) -> None:
        return None


class Observers(Observer):
    """Several observers as one: begun in order, asked after each round (all of them, then any stops the
    run), ended in reverse order and exactly once."""

    def __init__(self, observers: Iterable[Observer] = ()):
        self.observers: list[Observer] = [_observer(o) for o in observers]
        self._start: RunStart | None = None
        self._ended = True

    def begin(self, start: RunStart) -> None:
        self._start, self._ended = start, False
        for o in self.observers:
            o.begin(start)

    def add(self, *observers: Observer) -> None:
        """Observers that join a run already begun (built once the run is known to go on) are begun now."""
        for o in observers:
            o = _observer(o)
            self.observers.append(o)
            if self._start is not None and not self._ended:
                o.begin(self._start)

    def after_round(self, round: int, record: RoundRecord) -> bool:
        return any([bool(o.after_round(round, record)) for o in self.observers])

    def end(self, end: RunEnd) -> None:
        if self._ended:
            return
        self._ended = True
        for o in reversed(self.observers):
            o.end(end)

    @contextlib.contextmanager
    def running(self, start: RunStart) -> Iterator["Observers"]:
        """Begin; on leaving without :meth:`end` (stopped, or an error), end as not finished."""
        self.begin(start)
        try:
            yield self
        finally:
            self.end(RunEnd(finished=False))


class _AfterRoundOnly(Observer):
    """An object written before observers had ``begin``/``end``: one with only ``after_round`` still observes."""

    def __init__(self, inner):
        self.inner = inner

    def after_round(self, round: int, record: RoundRecord) -> bool | None:
        return self.inner.after_round(round, record)


def _observer(o) -> Observer:
    return o if isinstance(o, Observer) else _AfterRoundOnly(o)


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
