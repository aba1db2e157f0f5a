"""Trace-driven availability: FedScale-style periodic online intervals in simulated time.

A client is online at absolute simulated time ``t`` iff ``(t + time_offset_s) mod period`` lies
in one of its trace's closed intervals (FedScale ``ClientMetadata.is_active``). The trace comes
from a turnout ``.npz`` (``path``; convert FedScale's pickle once with ``turnout trace import``)
or, when ``path`` is unset, from the calibrated generator (:mod:`turnout.traces.generate`),
seeded by the run seed, with ``generator`` options. ``online_until`` gives each client's end of
its current online interval, so a client whose download + compute + upload finishes later
drops out mid-round (its work is lost).

Clients → traces (``mapping``; for a generated trace only when ``num_traces`` is set — by
default one trace is generated per client and client ``i`` simply gets trace ``i``, the traces
being independent draws):

* ``modulo`` (FedScale): client ``i`` (0-based) uses trace ``(i + 1) % n_traces`` — FedScale
  numbers clients from 1 and takes ``keys[client_id % len]``;
* ``random``: a permutation drawn from the run seed (stream ``availability/trace/mapping``):
  ``perm(max(N, n))[:N] % n``, so distinct traces when ``N <= n`` and balanced reuse otherwise.

Lookup (``lookup``):

* ``exact`` (default): the interval test itself, answered by binary search / an incremental
  sweep over the trace (:class:`turnout.traces.AvailabilityTrace`). The sweep's index (8 bytes
  per interval) is built with the model, so round times stay steady from the first round.
* ``fedscale_pointer``: FedScale's stateful emulation (``docs/algorithms/world.md#traces``): each client keeps a pointer
  ``j`` that advances by at most one per query when ``tau > inactive[j]`` (wrapping modulo the
  interval count) and never moves back; the client is active iff
  ``active[j] <= tau <= inactive[j]``. It agrees with ``exact`` while the simulated clock moves
  less than one interval/gap per query and goes wrong after big jumps (a pointer that lags,
  or a period wrap-around, which FedScale never rewinds). Only :meth:`available` uses the
  pointer; mid-round dropout still uses the exact end of the current interval (FedScale checks
  activity only at the finish instant, which would let a client that went offline and came
  back mid-task count as finished).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from ..config.base import StrictModel
from ..config.limits import MAX_SECONDS, MAX_TRACES
from ..core import rng as rngmod
from ..core.errors import ConfigError, DataError
from ..traces.format import AvailabilityTrace, TraceFileError, load_trace
from ..traces.generate import GeneratorConfig, generate_trace
from ..world.context import WorldContext
from .base import AVAILABILITY, Availability

MAPPING_PURPOSE = "availability/trace/mapping"

#: Recently built (mapped) traces: the pre-flight and the run, and variants sharing a population,
#: reuse one object instead of re-reading or re-generating it (which takes seconds at 10^6 clients).
_CACHE: "OrderedDict[tuple, AvailabilityTrace]" = OrderedDict()
_CACHE_SIZE = 2


class TraceAvailabilityConfig(StrictModel):
    path: str | None = Field(None, description="turnout .npz trace; unset: generate one from the run seed")
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig,
                                       description="options of the synthetic trace (used when path is unset)")
    num_traces: int | None = Field(None, ge=1, le=MAX_TRACES,
                                   description="traces to generate and map onto the clients (default: one per "
                                               "client, client i gets trace i; at most 10^8)")
    mapping: Literal["modulo", "random"] = Field("modulo", description="client i -> trace (i+1) % n, or random")
    lookup: Literal["exact", "fedscale_pointer"] = Field("exact", description="exact interval test, or "
                                                                              "FedScale's stateful pointer emulation")
    time_offset_s: float = Field(0.0, ge=0.0, le=MAX_SECONDS, description="trace time at simulated time 0")

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str | None) -> str | None:
        if v is None:
            return v
        p = Path(v)
        if not p.is_file():
            raise ValueError("file not found; give a turnout .npz trace (`turnout trace generate` or "
                             "`turnout trace import FILE.pkl --out FILE.npz`), or leave path unset to generate one")
        return v


def _cached(key: tuple, build) -> AvailabilityTrace:
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    trace = build()
    _CACHE[key] = trace
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return trace


def client_mapping(num_clients: int, num_traces: int, mapping: str, seed: int) -> np.ndarray:
    """Trace index of every simulated client."""
    if mapping == "modulo":
        return (np.arange(num_clients, dtype=np.int64) + 1) % num_traces
    perm = rngmod.stream(seed, MAPPING_PURPOSE).permutation(max(num_clients, num_traces))[:num_clients]
    return perm.astype(np.int64) % num_traces


@AVAILABILITY.register("trace")
class TraceAvailability(Availability):
    """FedScale-style trace: online in periodic intervals of a .npz or generated trace; drops mid-round."""

    Config = TraceAvailabilityConfig
    state_attrs = ("_pointer",)
    scratch_attrs = ("_window_cache",)

    #: Bytes per generated client-day: its sessions' intervals, the sweep index and per-trace columns.
    BYTES_PER_CLIENT_DAY = 100

    @classmethod
    def memory_bytes(cls, cfg: TraceAvailabilityConfig, sizes) -> int:
        """For the memory pre-flight: generated traces scale with traces × days; a file with its size."""
        if cfg.path is not None:
            try:
                return 4 * os.path.getsize(cfg.path) + 16 * sizes.num_clients
            except OSError:
                return 0
        traces = cfg.num_traces or sizes.num_clients
        return traces * cfg.generator.days * cls.BYTES_PER_CLIENT_DAY + 16 * sizes.num_clients

    def __init__(self, cfg: TraceAvailabilityConfig, world: WorldContext):
        super().__init__(cfg, world)
        n = world.num_clients
        if cfg.path is not None:
            p = Path(cfg.path)
            try:
                st = os.stat(p)
                key = ("file", str(p.resolve()), st.st_mtime_ns, st.st_size, n, cfg.mapping,
                       self.seed if cfg.mapping == "random" else None)
                self.trace = _cached(key, lambda: self._map(load_trace(p)))
            except TraceFileError as exc:
                raise ConfigError("availability.path", cfg.path, exc.problem) from None
            except OSError as exc:
                raise ConfigError("availability.path", cfg.path, f"cannot be read ({exc.strerror or exc})") from None
        else:
            try:
                if cfg.num_traces is None:  # one generated trace per client: client i gets trace i
                    key = ("generate", cfg.generator.model_dump_json(), n, self.seed)
                    self.trace = _cached(key, lambda: generate_trace(n, self.seed, cfg.generator))
                else:
                    key = ("generate", cfg.generator.model_dump_json(), cfg.num_traces, self.seed, n, cfg.mapping)
                    self.trace = _cached(key, lambda: self._map(
                        generate_trace(cfg.num_traces, self.seed, cfg.generator)))
            except DataError as exc:  # an unreadable calibration file
                raise ConfigError("availability.generator.calibration_path", cfg.generator.calibration_path,
                                  str(exc)) from None
        self._pointer: np.ndarray | None = None  # FedScale pointer emulation (lookup: fedscale_pointer)
        self._window_cache: dict = {}
        if cfg.lookup == "exact":
            # the all-clients index (seconds at 10^6 clients) is part of construction, so that no
            # round pays for it; a cached trace already has it
            self.trace.build_sweep()

    def _map(self, source: AvailabilityTrace) -> AvailabilityTrace:
        """The trace re-indexed so that trace ``i`` is simulated client ``i``'s."""
        n = self.world.num_clients
        if source.num_traces == 0:
            raise ConfigError("availability.path", self.cfg.path, "holds no client traces")
        m = client_mapping(n, source.num_traces, self.cfg.mapping, self.seed)
        if n == source.num_traces and np.array_equal(m, np.arange(n)):
            return source
        return source.subset(m)

    def _t(self, time_s) -> float:
        return float(time_s) + self.cfg.time_offset_s

    def available(self, round: int, time_s: float) -> np.ndarray:
        t = self._t(time_s)
        if self.cfg.lookup == "exact":
            return self.trace.is_online(None, t)
        return self._pointer_online(t)

    def online_until(self, clients: np.ndarray, round: int, time_s: float) -> np.ndarray:
        c = np.asarray(clients, dtype=np.int64)
        return self.trace.online_until(c, self._t(time_s)) - self.cfg.time_offset_s

    def window_fraction(self, clients: np.ndarray, round: int, t0: float, t1: float) -> np.ndarray | None:
        """The exact share of ``[t0, t1]`` each client's periodic intervals cover."""
        if self.trace.num_traces != self.num_clients:
            return None
        off = self.cfg.time_offset_s
        return trace_window_fraction(self.trace, clients, t0 + off, t1 + off, self._window_cache)

    def online_throughout(self, clients: np.ndarray, round: int, t0: float, t1: float) -> np.ndarray | None:
        """Online at ``t0`` and staying at least until ``t1``, from the trace itself (no pointer moves)."""
        if self.trace.num_traces != self.num_clients:
            return None
        off, tr = self.cfg.time_offset_s, self.trace
        return tr.is_online(clients, t0 + off) & (tr.online_until(clients, t0 + off) >= t1 + off)

    # FedScale's ClientMetadata.is_active, vectorised over all clients --------------------------
    def _pointer_online(self, t: float) -> np.ndarray:
        tr = self.trace
        counts = tr.counts()
        has = counts > 0
        if self._pointer is None:
            self._pointer = np.zeros(tr.num_traces, np.int64)
        tau = np.mod(t, tr.period_s)
        lo = tr.offsets[:-1]
        safe = np.maximum(counts, 1)
        last = max(tr.num_intervals - 1, 0)
        cur = np.minimum(lo + self._pointer, last)
        if tr.num_intervals:
            adv = has & (tau > tr.end_s[cur])
            self._pointer = np.where(adv, self._pointer + 1, self._pointer) % safe
            cur = np.minimum(lo + self._pointer, last)
            return has & (tr.start_s[cur] <= tau) & (tau <= tr.end_s[cur])
        return np.zeros(tr.num_traces, bool)


def trace_window_fraction(trace: AvailabilityTrace, clients: np.ndarray, t0: float, t1: float,
                          cache: dict | None = None) -> np.ndarray:
    """Exact fraction of ``[t0, t1]`` (trace seconds) during which each client is online.

    With ``G_c(τ)`` the online seconds of client ``c`` in ``[0, τ]`` of its period ``P_c`` and
    ``H_c(x) = ⌊x / P_c⌋·G_c(P_c) + G_c(x mod P_c)``, the answer is ``(H(t1) − H(t0)) / (t1 − t0)``
    (``t1 == t0``: online at ``t0`` or not). One binary search per client and end point.
    """
    c = np.asarray(clients, dtype=np.int64)
    if len(c) == 0:
        return np.zeros(0)
    if t1 <= t0:
        return trace.is_online(c, t0).astype(np.float64)
    key = id(trace)
    idx = cache.get(key) if cache is not None else None
    if idx is None or idx[0] is not trace:
        # float64 throughout: the trace may store float32 times, and the running sum spans every client
        length = trace.end_s.astype(np.float64) - trace.start_s.astype(np.float64)
        excl = np.concatenate([[0.0], np.cumsum(length)])  # online seconds before interval j (global)
        big = float(2.0 ** int(np.ceil(np.log2(2.0 * float(trace.period_s.max() if len(trace.period_s) else 1.0)))))
        keys = np.repeat(np.arange(trace.num_traces, dtype=np.float64) * big, trace.counts()) + trace.start_s
        idx = (trace, length, excl, big, keys)
        if cache is not None:
            cache.clear()
            cache[key] = idx
    _, length, excl, big, keys = idx
    lo, hi = trace.offsets[c], trace.offsets[c + 1]
    period = trace.period_s[c]
    total = excl[hi] - excl[lo]

    def h(x: float) -> np.ndarray:
        cycles = np.floor(x / period)
        tau = x - cycles * period
        j = np.searchsorted(keys, c * big + tau, side="right") - 1
        j = np.clip(j, lo - 1, hi - 1)
        has = j >= lo
        jj = np.where(has, j, 0)
        inside = np.clip(tau - trace.start_s[jj] if len(keys) else 0.0, 0.0, length[jj] if len(keys) else 0.0)
        g = np.where(has, excl[jj] - excl[lo] + inside, 0.0)
        return cycles * total + g

    return np.clip((h(t1) - h(t0)) / (t1 - t0), 0.0, 1.0)
