"""Crash points for testing durability: the process kills itself (SIGKILL) at a named moment.

Durable runs promise that a crash at *any* moment loses at most the work since the last
checkpoint and never corrupts the run folder. Timing a ``kill -9`` from outside cannot hit
"half-way through writing a checkpoint" reliably, so the run layer names those moments and the
environment variable ``TURNOUT_CRASH_AT`` picks one: ``NAME`` or ``NAME@N`` (the N-th time the
point is reached, counting from 1 in this process). Unset — the normal case — it costs one
dictionary lookup per point. Points: ``round`` (a round's row was handed to the run folder's
owner — written already when that is this process), ``checkpoint-arrays``
(checkpoint arrays written, metadata not yet), ``checkpoint-swap`` (between retiring the old
checkpoint and installing the new one), ``unit-done`` (a unit's tables written, before it is
marked finished), ``between-units``, ``ray-actor-start`` (a Ray executor actor is being made),
``ray-train`` (an actor received a chunk of clients). With ``TURNOUT_CRASH_ONCE=FILE`` the crash
happens only in the first process to get there (it creates FILE), so a unit retried by a fresh worker
goes on.

Losing a whole machine is tested the same way, with a *hold* instead of a crash:
``TURNOUT_HOLD_AT=NAME@N`` and ``TURNOUT_HOLD_FILE=FILE`` make the first process to reach the point
create FILE and then wait there (up to :data:`HOLD_S` seconds) — so a test knows that work is in
flight on that node at that moment, and removes the node.
"""

from __future__ import annotations

import os
import signal
import time

ENV, ONCE = "TURNOUT_CRASH_AT", "TURNOUT_CRASH_ONCE"
HOLD, HOLD_FILE = "TURNOUT_HOLD_AT", "TURNOUT_HOLD_FILE"
#: the longest a hold point waits for the test to take its machine away
HOLD_S = 600.0
_counts: dict[str, int] = {}  # arrivals at the named point, per kind (crash, hold)


def _reached(kind: str, spec: str, name: str) -> bool:
    """Whether this arrival at ``name`` is the one ``spec`` (``NAME`` or ``NAME@N``) names for ``kind``."""
    want, _, nth = spec.partition("@")
    if want != name:
        return False
    _counts[kind] = _counts.get(kind, 0) + 1
    return _counts[kind] == (int(nth) if nth else 1)


def _first(marker: str) -> bool:
    """Create ``marker``; False when another process already did (it got to the point first)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def point(name: str) -> None:
    """Reaching point ``name``: SIGKILL this process, or hold it, if the environment asks for it."""
    hold = os.environ.get(HOLD)
    if hold and _reached(HOLD, hold, name):
        marker = os.environ.get(HOLD_FILE)
        if not marker or _first(marker):
            time.sleep(HOLD_S)
    spec = os.environ.get(ENV)
    if not spec or not _reached(ENV, spec, name):
        return
    once = os.environ.get(ONCE)
    if once and not _first(once):
        return  # another process already crashed here
    os.kill(os.getpid(), signal.SIGKILL)
