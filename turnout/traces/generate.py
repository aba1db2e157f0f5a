"""Synthetic availability traces in FedScale's schema, calibrated to Stunner's online fraction.

The real FedScale ``client_behave_trace`` (FLASH's 136k-user trace) is not obtainable, so this
generator stands in for it. Results obtained with it are "FedScale-schema synthetic", not the
papers' traces. What it reproduces, per client and day:

* **how much** of each day a phone is online — drawn from the distribution of the Stunner
  trace's per-user-day online percentage (Szabó et al., DAIS 2019): 12.1 % of user-days are
  0 % online, the mean is 13.3 %, the median about 7 % (under 2 h), a long tail up to 100 %;
* **day-to-day persistence** — a client's days share a latent level (Gaussian copula with
  correlation ``day_correlation``), so heavy users are heavy every day while the per-user-day
  marginal stays exactly the calibrated one;
* **sessions** — the day's online time is split into ``1 + Poisson(T / session_mean_s)``
  sessions (at most ``max_sessions_per_day``) of random lengths (a flat Dirichlet split), so
  most sessions last minutes and a few last hours;
* **when** — session starts follow a time-of-day profile (:data:`DIURNAL_PROFILE`, an assumed
  night/evening-heavy shape: FedScale/FLASH "available" means charging, which peaks at night;
  neither publishes the curve) while sessions never overlap and each day's total is exact.
  A day is laid out from the client's own boundary hour ``phi`` (``day_start_hour`` ± uniform
  ``day_start_jitter_h``, a quiet hour by default: 12:00 ± 3 h), because no session can span a
  layout's boundary; the layout is then folded onto the calendar day (what falls after midnight
  moves to that day's early morning), so every calendar day holds exactly its drawn online
  time — the calibration is per calendar user-day, like Stunner's — and pieces of consecutive
  days that meet at midnight merge into one session. A piece starting at midnight with nothing
  of the day before ending there starts one ``resolution_s`` later, so closed intervals of two
  independent days never both claim the instant of midnight.

Everything is vectorised over client-days, in chunks of :data:`CHUNK` clients each drawing
from its own stream ``stream(seed, "traces/generate", client=chunk)``, so the trace is a pure
function of (seed, number of clients, options) and the first chunks do not depend on how many
clients follow. Times are rounded to whole seconds like FedScale's, and then held as float32,
which is exact for whole seconds below 2**24 s (194 days; float64 beyond, or with a
``resolution_s`` that is not a whole number of seconds) — see :mod:`turnout.traces.format`.
Chunks run on up to 8 threads; inside one, sessions are built :data:`BLOCK` clients at a time
(a few MB of temporaries), which gives the same trace as building the whole chunk at once.

Calibration data and licence: the Stunner histogram (``onlinePercentDist.out`` in
``arppy/stunner_preprocessor``, GPL-3.0) is **not** shipped. :data:`STUNNER_ONLINE` is a small
summary we computed from it — the mass at 0 % and 20 knots of the quantile function of the
positive part (treating bin ``k`` as ``[k-0.5, k+0.5]`` %), which reproduces its mean to
0.1 point. Users holding the original file can pass it as ``calibration_path``
(:func:`load_calibration` reads its ``pct count [rate]`` format).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator
from scipy.special import ndtr

from ..config.base import Fraction, StrictModel
from ..core import rng as rngmod
from ..core.errors import DataError
from .memory import trim_heap
from .trace import AvailabilityTrace

DAY_S = 86400.0
#: Clients per random stream (a chunk; chunks are generated in parallel).
CHUNK = 1 << 17
#: Clients whose sessions are built at once inside a chunk (bounds the temporary memory).
BLOCK = 1 << 12


@dataclass(frozen=True)
class Calibration:
    """Distribution of the fraction of a day a client is online.

    ``zero_mass`` of user-days are 0 % online; the rest follow the piecewise-linear quantile
    function through (``probs[i]``, ``pct[i]``), ``pct`` in percent of the day.
    """

    zero_mass: float
    probs: tuple[float, ...]
    pct: tuple[float, ...]
    source: str = ""

    def fraction(self, u: np.ndarray) -> np.ndarray:
        """Online fraction in [0, 1] for uniforms ``u`` (inverse-CDF sampling)."""
        z = self.zero_mass
        v = np.clip((u - z) / (1.0 - z), 0.0, 1.0)
        f = np.interp(v, self.probs, self.pct) / 100.0
        return np.where(u < z, 0.0, f)

    def mean(self) -> float:
        """Mean online fraction in [0, 1]."""
        p, q = np.asarray(self.probs), np.asarray(self.pct)
        return float((1.0 - self.zero_mass) * np.sum(np.diff(p) * (q[1:] + q[:-1]) / 2.0) / 100.0)

    def quantile(self, p) -> np.ndarray:
        """Online fraction at probability level(s) ``p`` of the whole distribution (zeros included)."""
        return self.fraction(np.asarray(p, np.float64))


#: Stunner's per-user-day online percentage (115,419 user-days), summarised by us; see module doc.
#: Derived from arppy/stunner_preprocessor@0d8f54d ``present/percentOfDay/onlinePercentDist.out``
#: (Szabó et al., "Stunner: A Smart Phone Trace for Developing Decentralized Edge Systems", DAIS 2019).
STUNNER_ONLINE = Calibration(
    zero_mass=0.12135,
    probs=(0.0, 0.05, 0.10, 0.20, 0.30, 0.40, 0.50, 0.60, 0.70, 0.80, 0.85, 0.90, 0.93, 0.95, 0.97,
           0.98, 0.985, 0.99, 0.995, 1.0),
    pct=(0.5, 1.07, 1.67, 3.04, 4.62, 6.62, 9.36, 13.38, 18.78, 24.95, 28.7, 33.9, 38.59, 43.92, 55.17,
         67.31, 78.98, 92.85, 99.51, 100.0),
    source="Stunner onlinePercentDist (built-in summary)",
)

#: Relative weight of session starts per local hour 0..23 (assumed shape, see module doc):
#: night/evening-heavy with a 3:1 peak-to-trough ratio.
DIURNAL_PROFILE = (1.5, 1.6, 1.6, 1.5, 1.4, 1.2, 1.0, 0.8, 0.6, 0.5, 0.5, 0.5,
                   0.6, 0.6, 0.5, 0.5, 0.6, 0.7, 0.8, 0.9, 1.1, 1.3, 1.4, 1.5)


def load_calibration(path: str | os.PathLike) -> Calibration:
    """Read a Stunner-style histogram: ``#`` comment lines, then ``pct count [rate]`` per line.

    ``pct`` is an integer percentage 0..100; bin 0 is read as "never online", bin ``k >= 1`` as
    uniform on ``[k-0.5, k+0.5]`` % (clipped to 100).
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"calibration file {str(p)!r} not found; give Stunner's onlinePercentDist.out "
                        "(lines 'pct count rate') or leave calibration_path unset for the built-in summary") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"calibration file {str(p)!r} cannot be read as text ({exc})") from None
    counts = np.zeros(101)
    for no, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        parts = s.split()
        try:
            pct, cnt = float(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            raise DataError(f"calibration file {str(p)!r} line {no}: "
                            f"expected 'pct count [rate]', got {s[:40]!r}") from None
        if not (pct.is_integer() and 0 <= pct <= 100) or not (cnt >= 0 and np.isfinite(cnt)):
            raise DataError(f"calibration file {str(p)!r} line {no}: pct must be an integer 0..100 and count >= 0")
        counts[int(pct)] += cnt
    total = counts.sum()
    if total <= 0 or counts[1:].sum() <= 0:
        raise DataError(f"calibration file {str(p)!r} has no positive counts above 0 %; expected a histogram")
    edges = np.concatenate([[0.5], np.arange(1, 101) + 0.5])
    edges[-1] = 100.0
    cdf = np.concatenate([[0.0], np.cumsum(counts[1:]) / counts[1:].sum()])
    cdf[-1] = 1.0
    return Calibration(float(counts[0] / total), tuple(cdf.tolist()), tuple(edges.tolist()), str(p))


class GeneratorConfig(StrictModel):
    """Options of the synthetic trace generator (see :mod:`turnout.traces.generate`)."""

    days: int = Field(6, ge=1, le=366, description="trace length; the period is days × 86,400 s (FedScale: 6)")
    session_mean_s: float = Field(3600.0, gt=0, description="online seconds per extra session of a day")
    max_sessions_per_day: int = Field(8, ge=1, le=96, description="cap on sessions per client-day")
    day_correlation: Fraction = Field(0.6,
                                      description="correlation of a client's days (Gaussian copula); 0 = independent")
    diurnal_strength: Fraction = Field(1.0, description="0 = session starts uniform over the day, 1 = the full profile")
    diurnal_profile: tuple[float, ...] | None = Field(None, description="24 hourly weights (default: built-in)")
    calibration_path: str | None = Field(None, description="Stunner onlinePercentDist.out to calibrate to")
    day_start_hour: float = Field(12.0, ge=0.0, lt=24.0, description="local hour a client's day starts "
                                  "(sessions never span it; pick a quiet hour)")
    day_start_jitter_h: float = Field(3.0, ge=0.0, le=12.0, description="± uniform per-client spread of day_start_hour")
    resolution_s: float = Field(1.0, ge=0.0, description="round times to this many seconds (0: no rounding)")

    @field_validator("diurnal_profile")
    @classmethod
    def _profile(cls, v):
        if v is None:
            return v
        if len(v) != 24 or any(not np.isfinite(x) or x < 0 for x in v) or sum(v) <= 0:
            raise ValueError("must be 24 finite hourly weights >= 0, not all zero")
        return tuple(float(x) for x in v)

    @field_validator("calibration_path")
    @classmethod
    def _calibration(cls, v):
        if v is not None and not Path(v).is_file():
            raise ValueError("file not found; give Stunner's onlinePercentDist.out, or leave unset "
                             "for the built-in summary")
        return v

    def calibration(self) -> Calibration:
        return STUNNER_ONLINE if self.calibration_path is None else load_calibration(self.calibration_path)


class _Warp:
    """The diurnal time-of-day distribution, for client days that start at any time of day.

    ``cdf`` is the fraction of the profile's mass before a time of day (in days, [0, 1]); its
    periodic extension ``F~(x) = floor(x) + cdf(x mod 1)`` has the inverse
    ``F~^-1(y) = floor(y) + inv(y mod 1)``. A client day starting at ``phi`` maps a uniform ``u``
    to ``F~^-1(F~(phi) + u) - phi`` in [0, 1): session starts follow the profile in real time
    whatever the client's day boundary. Both maps are 4,096-cell piecewise-linear tables.
    """

    CELLS = 4096

    def __init__(self, profile: np.ndarray):
        self.knots = np.concatenate([[0.0], np.cumsum(profile) / profile.sum()])
        grid = np.linspace(0.0, 1.0, self.CELLS + 1)
        self.inv = np.interp(grid, self.knots, np.arange(25) / 24.0)
        self.inv_step = np.diff(self.inv)

    def cdf(self, x: np.ndarray) -> np.ndarray:
        return np.interp(x, np.arange(25) / 24.0, self.knots)

    def _inv(self, y: np.ndarray) -> np.ndarray:
        s = y * self.CELLS
        i = s.astype(np.int64)
        np.clip(i, 0, self.CELLS - 1, out=i)
        return self.inv[i] + (s - i) * self.inv_step[i]

    def __call__(self, u: np.ndarray, a: np.ndarray, phi: np.ndarray) -> np.ndarray:
        """Day fraction after the day start ``phi`` (days) of uniforms ``u``; ``a = cdf(phi)``."""
        y = u + a
        whole = np.floor(y)
        y -= whole
        g = self._inv(y)
        g += whole
        g -= phi
        return np.clip(g, 0.0, 1.0, out=g)


def _time_dtype(cfg: GeneratorConfig) -> type:
    """float32 when every generated time is a whole number of seconds below 2**24 (exact), else float64."""
    r = cfg.resolution_s
    exact = r >= 1 and float(r).is_integer() and cfg.days * DAY_S <= 2.0 ** 24
    return np.float32 if exact else np.float64


def _chunk(n: int, seed: int, chunk: int, cfg: GeneratorConfig, cal: Calibration,
           warp: _Warp) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """(interval count per client, starts, ends) of ``n`` clients' intervals over ``cfg.days`` days.

    The chunk's draws come from one stream in a fixed order — per client and day first, then
    ``m`` session exponentials, ``m`` gap exponentials and one more per day — and the sessions
    are built :data:`BLOCK` clients at a time, each block drawing its share of the three
    exponential sequences from its own copy of the stream positioned at that sequence (the
    draws are the same whether taken at once or in pieces; cumulative sums carry over blocks
    exactly). Starts and ends come as one array per block, in :func:`_time_dtype`.
    """
    rng = rngmod.stream(seed, "traces/generate", client=chunk)
    d = cfg.days
    nd = n * d
    rho = cfg.day_correlation
    level = rng.standard_normal(n)
    noise = rng.standard_normal(nd)
    u = ndtr(rho * np.repeat(level, d) + np.sqrt(1.0 - rho * rho) * noise)
    online = cal.fraction(u) * DAY_S  # online seconds per client-day, client-major
    del level, noise, u
    # Each client's days are laid out from its own boundary phi, a quiet hour: no session spans it.
    phi_h = cfg.day_start_hour + rng.uniform(-cfg.day_start_jitter_h, cfg.day_start_jitter_h, n)
    phi_s = np.round(np.mod(phi_h, 24.0) * 3600.0)
    k = np.minimum(1 + rng.poisson(online / cfg.session_mean_s), cfg.max_sessions_per_day)
    k[online <= 0] = 0
    first = np.zeros(nd + 1, np.int64)  # index of each client-day's first session (+ the total)
    np.cumsum(k, out=first[1:])
    m = int(first[-1])
    if m == 0:
        dtype = _time_dtype(cfg)
        return np.zeros(n, np.int64), [np.zeros(0, dtype)], [np.zeros(0, dtype)]
    # Three cursors into the stream: session lengths (m draws), gaps (m), day totals (nd).
    rng_e = _copy(rng)
    _skip_exponentials(rng, m)
    rng_x = _copy(rng)
    _skip_exponentials(rng, m)
    rng_t = rng
    counts, starts, ends = [], [], []
    carry = [0.0, 0.0]  # cumulative session and gap exponentials before the block
    for a in range(0, n, BLOCK):
        b = min(a + BLOCK, n)
        c, s, e = _block(a * d, b * d, d, first, k, online, phi_s[a:b], rng_e, rng_x, rng_t, carry, cfg, warp)
        counts.append(c)
        starts.append(s)
        ends.append(e)
    return np.concatenate(counts), starts, ends


def _copy(rng: np.random.Generator) -> np.random.Generator:
    bg = type(rng.bit_generator)()
    bg.state = rng.bit_generator.state
    return np.random.Generator(bg)


def _skip_exponentials(rng: np.random.Generator, m: int, piece: int = 1 << 20) -> None:
    """Advance ``rng`` past ``m`` standard exponential draws (a few MB at a time)."""
    for lo in range(0, m, piece):
        rng.standard_exponential(min(piece, m - lo))


def _block(d0: int, d1: int, d: int, first: np.ndarray, k_all: np.ndarray, online_all: np.ndarray,
           phi_s: np.ndarray, rng_e, rng_x, rng_t, carry: list, cfg: GeneratorConfig,
           warp: _Warp) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Interval counts, starts and ends of the clients whose days are ``d0:d1`` of the chunk."""
    nd = d1 - d0
    period = d * DAY_S
    s0, s1 = int(first[d0]), int(first[d1])
    ms = s1 - s0
    k = k_all[d0:d1]
    online = online_all[d0:d1]
    first = first[d0:d1] - s0  # block-local session index of each day's first session
    day = np.repeat(np.arange(nd, dtype=np.int64), k)  # block-local client-day of every session
    # Session lengths: the day's online time split by a flat Dirichlet (normalised exponentials).
    # ce_ext[i] is the chunk's cumulative sum through session s0 - 1 + i (ce_ext[0]: before it).
    e = rng_e.standard_exponential(ms)
    ce_ext = np.cumsum(np.concatenate([[carry[0]], e]))
    carry[0] = float(ce_ext[-1])
    ce_base = ce_ext[first]
    ce_last = np.where(k > 0, ce_ext[first + k], 1.0)
    scale = online / np.maximum(ce_last - ce_base, 1e-300)  # seconds per unit of e, per day
    ce = ce_ext[1:]
    # Offline time before each session: O × warp(U_(j)), U_(j) the sorted uniforms of the day
    # (cumulative exponentials over k+1 of them), warped by the diurnal profile from phi on.
    cx_ext = np.cumsum(np.concatenate([[carry[1]], rng_x.standard_exponential(ms)]))
    carry[1] = float(cx_ext[-1])
    cx_base = cx_ext[first]
    cx_last = np.where(k > 0, cx_ext[first + k], 0.0)
    inv_total = 1.0 / (cx_last - cx_base + rng_t.standard_exponential(nd))
    phi_day = np.repeat(phi_s / DAY_S, d)
    g = warp((cx_ext[1:] - cx_base[day]) * inv_total[day], warp.cdf(phi_day)[day], phi_day[day])
    del cx_ext
    # Position in the client's day (which starts at phi): offline time before + online time before.
    sc = scale[day]
    length = e * sc
    start = (ce - ce_base[day]) * sc
    start -= length
    del e, ce, sc
    start += (DAY_S - online)[day] * g
    start += (phi_day * DAY_S)[day]  # time of day, in [phi, phi + 1 day)
    end = start + length
    del g, length
    # Fold each day onto its calendar day: what lies past midnight moves to the same day's start,
    # so every calendar day holds exactly its drawn online time; a session crossing midnight is
    # split, and the pieces touching at midnight from consecutive days merge again below.
    over = end > DAY_S
    if over.any():
        whole = start >= DAY_S  # the rest of `over` straddles midnight and is split
        w_start = np.where(whole, start - DAY_S, 0.0)[over]
        w_end = (end - DAY_S)[over]
        w_day = day[over]
        keep = ~whole
        day, start, end = day[keep], start[keep], np.minimum(end[keep], DAY_S)
        del whole, keep
        # Two runs each sorted by day (and time within it) merge with the folded (early-morning)
        # pieces of a day first: a kept piece moves up by the folded pieces of its day and
        # earlier days, a folded one by the kept pieces of earlier days (a linear-time merge).
        w_cnt = np.bincount(w_day, minlength=nd)
        k_cnt = np.bincount(day, minlength=nd)
        pos_k = np.cumsum(w_cnt)[day]
        pos_k += np.arange(len(day))
        pos_w = (np.cumsum(k_cnt) - k_cnt)[w_day]
        pos_w += np.arange(len(w_day))
        total = len(day) + len(w_day)
        merged = []
        for kept, folded in ((day, w_day), (start, w_start), (end, w_end)):
            out = np.empty(total, kept.dtype)
            out[pos_k] = kept
            out[pos_w] = folded
            merged.append(out)
        day, start, end = merged
        del merged, pos_k, pos_w, w_day, w_start, w_end
    origin = ((np.arange(nd) % d) * DAY_S)[day]
    start += origin
    end += origin
    owner = day // d
    del origin, day
    if cfg.resolution_s > 0:
        r = cfg.resolution_s
        if r != 1.0:
            start /= r
            end /= r
        np.round(start, out=start)
        np.round(end, out=end)
        if r != 1.0:
            start *= r
            end *= r
        np.minimum(end, period, out=end)
    # A piece starting at midnight with no piece of the previous day ending there would make the
    # closed intervals of two independent days overlap at that one instant: start it a step later.
    if len(start):
        # start is a whole number of days iff floor(start / DAY_S) * DAY_S gives it back (exact:
        # the quotient of a multiple is exact, the product of a whole number of days too)
        days_in = np.floor(start / DAY_S)
        days_in *= DAY_S
        head = np.flatnonzero((start > 0) & (days_in == start))
        del days_in
        if len(head):
            prev = np.maximum(head - 1, 0)  # a block's first piece has no piece before it
            paired = (head > 0) & (owner[prev] == owner[head]) & (end[prev] == start[head])
            start[head[~paired]] += cfg.resolution_s or 1e-3
    keep = end > start
    owner, start, end = owner[keep], start[keep], end[keep]
    # Merge intervals that touch after rounding (closed intervals must be strictly separated).
    if len(start):
        new = np.ones(len(start), bool)
        new[1:] = (owner[1:] != owner[:-1]) | (start[1:] > end[:-1])
        if not new.all():
            firsts = np.flatnonzero(new)
            lasts = np.append(firsts[1:], len(start)) - 1
            owner, start, end = owner[firsts], start[firsts], end[lasts]
    dtype = _time_dtype(cfg)
    return np.bincount(owner, minlength=nd // d), start.astype(dtype, copy=False), end.astype(dtype, copy=False)


def generate_trace(num_clients: int, seed: int, config: GeneratorConfig | None = None,
                   calibration: Calibration | None = None) -> AvailabilityTrace:
    """A synthetic FedScale-schema availability trace for ``num_clients`` clients.

    Deterministic in (``num_clients``, ``seed``, options). The period of every client is
    ``days × 86,400`` s; see the module docstring for the model. Memory: the result (about 180
    bytes per client with the defaults: 21.5 intervals of two float32 times, and the offsets),
    built in place, plus some 50 MB per thread (two threads: ~6 s at 10^6 clients).
    """
    cfg = config or GeneratorConfig()
    cal = calibration or cfg.calibration()
    if num_clients < 0:
        raise ValueError("num_clients must be >= 0")
    prof = np.asarray(cfg.diurnal_profile or DIURNAL_PROFILE, np.float64)
    warp = _Warp((1.0 - cfg.diurnal_strength) * prof.mean() + cfg.diurnal_strength * prof)
    bounds = [(ci, lo, min(CHUNK, num_clients - lo)) for ci, lo in enumerate(range(0, num_clients, CHUNK))]

    def work(b):
        ci, _, n = b
        return _chunk(n, seed, ci, cfg, cal, warp)

    offsets = np.zeros(num_clients + 1, np.int64)
    dtype = _time_dtype(cfg)
    start, end = _Growing(dtype), _Growing(dtype)

    def collect(parts) -> None:  # chunk results in order, copied out at once (none is kept)
        for (_, lo, n), (counts, s, e) in zip(bounds, parts):
            offsets[lo + 1:lo + n + 1] = counts
            if start.cap == 0:  # reserve for all clients at the first chunk's rate, + 2 %
                start.reserve(int(sum(map(len, s)) / max(n, 1) * num_clients * 1.02) + 1024)
                end.reserve(start.cap)
            for x in s:
                start.extend(x)
            for x in e:
                end.extend(x)
            del s[:], e[:]

    workers = min(len(bounds), os.cpu_count() or 1, 8)
    if workers > 1:  # numpy releases the GIL in its bulk kernels; chunks are independent streams
        with ThreadPoolExecutor(workers) as pool:
            collect(pool.map(work, bounds))
    else:
        collect(map(work, bounds))
    np.cumsum(offsets, out=offsets)
    trace = AvailabilityTrace(offsets, start.result(), end.result(), np.full(num_clients, cfg.days * DAY_S))
    if num_clients > CHUNK:
        trim_heap()  # the chunks' temporaries, freed in the worker threads' heaps
    return trace


class _Growing:
    """A 1-D array filled in order, grown and finally trimmed in place (``realloc``).

    Chunk results are copied in as they come (in order), so finished chunks do not pile up,
    and the times are never joined from parts: their final size is needed once, not twice.
    """

    def __init__(self, dtype):
        self.a = np.empty(0, dtype)
        self.n = 0

    @property
    def cap(self) -> int:
        return len(self.a)

    def reserve(self, cap: int) -> None:
        if cap > len(self.a):
            self.a.resize(cap, refcheck=False)  # no other reference to the buffer exists

    def extend(self, x: np.ndarray) -> None:
        need = self.n + len(x)
        if need > len(self.a):
            self.reserve(max(need, len(self.a) + len(self.a) // 4))
        self.a[self.n:need] = x
        self.n = need

    def result(self) -> np.ndarray:
        self.a.resize(self.n, refcheck=False)
        return self.a


def daily_online_fraction(trace: AvailabilityTrace, day_s: float = DAY_S) -> np.ndarray:
    """Fraction of each whole day each client is online, shape ``(N, floor(period / day_s))``.

    Intervals crossing midnight are split correctly (by differencing the cumulative online time
    at day boundaries). Meant for calibration checks, O(intervals × days).
    """
    n = trace.num_traces
    days = int(np.floor(trace.period_s.min() / day_s)) if n else 0
    owner = np.repeat(np.arange(n), trace.counts())
    s, e = trace.start_s.astype(np.float64), trace.end_s.astype(np.float64)
    cum = np.zeros((n, days + 1))
    for b in range(1, days + 1):
        x = b * day_s
        cum[:, b] = np.bincount(owner, weights=np.clip(x - s, 0.0, e - s), minlength=n)
    return np.diff(cum, axis=1) / day_s
