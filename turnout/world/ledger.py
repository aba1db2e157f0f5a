"""Per-coordinate change record: the exact download size of a client that is r rounds stale.

A client that last synced after round r lacks exactly the coordinates the server changed after
r. Keeping, per coordinate, the round it last changed (plus a histogram of those rounds) answers
"how many coordinates does this client lack" for a whole cohort in O(rounds) each, whatever the
algorithm or compressor: dense updates touch every coordinate, sparse ones (top-k, GlueFL) only
their support, and a stale client pays for the union of what it missed.
"""

from __future__ import annotations

import numpy as np

from ..core.state import Stateful

#: ``last_changed`` of the initial model: every client lacks it until its first download.
INITIAL = -1


class CoordinateLedger(Stateful):
    """``last_changed[j]`` = last round whose aggregation changed coordinate ``j``.

    A dense round (every coordinate changed) is recorded in the histogram alone, in O(rounds): while
    ``hist`` says every coordinate last changed in one round, ``last_changed`` may be stale and is brought
    up to date by the next call that reads it per coordinate (:meth:`last_change`), once.
    """

    state_attrs = ("last_changed", "hist")

    def __init__(self, dim: int, max_rounds: int):
        self.dim = dim
        self.last_changed = np.full(dim, INITIAL, dtype=np.int32)
        # hist[r + 1] = number of coordinates whose last change was round r (r = −1 is the initial model).
        self.hist = np.zeros(max_rounds + 2, dtype=np.int64)
        self.hist[0] = dim

    def _all_in(self) -> int | None:
        """The round in which every coordinate last changed, where there is one (else None)."""
        full = np.flatnonzero(self.hist == self.dim)
        return int(full[0]) - 1 if len(full) else None

    def last_change(self) -> np.ndarray:
        """``last_changed``, brought up to date after dense rounds (the array itself, not a copy)."""
        every = self._all_in()
        if every is not None:
            self.last_changed.fill(every)
        return self.last_changed

    def record_all(self, round: int) -> int:
        """Mark every coordinate as changed by round ``round`` (a dense server step) in O(rounds); returns how many."""
        self.hist[:] = 0
        self.hist[round + 1] = self.dim
        return self.dim

    def record(self, round: int, changed: np.ndarray) -> int:
        """Mark coordinates (bool mask or index array) as changed by round ``round``; returns how many.

        A mask that changes at least 90 % of the coordinates (a dense round) is recorded by counting the ones
        that did not change: a few array passes instead of gathering and re-binning millions of indices
        (``bench/ledger_record.py``: 1.6 against 16.5 ms a round for a 2.16 M-parameter model, where a GPU
        round's CPU work is counted in milliseconds). Both paths give the same state.
        """
        self.last_change()  # up to date after a dense round
        if changed.dtype == bool and changed.shape == self.last_changed.shape:
            n = int(np.count_nonzero(changed))
            if 10 * n >= 9 * self.dim:  # below 90 % the index path is as fast (bench/ledger_record.py)
                self.hist[:] = np.bincount(self.last_changed[~changed] + 1, minlength=len(self.hist))
                self.hist[round + 1] += n
                np.putmask(self.last_changed, changed, round)
                return n
        idx = np.flatnonzero(changed) if changed.dtype == bool else np.asarray(changed, dtype=np.int64)
        if len(idx) == 0:
            return 0
        old = self.last_changed[idx]
        self.hist -= np.bincount(old + 1, minlength=len(self.hist))[: len(self.hist)]
        self.hist[round + 1] += len(idx)
        self.last_changed[idx] = round
        return len(idx)

    def lacking(self, synced_through: np.ndarray) -> np.ndarray:
        """How many coordinates each client lacks, given the last round its copy includes."""
        suffix = np.concatenate([np.cumsum(self.hist[::-1])[::-1], [0]])  # suffix[k] = #coords with last_changed+1 >= k
        k = np.clip(np.asarray(synced_through, dtype=np.int64) + 2, 0, len(self.hist))
        return suffix[k]

    def lacking_mask(self, synced_through: int) -> np.ndarray:
        """Which coordinates a client synced through ``synced_through`` lacks (for compressors that need the set)."""
        return self.last_change() > synced_through
