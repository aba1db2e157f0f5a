"""turnout's own availability-trace format: a safe, compressed ``.npz`` of flat arrays.

A trace holds, for each of ``N`` clients, a sorted list of *online intervals* inside one period;
availability repeats with that period (FedScale's ``finish_time``). It is stored as
struct-of-arrays, never as pickled Python objects, and read with ``allow_pickle=False``:

===================  =========================  ===============================================
array                dtype / shape              meaning
===================  =========================  ===============================================
``offsets``          int64 ``(N+1,)``           client ``c``'s intervals are ``offsets[c]:offsets[c+1]``
``start_s``          float64/32 ``(M,)``        interval starts, seconds from the period start
``end_s``            float64/32 ``(M,)``        interval ends (``start_s <= end_s <= period_s``)
``period_s``         float64 ``(N,)``           per-client period (FedScale ``finish_time``)
``model``            unicode ``(N,)``, optional device model name (FedScale ``model``)
``format_version``   int64 scalar               :data:`FORMAT_VERSION`
===================  =========================  ===============================================

Semantics (FedScale's ``ClientMetadata.is_active``): with ``tau = t mod period_s[c]``, client ``c``
is online at time ``t`` iff ``start_s[i] <= tau <= end_s[i]`` for one of its intervals — *closed*
intervals, as FedScale compares with ``<=`` at both ends. Intervals of a client are sorted and
strictly separated (``start_s[i+1] > end_s[i]``; touching closed intervals would share a point,
so the importer merges them), ``0 <= start_s < period_s`` and ``end_s <= period_s``. An interval
ending exactly at ``period_s`` continues into the next period's interval starting at 0.

Times may be stored as float64 or float32 (in a file and in memory). In memory a trace holds
them as **float32 whenever that is lossless** — every value equal to its float32 rounding, as
whole seconds below 2**24 s (194 days) are, which covers FedScale's traces and the generator's
— and as float64 otherwise; nothing is ever rounded. That halves the largest arrays (1,000,000
generated clients: 21.5M intervals, 172 MB instead of 344 MB). Lookups compare in float64, so
answers are exact either way; code doing its own arithmetic on ``start_s``/``end_s`` should
widen first (``np.subtract(end_s, start_s, dtype=np.float64)``), as float32 sums round.
Files written by :func:`save_trace` keep the in-memory dtype (turnout before float32 support
rejects float32 files with a dtype message).

Lookups are exact and vectorised, three ways with the same answer (FedScale's interval test):

* all clients at one time (what availability asks each round): an incremental sweep that
  applies only the interval starts/ends between the previous and the new time (:class:`_Sweep`)
  — about a millisecond per million clients per round; its index (8 bytes per interval) is
  built by :meth:`AvailabilityTrace.build_sweep` or on the first such query;
* a few clients (a cohort's dropout times), or any number on a trace with one period: a
  per-client binary search, vectorised (a third of a second for all of 10^6 clients);
* many clients, stateless, on a trace whose periods differ (no sweep): every interval gets the
  key ``client * BIG + start_s`` with ``BIG`` a power of two ``>= 2 * max(period_s)``, so one
  ``np.searchsorted`` over one sorted array (8 more bytes per interval, built on first use)
  serves all clients; float rounding in the keys can only make the search land *after* the
  right interval when two keys tie, and those ties are re-checked with exact comparisons.
"""

from __future__ import annotations

import io
import math
import os
import struct
import tempfile
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import DataError

#: Version written to and required in ``format_version``.
FORMAT_VERSION = 1

REQUIRED = ("offsets", "start_s", "end_s", "period_s")
OPTIONAL = ("model", "format_version")

#: How a user converts a FedScale pickle (quoted in error messages).
CONVERT_HINT = "convert it once with `turnout trace import FILE.pkl --out FILE.npz`"
EXPECTED = ("a turnout availability trace (.npz with offsets, start_s, end_s, period_s; "
            "write one with `turnout trace generate` or `turnout trace import`)")


class TraceFileError(DataError):
    """A trace file that cannot be used: the message is one line naming the file and the problem."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"trace file {str(path)!r} {problem}")


class TraceError(DataError):
    """An in-memory trace whose arrays break the format's rules."""


@dataclass(eq=False)
class AvailabilityTrace:
    """Per-client periodic online intervals, struct-of-arrays (see the module docstring).

    Construction validates every rule and makes the arrays read-only; :meth:`is_online` and
    :meth:`online_until` answer for any set of clients at once in a few milliseconds per million.
    """

    offsets: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    period_s: np.ndarray
    model: np.ndarray | None = None
    _keys: object = field(init=False, repr=False, default=None)
    _big: float = field(init=False, repr=False, default=1.0)
    _sweep: "_Sweep | None" = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        # read-only views: the caller's arrays keep their own flags
        self.offsets = np.ascontiguousarray(self.offsets, dtype=np.int64).view()
        start, end = _time_arrays(self.start_s, self.end_s)
        self.start_s, self.end_s = start.view(), end.view()
        self.period_s = np.ascontiguousarray(self.period_s, dtype=np.float64).view()
        if self.model is not None:
            self.model = np.asarray(self.model)
            self.model = (self.model.astype(str) if self.model.dtype.kind != "U" else self.model).view()
        if not getattr(self, "_prevalidated", False):
            problem = check_arrays(self.offsets, self.start_s, self.end_s, self.period_s, self.model)
            if problem:
                raise TraceError(f"invalid availability trace: {problem}")
        for a in (self.offsets, self.start_s, self.end_s, self.period_s, self.model):
            if a is not None:
                a.flags.writeable = False
        self._build_index()

    # ------------------------------------------------------------------------------------------
    @classmethod
    def from_intervals(cls, intervals: list, period_s, model=None) -> "AvailabilityTrace":
        """Build from one ``[(start, end), ...]`` list (or ``(k, 2)`` array) per client."""
        n = len(intervals)
        counts = np.array([len(iv) for iv in intervals], dtype=np.int64)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = np.concatenate([np.asarray(iv, np.float64).reshape(-1, 2) for iv in intervals]) \
            if offsets[-1] else np.zeros((0, 2))
        period = np.broadcast_to(np.asarray(period_s, np.float64), (n,)).copy()
        return cls(offsets, flat[:, 0], flat[:, 1], period, None if model is None else np.asarray(model, str))

    @property
    def num_traces(self) -> int:
        return len(self.period_s)

    def __len__(self) -> int:
        return self.num_traces

    @property
    def num_intervals(self) -> int:
        return len(self.start_s)

    def counts(self) -> np.ndarray:
        """Number of online intervals of each client."""
        return np.diff(self.offsets)

    def intervals(self, client: int) -> np.ndarray:
        """Client ``client``'s intervals as a float64 ``(k, 2)`` array of (start, end) seconds."""
        lo, hi = self.offsets[client], self.offsets[client + 1]
        return np.stack([self.start_s[lo:hi], self.end_s[lo:hi]], axis=1).astype(np.float64)

    def online_seconds(self) -> np.ndarray:
        """Total online seconds per period, per client (FedScale's ``duration``)."""
        owner = np.repeat(np.arange(self.num_traces), self.counts())
        length = np.subtract(self.end_s, self.start_s, dtype=np.float64)
        return np.bincount(owner, weights=length, minlength=self.num_traces)

    def subset(self, clients) -> "AvailabilityTrace":
        """A new trace with the given clients' traces, in that order."""
        c = np.asarray(clients, np.int64)
        lo, hi = self.offsets[c], self.offsets[c + 1]
        counts = hi - lo
        offsets = np.zeros(len(c) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        idx = np.repeat(lo - offsets[:-1], counts) + np.arange(offsets[-1])
        return AvailabilityTrace._trusted(offsets, self.start_s[idx], self.end_s[idx], self.period_s[c],
                                          None if self.model is None else self.model[c])

    @classmethod
    def _trusted(cls, offsets, start_s, end_s, period_s, model=None) -> "AvailabilityTrace":
        """Build from arrays already known to satisfy the format (skips the O(M) validation)."""
        obj = cls.__new__(cls)
        obj._prevalidated = True
        obj.__init__(offsets, start_s, end_s, period_s, model)
        return obj

    # ------------------------------------------------------------------------------------------
    def _build_index(self) -> None:
        n = self.num_traces
        self._keys = None  # global search keys, built on the first large stateless query
        counts = self.counts()
        has = counts > 0
        first_start = np.full(n, np.inf)
        first_end = np.zeros(n)
        last_end = np.full(n, -np.inf)
        if self.num_intervals:
            fi = self.offsets[:-1][has]
            li = self.offsets[1:][has] - 1
            first_start[has] = self.start_s[fi]
            first_end[has] = self.end_s[fi]
            last_end[has] = self.end_s[li]
        wraps = has & (first_start == 0.0) & (last_end == self.period_s)
        #: online for the whole period: a single interval [0, period]
        self._forever = wraps & (counts == 1)
        #: seconds of the first interval that follow an interval ending at the period boundary
        self._wrap_extra = np.where(wraps & (counts > 1), first_end, 0.0)
        p0 = self.period_s[0] if n else 1.0
        self._uniform_period = float(p0) if n and np.all(self.period_s == p0) else None

    def _clients(self, clients) -> np.ndarray:
        if clients is None:
            return np.arange(self.num_traces, dtype=np.int64)
        c = np.asarray(clients)
        if c.dtype.kind not in "iu":
            raise TypeError("clients must be an integer array of trace indices")
        c = c.astype(np.int64, copy=False).reshape(-1)
        if len(c) and (c.min() < 0 or c.max() >= self.num_traces):
            raise IndexError(f"trace index out of range [0, {self.num_traces})")
        return c

    def _tau(self, c: np.ndarray, t) -> np.ndarray | np.float64:
        # a NumPy float64 (never a Python float): comparisons with float32 times stay in float64
        t = np.asarray(t, np.float64)
        if t.ndim == 0 and self._uniform_period is not None:
            return np.float64(np.mod(float(t), self._uniform_period))
        return np.mod(t, self.period_s[c])

    def build_sweep(self) -> None:
        """Build the incremental all-clients index now (else the first all-clients query does).

        Only a trace with one period for all clients and at least one interval has it; about
        8 bytes per interval and a second or two per 10^7 intervals. Availability models call it
        at construction so that no simulated round pays for it.
        """
        if self._sweep is None and self._uniform_period is not None and self.num_intervals:
            self._sweep = _Sweep(self)

    def _key_index(self) -> np.ndarray | None:
        """Sorted keys ``client * BIG + start`` (BIG a power of two >= 2 * max period), or None
        when the float64 range cannot hold them exactly enough, or when the trace has one period
        (its all-clients queries go through the sweep; the others bisect without the extra
        8 bytes per interval)."""
        if self._keys is None and self._uniform_period is not None:
            self._keys = False
        if self._keys is None:
            n = self.num_traces
            pmax = float(self.period_s.max()) if n else 1.0
            big = float(2.0 ** int(np.ceil(np.log2(2.0 * pmax))))
            if n * big >= 2.0 ** 52:
                self._keys = False
            else:
                self._big = big
                keys = np.repeat(np.arange(n, dtype=np.float64) * big, self.counts())
                keys += self.start_s
                keys.flags.writeable = False
                self._keys = keys
        return self._keys if self._keys is not False else None

    def _locate(self, c: np.ndarray, tau) -> tuple[np.ndarray, np.ndarray]:
        """(index of the last interval of ``c`` starting at or before ``tau``, found mask).

        Small queries bisect each client's own intervals (vectorised over clients); large ones
        use one ``np.searchsorted`` over the global keys, re-checking float ties exactly.
        """
        if not self.num_intervals:
            return np.zeros(len(c), np.int64), np.zeros(len(c), bool)
        tau = np.asarray(tau, np.float64)  # never a Python float: comparisons stay in float64
        if len(c) < max(4096, self.num_traces // 16) or self._key_index() is None:
            return self._bisect(c, tau)
        keys = self._keys
        base = c * self._big
        q = base + tau
        j = np.searchsorted(keys, q, side="right") - 1
        jj = np.maximum(j, 0)
        kj = keys[jj]
        found = (j >= 0) & (kj >= base)
        # Keys are rounded: a tie (kj == q) may hide a start just after tau. Re-check those exactly.
        tie = np.flatnonzero(found & (kj == q))
        if len(tie):
            tau_t = tau if np.ndim(tau) == 0 else tau[tie]
            bad = tie[self.start_s[jj[tie]] > tau_t]
            while len(bad):
                j[bad] -= 1
                jb = np.maximum(j[bad], 0)
                ok = (j[bad] >= 0) & (keys[jb] >= base[bad])
                found[bad] = ok
                tau_b = tau if np.ndim(tau) == 0 else tau[bad]
                bad = bad[ok & (self.start_s[jb] > tau_b)]
            jj = np.maximum(j, 0)
        return jj, found

    def _bisect(self, c: np.ndarray, tau) -> tuple[np.ndarray, np.ndarray]:
        """Per-client binary search for the last start <= tau (exact comparisons only)."""
        first = self.offsets[c]
        lo = first.copy()
        hi = self.offsets[c + 1]
        tau_a = np.broadcast_to(np.asarray(tau, np.float64), c.shape)
        idx = np.flatnonzero(lo < hi)
        while len(idx):
            low, high = lo[idx], hi[idx]
            mid = (low + high) >> 1
            right = self.start_s[mid] <= tau_a[idx]
            low = np.where(right, mid + 1, low)
            high = np.where(right, high, mid)
            lo[idx], hi[idx] = low, high
            idx = idx[low < high]
        j = lo - 1
        return np.maximum(j, 0), j >= first

    def is_online(self, clients, t) -> np.ndarray:
        """Boolean mask: is each of ``clients`` (trace indices) online at absolute time ``t``?

        ``t`` is a scalar or an array broadcastable to ``clients``; ``clients=None`` means all.
        Large queries at one time on a uniform-period trace go through an incremental sweep
        (milliseconds per million clients when successive times are close); the answer is the
        same exact interval test either way.
        """
        c = None if clients is None else self._clients(clients)
        n = self.num_traces if c is None else len(c)
        if (np.ndim(t) == 0 and self._uniform_period is not None and self.num_intervals
                and n >= max(self.num_traces // 8, 1)):
            self.build_sweep()
            mask = self._sweep.mask(float(np.mod(float(t), self._uniform_period)))
            return mask.copy() if c is None else mask[c]
        return self._search_online(c, t)

    def _search_online(self, clients, t) -> np.ndarray:
        """The stateless exact lookup (per-client bisection, or one search over the global keys)."""
        c = self._clients(clients)
        tau = self._tau(c, t)
        j, found = self._locate(c, tau)
        if not len(self.end_s):
            return found
        return found & (tau <= self.end_s[j].astype(np.float64))

    def online_until(self, clients, t) -> np.ndarray:
        """Absolute time each client goes offline: the end of its current interval.

        Periodicity is followed (an interval ending at ``period_s`` continues into one starting
        at 0), ``inf`` for a client online for the whole period, and ``t`` itself for a client
        that is offline at ``t``.
        """
        c = self._clients(clients)
        t_arr = np.asarray(t, np.float64)
        tau = self._tau(c, t_arr)
        j, found = self._locate(c, tau)
        out = np.broadcast_to(t_arr, c.shape).astype(np.float64)
        if not len(self.end_s):
            return out
        end = self.end_s[j].astype(np.float64)
        online = found & (tau <= end)
        period = self.period_s[c] if self._uniform_period is None else self._uniform_period
        extra = np.where(end == period, self._wrap_extra[c], 0.0)
        until = out + (end - tau) + extra
        until = np.where(self._forever[c], np.inf, until)
        return np.where(online, until, out)

    def fedscale_dict_entry(self, client: int) -> dict:
        """FedScale ``client_behave_trace`` value of one client (ints, as FedScale stores them)."""
        iv = self.intervals(client)
        return {
            "duration": int(round(float((iv[:, 1] - iv[:, 0]).sum()))),
            "inactive": [_as_number(x) for x in iv[:, 1]],
            "finish_time": _as_number(self.period_s[client]),
            "active": [_as_number(x) for x in iv[:, 0]],
            "model": str(self.model[client]) if self.model is not None else "unknown",
        }


class _Sweep:
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
        self.period = float(trace._uniform_period)
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
            _trim_heap()
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
            self.online = self.trace._search_online(None, tau)
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


_TRIM = None


def _trim_heap() -> None:
    """Give memory freed by big NumPy temporaries back to the OS (glibc ``malloc_trim``; a
    no-op where the C library has none).

    glibc keeps freed blocks below its mmap threshold (up to 32 MB) in its heaps, and blocks
    freed in worker threads in per-thread heaps that the main thread never reuses: after the
    generator and the sweep's build at 10^6 clients, some 150 MB of resident memory holding
    nothing. Called once after each of those bulk builds; it takes milliseconds.
    """
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes

            _TRIM = ctypes.CDLL(None).malloc_trim
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError, TypeError):
            _TRIM = False
    if _TRIM:
        _TRIM(0)


def _as_number(x: float) -> int | float:
    x = float(x)
    return int(x) if x.is_integer() else x


# ----------------------------------------------------------------------------------------------
_NARROW_BLOCK = 1 << 22


def _time_arrays(start, end) -> tuple[np.ndarray, np.ndarray]:
    """``start``/``end`` as contiguous float32 arrays when that loses nothing, else as float64.

    Float32 input stays float32; anything else is converted to float64 first and then narrowed
    to float32 when every value of both arrays survives the round trip (checked in blocks, so
    the check needs little memory beyond the float32 result).
    """
    s, e = np.asarray(start), np.asarray(end)
    if s.dtype == np.float32 and e.dtype == np.float32:
        return np.ascontiguousarray(s), np.ascontiguousarray(e)
    s, e = np.ascontiguousarray(s, dtype=np.float64), np.ascontiguousarray(e, dtype=np.float64)
    if s.ndim != 1 or e.ndim != 1:
        return s, e  # check_arrays names the problem
    out = []
    for a in (s, e):
        n32 = np.empty(len(a), np.float32)
        for lo in range(0, len(a), _NARROW_BLOCK):
            blk = a[lo:lo + _NARROW_BLOCK]
            part = n32[lo:lo + _NARROW_BLOCK]
            with np.errstate(over="ignore", invalid="ignore"):
                part[...] = blk
            if not np.array_equal(part, blk):  # compared in float64; NaN never equal
                return s, e
        out.append(n32)
    return out[0], out[1]


#: Dtypes each array may have (checked from a file's .npy headers before its data is read).
_DTYPES = {"offsets": ("int64",), "start_s": ("float64", "float32"), "end_s": ("float64", "float32"),
           "period_s": ("float64",)}
#: Shortest period accepted: below a second, a simulated round spans many periods and every
#: client drops out at once (at 1e-300 s, ``t + period == t`` and the clock stops), and the
#: sweep index divides the period into buckets that a denormal period cannot hold.
MIN_PERIOD_S = 1.0
#: Longest period accepted: from 2**53 s (285 million years) on, float64 seconds are no longer
#: whole, and the search keys (``client * 2 * period``) overflow long before float64 does.
MAX_PERIOD_S = 2.0**53


def period_problem(period: float) -> str | None:
    """Why ``period`` (seconds) is not a usable trace period, or ``None`` when it is."""
    if not np.isfinite(period):
        return "is not finite"
    if period <= 0:
        return "is not positive"
    if period < np.finfo(np.float64).tiny:
        return "is denormal (far below 1 second)"
    if period < MIN_PERIOD_S:
        return f"is below {MIN_PERIOD_S:g} second"
    if period > MAX_PERIOD_S:
        return f"is above {MAX_PERIOD_S:g} seconds"
    return None


def check_layout(dtypes: dict[str, np.dtype], shapes: dict[str, tuple]) -> str | None:
    """The first broken rule about the arrays' dtypes and lengths, or ``None``.

    Needs only what a .npy header says, so a file is checked before its data is decompressed.
    ``dtypes``/``shapes`` hold the four required arrays and, when present, ``model``.
    """
    for name, kinds in _DTYPES.items():
        if dtypes[name] not in [np.dtype(k) for k in kinds]:
            return f"array {name!r} has dtype {dtypes[name]}, expected {' or '.join(kinds)}"
        if len(shapes[name]) != 1:
            return f"array {name!r} has shape {shapes[name]}, expected a 1-D array"
    n = shapes["period_s"][0]
    if shapes["offsets"][0] != n + 1:
        return f"array 'offsets' has {shapes['offsets'][0]} entries, expected len(period_s) + 1 = {n + 1}"
    if shapes["start_s"] != shapes["end_s"]:
        return f"arrays 'start_s' ({shapes['start_s'][0]}) and 'end_s' ({shapes['end_s'][0]}) differ in length"
    if "model" in dtypes:
        if len(shapes["model"]) != 1 or dtypes["model"].kind != "U":
            return f"array 'model' has dtype {dtypes['model']} and shape {shapes['model']}, expected 1-D unicode"
        if shapes["model"][0] != n:
            return f"array 'model' has {shapes['model'][0]} entries, expected {n}"
    return None


def check_arrays(offsets: np.ndarray, start: np.ndarray, end: np.ndarray, period: np.ndarray,
                 model: np.ndarray | None) -> str | None:
    """The first broken rule of the format as a short phrase, or ``None`` when all hold."""
    arrays = {"offsets": offsets, "start_s": start, "end_s": end, "period_s": period}
    if model is not None:
        arrays["model"] = model
    problem = check_layout({k: a.dtype for k, a in arrays.items()}, {k: a.shape for k, a in arrays.items()})
    if problem:
        return problem
    if offsets[0] != 0 or offsets[-1] != len(start):
        return (f"array 'offsets' must start at 0 and end at the number of intervals ({len(start)}), "
                f"got {offsets[0]} … {offsets[-1]}")
    if np.any(np.diff(offsets) < 0):
        i = int(np.argmax(np.diff(offsets) < 0))
        return f"array 'offsets' is not monotone (decreases after client {i})"
    bad = ~(np.isfinite(period) & (period >= MIN_PERIOD_S) & (period <= MAX_PERIOD_S))
    if bad.any():
        i = int(np.argmax(bad))
        return (f"period_s[{i}] = {float(period[i])!r} {period_problem(float(period[i]))}; expected a finite "
                f"period > 0, from {MIN_PERIOD_S:g} to {MAX_PERIOD_S:g} seconds")
    if not (np.all(np.isfinite(start)) and np.all(np.isfinite(end))):
        return "start_s / end_s contain NaN or infinite values"
    if len(start):
        counts = np.diff(offsets)
        uniform = bool(np.all(period == period[0]))
        p = period[0] if uniform else np.repeat(period, counts)
        bad = (start < 0) | (start >= p) | (end > p) | (end < start)
        if bad.any():
            i = int(np.argmax(bad))
            c = int(np.searchsorted(offsets, i, side="right") - 1)
            return (f"interval {i} of client {c} is [{start[i]:g}, {end[i]:g}], expected "
                    f"0 <= start < period ({period[c]:g}) and start <= end <= period")
        bad = start[1:] <= end[:-1]
        last = offsets[1:-1][counts[:-1] > 0] - 1  # a client's last interval is followed by another client's
        bad[last[last < len(bad)]] = False
        if bad.any():
            i = int(np.argmax(bad))
            c = int(np.searchsorted(offsets, i, side="right") - 1)
            return (f"intervals of client {c} are unsorted or overlap ([{start[i]:g}, {end[i]:g}] then "
                    f"[{start[i + 1]:g}, {end[i + 1]:g}]); expected sorted, strictly separated intervals")
    return None


def _write_npz(f, arrays: dict[str, np.ndarray], level: int) -> None:
    """What ``np.savez_compressed`` writes, with a chosen zlib level (0: stored)."""
    mode = zipfile.ZIP_DEFLATED if level > 0 else zipfile.ZIP_STORED
    with zipfile.ZipFile(f, "w", compression=mode, compresslevel=level if level > 0 else None,
                         allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(arr), allow_pickle=False)


def save_trace(path: str | os.PathLike, trace: AvailabilityTrace, compress_level: int = 1) -> Path:
    """Write ``trace`` to ``path`` (exactly that name, no ``.npz`` appended), atomically.

    The file is a standard compressed ``.npz`` (``np.load`` reads it); zlib level 1 by default,
    about six times faster than ``np.savez_compressed``'s level and within 10 % of its size.
    """
    path = Path(path)
    arrays = {"offsets": trace.offsets, "start_s": trace.start_s, "end_s": trace.end_s,
              "period_s": trace.period_s, "format_version": np.array(FORMAT_VERSION, np.int64)}
    if trace.model is not None:
        arrays["model"] = np.asarray(trace.model, dtype=str)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_npz(f, arrays, int(compress_level))
        _default_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _sniff(path: Path) -> None:
    """Refuse, with a useful line, files that are not zip archives (pickles, .npy, text, empty)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except FileNotFoundError:
        raise TraceFileError(path, f"not found; expected {EXPECTED}") from None
    except IsADirectoryError:
        raise TraceFileError(path, f"is a directory; expected {EXPECTED}") from None
    except OSError as exc:
        raise TraceFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    if head.startswith(b"PK"):
        return
    if (len(head) >= 2 and head[0] == 0x80 and 1 <= head[1] <= 5) or path.suffix.lower() in (".pkl", ".pickle"):
        raise TraceFileError(path, f"is a Python pickle (unsafe to load); {CONVERT_HINT}")
    if head.startswith(b"\x93NUMPY"):
        raise TraceFileError(path, f"is a single .npy array, expected {EXPECTED}")
    if not head:
        raise TraceFileError(path, f"is empty; expected {EXPECTED}")
    raise TraceFileError(path, f"is not a .npz (zip) archive; expected {EXPECTED}")


def load_trace(path: str | os.PathLike) -> AvailabilityTrace:
    """Read and fully validate a trace written by :func:`save_trace` (never unpickles anything).

    Every problem raises :class:`TraceFileError` (a :class:`DataError`) with one line naming the
    file and what was expected. The file may come from anywhere, so its zip directory and .npy
    headers are checked against limits before any data is decompressed (see :func:`_read_arrays`).
    """
    path = Path(path)
    _sniff(path)
    try:
        arrays = _read_arrays(path)
    except TraceFileError:
        raise
    except MemoryError:
        raise TraceFileError(path, "needs more memory than this process can get; free memory or use a "
                                   "smaller trace") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError, ValueError, struct.error,
            RuntimeError, NotImplementedError, OverflowError) as exc:
        raise TraceFileError(path, f"is truncated or corrupt ({_short(exc)}); regenerate or re-import it") from None
    if "format_version" in arrays and int(arrays["format_version"]) != FORMAT_VERSION:
        raise TraceFileError(path, f"has format_version {int(arrays['format_version'])}, "
                                   f"this turnout reads version {FORMAT_VERSION}")
    model = arrays.get("model")
    problem = check_arrays(arrays["offsets"], arrays["start_s"], arrays["end_s"], arrays["period_s"], model)
    if problem:
        raise TraceFileError(path, f"is malformed: {problem}")
    return AvailabilityTrace._trusted(arrays["offsets"], arrays["start_s"], arrays["end_s"], arrays["period_s"], model)


#: Largest zip central directory read. A trace's has six entries of about 100 bytes; a huge
#: one would make ``zipfile`` build an entry object per 46 bytes of file before any check.
MAX_CENTRAL_DIRECTORY = 1 << 20
#: Largest .npy header read (numpy's own default for ``max_header_size``).
MAX_NPY_HEADER = 10_000
#: Bytes decompressed per read: all that loading needs beyond the arrays themselves (numpy's
#: own read size; much larger reads are slower, as ``zipfile`` then copies its input around).
READ_CHUNK = 1 << 18
#: Memory a loaded trace needs per byte of its arrays in the file, at most: the arrays, a
#: re-indexed copy when simulated clients are mapped onto the traces, and the all-clients sweep
#: index (8 bytes per interval, as much as float32 times take); float64 times cost less per
#: byte (their float32 narrowing is half their size, the index a quarter).
MEMORY_PER_ARRAY_BYTE = 3
#: Array bytes always allowed, so that a low or misread memory figure never refuses a small trace.
MIN_ARRAY_BUDGET = 256 << 20
#: Array bytes allowed where the available memory cannot be read (no /proc, no sysconf).
DEFAULT_ARRAY_BUDGET = 4 << 30
#: Zip compression methods read: what numpy and turnout write. ``zipfile`` decompresses the
#: others (bzip2, lzma) without bounding what one read returns, and knows no more.
READ_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
#: Zip flag bits of members that are not plain data: encrypted (0x1), patched (0x20),
#: strongly encrypted (0x40).
UNREADABLE_FLAGS = 0x61


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The trace's arrays, checked before anything is decompressed, read in bounded chunks.

    First the zip directory: its size, and for each array its member's flags, compression
    method and declared size (all arrays together within :func:`_array_budget`). Then each
    .npy header: a dtype without objects, a shape whose bytes fit the declared size, the dtypes
    and lengths the format needs (:func:`check_layout`). Only then is data decompressed, into
    arrays of the header's size, :data:`READ_CHUNK` bytes at a time; ``zipfile`` never returns
    more than a member's declared size, so a lying header cannot make it use more memory.
    """
    with open(path, "rb") as f:
        cd = _central_directory_size(f)
        if cd > MAX_CENTRAL_DIRECTORY:
            raise TraceFileError(path, f"has a zip directory of {cd} bytes (a trace's takes a few hundred); "
                                       f"expected {EXPECTED}")
        with zipfile.ZipFile(f) as zf:
            members = {k: info for k in REQUIRED + OPTIONAL if (info := _member(zf, k)) is not None}
            missing = [k for k in REQUIRED if k not in members]
            if missing:
                raise TraceFileError(path, f"lacks array(s) {', '.join(missing)}; expected {EXPECTED}")
            for info in members.values():
                _check_member(path, info)
            declared = sum(info.file_size for info in members.values())
            budget, available = _array_budget()
            if declared > budget:
                have = (f"{available / 1e9:.3g} GB of memory available" if available is not None
                        else "memory that cannot be measured here")
                raise TraceFileError(path, f"declares {declared / 1e9:.3g} GB of uncompressed arrays, more than the "
                                           f"{budget / 1e9:.3g} GB a trace may hold with {have} (loading takes about "
                                           f"{MEMORY_PER_ARRAY_BYTE}x); free memory or use a smaller trace (a small "
                                           "file declaring that much is a decompression bomb)")
            headers = {k: _npy_header(path, zf, info) for k, info in members.items()}
            problem = check_layout({k: h[0] for k, h in headers.items() if k != "format_version"},
                                   {k: h[1] for k, h in headers.items() if k != "format_version"})
            if problem:
                raise TraceFileError(path, f"is malformed: {problem}")
            if "format_version" in headers:
                dtype, shape, _ = headers["format_version"]
                if shape != () or dtype.kind not in "iu":
                    raise TraceFileError(path, f"has a format_version of dtype {dtype} and shape {shape}, "
                                               f"this turnout reads a scalar version {FORMAT_VERSION}")
            return {k: _npy_data(zf, members[k], *headers[k]) for k in members}


def _member(zf: zipfile.ZipFile, key: str) -> zipfile.ZipInfo | None:
    """The member holding array ``key``, found as ``np.load`` finds it (``key``, else ``key.npy``)."""
    for name in (key, key + ".npy"):
        try:
            return zf.getinfo(name)
        except KeyError:
            pass
    return None


def _check_member(path: Path, info: zipfile.ZipInfo) -> None:
    """Refuse a member ``zipfile`` could not read as plain data, from its directory entry alone."""
    name = info.filename
    if info.flag_bits & UNREADABLE_FLAGS:
        what = "encrypted" if info.flag_bits & 0x41 else "stored as a patch"
        raise TraceFileError(path, f"member {name!r} is {what}; turnout reads plain .npz traces, save it "
                                   "unencrypted (np.savez_compressed, `turnout trace generate` or "
                                   "`turnout trace import`)")
    if info.compress_type not in READ_METHODS:
        raise TraceFileError(path, f"member {name!r} uses zip compression method {info.compress_type}; turnout "
                                   "reads stored or deflated members, as np.savez / np.savez_compressed write them")


def _npy_header(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[np.dtype, tuple, int]:
    """(dtype, shape, header bytes) of a member's .npy header, read without its data.

    Refuses object dtypes (they need pickle) and a shape whose bytes exceed what the member
    declares (a header claiming 10**12 entries is caught here, before anything is allocated).
    """
    name = info.filename
    with zf.open(info) as fh:
        head = io.BytesIO(fh.read(min(info.file_size, 12 + MAX_NPY_HEADER)))
    if head.getvalue()[:6] != np.lib.format.MAGIC_PREFIX:
        raise TraceFileError(path, f"member {name!r} is not a .npy array; expected {EXPECTED}")
    version = np.lib.format.read_magic(head)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(head, max_header_size=MAX_NPY_HEADER)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(head, max_header_size=MAX_NPY_HEADER)
    else:
        raise TraceFileError(path, f"member {name!r} is a .npy array of format version {version[0]}.{version[1]}; "
                                   f"expected {EXPECTED}")
    if dtype.hasobject:
        raise TraceFileError(path, "holds object arrays that need pickle, which turnout never loads; "
                                   f"expected {EXPECTED}")
    if any(d < 0 for d in shape):
        raise TraceFileError(path, f"member {name!r} has shape {shape}; expected {EXPECTED}")
    need = math.prod(shape) * max(dtype.itemsize, 1)
    have = info.file_size - head.tell()
    if need > have:
        raise TraceFileError(path, f"member {name!r} is truncated or corrupt: its header describes {need} bytes "
                                   f"of data (shape {shape}, dtype {dtype}) but it holds {have}; "
                                   "regenerate or re-import it")
    return dtype, shape, head.tell()


def _npy_data(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dtype: np.dtype, shape: tuple, header: int) -> np.ndarray:
    """A member's array (header already checked), decompressed :data:`READ_CHUNK` bytes at a time."""
    arr = np.empty(shape, dtype)
    dst = arr.reshape(-1).view(np.uint8)
    with zf.open(info) as fh:
        fh.read(header)
        pos = 0
        while pos < len(dst):
            chunk = fh.read(min(READ_CHUNK, len(dst) - pos))
            if not chunk:
                raise EOFError(f"{info.filename}: data ends after {pos} of {len(dst)} bytes")
            dst[pos:pos + len(chunk)] = np.frombuffer(chunk, np.uint8)
            pos += len(chunk)
    return arr


def _central_directory_size(f) -> int:
    """Size of the zip central directory as ``zipfile`` will read it (0 where it finds none).

    Follows ``zipfile``'s search for the end record: at the very end of the file, else the last
    signature in the final 64 KiB (after which a comment may follow); a zip64 end record just
    before it gives the size instead.
    """
    size = f.seek(0, 2)
    tail_at = max(size - (1 << 16) - 22, 0)
    f.seek(tail_at)
    tail = f.read()
    at = len(tail) - 22 if tail[-22:-18] == b"PK\x05\x06" and tail[-2:] == b"\0\0" else tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return 0
    cd = int.from_bytes(tail[at + 12:at + 16], "little")
    end64 = tail_at + at - 20 - 56  # zip64 end record (56 bytes), then its locator (20 bytes)
    if end64 >= 0:
        f.seek(end64)
        rec = f.read(76)
        if rec[56:60] == b"PK\x06\x07" and rec[:4] == b"PK\x06\x06":
            cd = int.from_bytes(rec[40:48], "little")
    return cd


def _array_budget() -> tuple[int, int | None]:
    """(array bytes a trace may declare, bytes of memory available or None when unknown)."""
    available = _memory_available()
    if available is None:
        return DEFAULT_ARRAY_BUDGET, None
    return max(MIN_ARRAY_BUDGET, available // MEMORY_PER_ARRAY_BYTE), available


def _memory_available() -> int | None:
    """Bytes this process can still allocate: the least of the system's available memory, its
    cgroup's headroom and its address-space limit (``RLIMIT_AS``), where they can be read."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        try:
            found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (OSError, ValueError, AttributeError):
            pass
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/status") as f:
                used = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
            found.append(soft - used)
    except (ImportError, OSError, ValueError, StopIteration):
        pass
    return max(min(found), 0) if found else None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def _default_mode(path) -> None:
    """Give a ``mkstemp`` file (0600) the permissions a plainly created file would get."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
