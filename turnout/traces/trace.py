"""Availability traces in memory: per-client periodic online intervals, struct-of-arrays, and their queries.

Lookups are exact and vectorised, three ways with the same answer (FedScale's interval test):

* all clients at one time (what availability asks each round): an incremental sweep that
  applies only the interval starts/ends between the previous and the new time
  (:class:`~turnout.traces.sweep.Sweep`) — about a millisecond per million clients per round; its index
  (8 bytes per interval) is
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

from dataclasses import dataclass, field

import numpy as np

from .sweep import Sweep
from .validate import TraceError, check_arrays


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
    _sweep: "Sweep | None" = field(init=False, repr=False, default=None)

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

    @property
    def uniform_period(self) -> float | None:
        """The one period every client shares (seconds), or None when periods differ."""
        return self._uniform_period

    def build_sweep(self) -> None:
        """Build the incremental all-clients index now (else the first all-clients query does).

        Only a trace with one period for all clients and at least one interval has it; about
        8 bytes per interval and a second or two per 10^7 intervals. Availability models call it
        at construction so that no simulated round pays for it.
        """
        if self._sweep is None and self._uniform_period is not None and self.num_intervals:
            self._sweep = Sweep(self)

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
        return self.search_online(c, t)

    def search_online(self, clients, t) -> np.ndarray:
        """The stateless exact lookup (per-client bisection, or one search over the global keys); the sweep
        answers with it when a jump would touch more events than clients."""
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
