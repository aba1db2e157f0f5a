"""The incremental all-clients index of a uniform-period trace: which clients are online at a time, a few
thousand events a round instead of a search per client."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from .memory import trim_heap

if TYPE_CHECKING:  # the trace builds its sweep: a type only
    from .trace import AvailabilityTrace

class Sweep:
    """Incremental all-clients lookup for a uniform-period trace (a cache; answers stay exact).

    The number of intervals of client ``c`` containing ``tau`` (0 or 1, intervals being disjoint)
    is ``#{start <= tau} - #{end < tau}``. Keeping that count for every client at the last queried
    ``tau``, a new query only applies the interval starts and ends between the two times, found
    through a bucket index over the period: the interval indices ordered by the bucket of their
    start (and, separately, of their end), from a linear-time counting sort done in blocks; an
    event's client is looked up in ``offsets`` when the event is applied. Simulations query slowly
    moving times, so a round touches a few thousand events instead of searching for every client.
    The window is taken from the previous time, from 0 (count 0) or from the period end (count
    0), whichever holds the fewest events; when even that is several events per client, the
    trace's exact search answers instead. Memory: 8 bytes per interval (16 from 2**31 intervals
    on) and 9 bytes per client; the build needs about 20 MB more per thread (two), whatever
    the trace's size.
    """

    BUCKETS = 65535
    #: events per block of the counting sort (bounds the build's temporary memory)
    BLOCK = 1 << 19

    def __init__(self, trace: "AvailabilityTrace"):
        self.trace = trace
        self.period = float(trace.uniform_period)
        m = trace.num_intervals
        self.b = int(min(self.BUCKETS, max(1, m // 16)))
        self.w = self.period / self.b
        self.inv_w = 1.0 / self.w
        if m > (1 << 22) and (os.cpu_count() or 1) > 1:  # numpy sorts and gathers without the GIL
            with ThreadPoolExecutor(2) as pool:
                ends = pool.submit(self._index, trace.end_s)
                self.s_order, self.s_off = self._index(trace.start_s)
                self.e_order, self.e_off = ends.result()
        else:
            self.s_order, self.s_off = self._index(trace.start_s)
            self.e_order, self.e_off = self._index(trace.end_s)
        if m > (1 << 22):
            trim_heap()
        # State at the period start. np.full writes every page now, so that the first rounds'
        # scattered updates do not fault them in one by one.
        self.cnt = np.full(trace.num_traces, 0, np.int64)  # count per client (add.at is fast on intp)
        self.online = np.full(trace.num_traces, False)
        self.tau: float | None = None
        self.mask(0.0)

    def _buckets(self, t: np.ndarray) -> np.ndarray:
        # the float64 expression of _bucket, so an event never falls outside the scanned range
        x = t.astype(np.float64)
        x *= self.inv_w
        np.minimum(x, self.b - 1.0, out=x)
        return x.astype(np.uint16)

    def _index(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(interval indices ordered by bucket, stably; bucket offsets), in O(M) time."""
        m, blk = len(t), self.BLOCK
        counts = np.zeros(self.b, np.int64)
        for lo in range(0, m, blk):
            counts += np.bincount(self._buckets(t[lo:lo + blk]), minlength=self.b)
        off = np.zeros(self.b + 1, np.int64)
        np.cumsum(counts, out=off[1:])
        order = np.empty(m, np.int32 if m < 2**31 else np.int64)
        nxt = off[:-1].copy()  # where the next event of each bucket goes
        for lo in range(0, m, blk):
            bk = self._buckets(t[lo:lo + blk])
            o = np.argsort(bk, kind="stable")  # radix sort for 16-bit keys
            cnt = np.bincount(bk, minlength=self.b)
            shift = nxt - (np.cumsum(cnt) - cnt)  # position in the sorted block -> in `order`
            pos = shift[bk[o]]
            pos += np.arange(len(o))
            o += lo
            order[pos] = o
            nxt += cnt
        return order, off

    def _bucket(self, t: float) -> int:
        return int(min(max(t * self.inv_w, 0.0), self.b - 1.0))

    def _span(self, off: np.ndarray, lo: float, hi: float) -> int:
        """Upper bound on the number of events with time in [lo, hi]."""
        if hi < lo:
            return 0
        return int(off[self._bucket(hi) + 1] - off[self._bucket(lo)])

    def _owners(self, order, off, times, lo: float, hi: float, lo_open: bool, hi_open: bool) -> np.ndarray:
        """Clients owning an event whose time lies between ``lo`` and ``hi`` (ends open or closed)."""
        if hi < lo:
            return np.zeros(0, np.int64)
        a, b = off[self._bucket(lo)], off[self._bucket(hi) + 1]
        ev = order[a:b]
        v = times[ev].astype(np.float64)  # exact comparisons, whatever the stored dtype
        keep = ((v > lo) if lo_open else (v >= lo)) & ((v < hi) if hi_open else (v <= hi))
        return np.searchsorted(self.trace.offsets, ev[keep], side="right") - 1

    def _apply(self, starts: tuple, ends: tuple, sign: int) -> None:
        """Add ``sign`` per start event in the ``starts`` window, subtract it per end in ``ends``."""
        tr = self.trace
        s_own = self._owners(self.s_order, self.s_off, tr.start_s, *starts)
        e_own = self._owners(self.e_order, self.e_off, tr.end_s, *ends)
        np.add.at(self.cnt, s_own, sign)
        np.add.at(self.cnt, e_own, -sign)
        touched = np.concatenate([s_own, e_own])
        self.online[touched] = self.cnt[touched] != 0

    def mask(self, tau: float) -> np.ndarray:
        """Which clients are online at ``tau`` (in ``[0, period)``): the internal array, do not modify."""
        P, n = self.period, self.trace.num_traces
        cur = self.tau
        options = []  # (events to apply, kind)
        if cur is not None:
            lo, hi = min(cur, tau), max(cur, tau)
            options.append((self._span(self.s_off, lo, hi) + self._span(self.e_off, lo, hi), 0, "move"))
        options.append((self._span(self.s_off, 0.0, tau) + self._span(self.e_off, 0.0, tau), 1, "zero"))
        options.append((self._span(self.s_off, tau, P) + self._span(self.e_off, tau, P), 2, "end"))
        cost, _, kind = min(options)
        if cost > 3 * n + (1 << 16):
            self.online = self.trace.search_online(None, tau)
            self.cnt = self.online.astype(np.int64)
        elif kind == "move":
            if tau >= cur:  # + starts in (cur, tau], - ends in [cur, tau)
                self._apply((cur, tau, True, False), (cur, tau, False, True), +1)
            else:  # - starts in (tau, cur], + ends in [tau, cur)
                self._apply((tau, cur, True, False), (tau, cur, False, True), -1)
        else:
            self.cnt.fill(0)  # in place: the arrays are the sweep's own (callers get copies)
            self.online.fill(False)
            if kind == "zero":  # + starts in [0, tau], - ends in [0, tau)
                self._apply((0.0, tau, False, False), (0.0, tau, False, True), +1)
            else:  # count = #{end >= tau} - #{start > tau}
                self._apply((tau, P, True, False), (tau, P, False, False), -1)
        self.tau = tau
        return self.online
