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
marked finished), ``between-units``. With ``TURNOUT_CRASH_ONCE=FILE`` the crash happens only in the
first process to get there (it creates FILE), so a unit retried by a fresh worker goes on.
"""

from __future__ import annotations

import os
import signal

ENV, ONCE = "TURNOUT_CRASH_AT", "TURNOUT_CRASH_ONCE"
_counts: dict[str, int] = {}


def point(name: str) -> None:
    """Reaching crash point ``name``: SIGKILL this process if ``TURNOUT_CRASH_AT`` asks for it."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    want, _, nth = spec.partition("@")
    if want != name:
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] == (int(nth) if nth else 1):
        once = os.environ.get(ONCE)
        if once:
            try:
                os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return  # another process already crashed here
        os.kill(os.getpid(), signal.SIGKILL)
