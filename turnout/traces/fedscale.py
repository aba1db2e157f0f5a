"""One-off conversion of FedScale's pickled system traces into turnout's safe formats.

This is the **only** module of turnout that unpickles, and only when a user runs
``turnout trace import``. ``pickle.load`` can run arbitrary code, so the file is read with
:class:`RestrictedUnpickler`: plain dicts, lists, tuples, strings and numbers build without any
global lookup, and the only globals it will resolve are ``builtins.set``/``frozenset`` (older
protocols) and numpy's scalar reconstructor with ``numpy.dtype`` (a FedScale value may be a
``numpy.float64``); anything else — ``os.system``, ``builtins.eval``, any class — is refused
before it is called.

Schemas (FedScale ``benchmark/dataset/data/device_info/``; see ``docs/algorithms/world.md#traces``):

* ``client_behave_trace``: ``{key: {'duration': int s, 'inactive': [int s], 'finish_time': int s,
  'active': [int s], 'model': str}}`` — client online during ``[active[i], inactive[i]]`` of
  every period of ``finish_time`` seconds; ``duration`` is the total online time.
* ``client_device_capacity``: ``{key: {'computation': ms/sample, 'communication': kbps}}``
  (+ ``'dl_kbps'``, ``'ul_kbps'`` in GlueFL's ``_ul_dl`` variants).

Dict order is kept: FedScale assigns traces by position in ``list(dict.keys())``.

Normalisation on import (counted in :class:`ImportReport`): intervals are sorted, overlapping
or touching intervals merged (closed intervals sharing a point are one online stretch),
intervals starting at or after ``finish_time`` dropped (FedScale's ``t mod finish_time`` never
reaches them) and ends clipped to ``finish_time``. Anything that cannot be read unambiguously —
a missing key, a non-number, ``active[i] > inactive[i]``, a negative time, different list
lengths, ``finish_time <= 0`` — is a one-line :class:`DataError` naming the entry.
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError
from .format import AvailabilityTrace

BEHAVIOR_KEYS = ("duration", "inactive", "finish_time", "active", "model")
BEHAVIOR_REQUIRED = ("active", "inactive", "finish_time")
CAPACITY_KEYS = ("computation", "communication")
LINK_KEYS = ("dl_kbps", "ul_kbps")

_ALLOWED_GLOBALS = {
    ("builtins", "set"), ("builtins", "frozenset"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "dtype"),
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves no globals except a few constructors that cannot run code."""

    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused persistent id")


def safe_unpickle(path: str | os.PathLike) -> object:
    """Read a pickle with :class:`RestrictedUnpickler`; problems are one-line :class:`DataError`."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"FedScale file {str(p)!r} not found") from None
    except OSError as exc:
        raise DataError(f"FedScale file {str(p)!r} cannot be read ({exc.strerror or exc})") from None
    if data[:2] == b"PK":
        raise DataError(f"FedScale file {str(p)!r} is a zip/.npz archive, not a FedScale pickle; "
                        "an .npz trace can be used directly (availability.path)")
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        msg = " ".join(str(exc).split())
        if msg.startswith("refused"):
            raise DataError(f"FedScale file {str(p)!r} was refused: it asks to {msg[len('refused '):]}, "
                            "which a FedScale trace (dicts of numbers, lists and strings) never needs; "
                            "it may be malicious") from None
        raise DataError(f"FedScale file {str(p)!r} is not a readable pickle ({msg[:100]})") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError, MemoryError,
            RecursionError, UnicodeDecodeError, OverflowError) as exc:
        raise DataError(f"FedScale file {str(p)!r} is not a readable pickle "
                        f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]})") from None


@dataclass
class ImportReport:
    """What normalisation an import had to do."""

    traces: int = 0
    intervals: int = 0
    merged: int = 0
    dropped: int = 0
    clipped: int = 0
    unsorted_traces: int = 0

    def summary(self) -> str:
        extra = [f"{v} {k.replace('_', ' ')}" for k, v in
                 (("merged", self.merged), ("dropped", self.dropped), ("clipped", self.clipped),
                  ("unsorted_traces", self.unsorted_traces)) if v]
        return f"{self.traces} traces, {self.intervals} intervals" + (f" ({', '.join(extra)})" if extra else "")


def _number(v) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        f = float(v)
        return f if np.isfinite(f) else None
    return None


def _top_dict(obj, path, what: str) -> dict:
    if not isinstance(obj, dict):
        raise DataError(f"FedScale file {str(path)!r} holds a {type(obj).__name__}, expected the {what} dict "
                        "{client_key: {...}}")
    if not obj:
        raise DataError(f"FedScale file {str(path)!r} is an empty dict; expected the {what}")
    return obj


def behavior_from_dict(obj, source: str = "<dict>") -> tuple[AvailabilityTrace, ImportReport]:
    """A FedScale ``client_behave_trace`` dict → :class:`AvailabilityTrace` (+ what was normalised)."""
    d = _top_dict(obj, source, "client_behave_trace")
    rep = ImportReport(traces=len(d))
    starts, ends, counts, periods, models = [], [], [], [], []
    for key, v in d.items():
        where = f"FedScale behaviour trace {source!r} entry {key!r}"
        if not isinstance(v, dict):
            raise DataError(f"{where} is a {type(v).__name__}, expected a dict with keys {', '.join(BEHAVIOR_KEYS)}")
        missing = [k for k in BEHAVIOR_REQUIRED if k not in v]
        if missing:
            raise DataError(f"{where} lacks {', '.join(missing)}; expected keys {', '.join(BEHAVIOR_KEYS)}")
        period = _number(v["finish_time"])
        if period is None or period <= 0:
            raise DataError(f"{where}: finish_time = {v['finish_time']!r}, expected a number > 0 (seconds)")
        act, ina = v["active"], v["inactive"]
        if not isinstance(act, (list, tuple)) or not isinstance(ina, (list, tuple)):
            raise DataError(f"{where}: active and inactive must be lists of seconds")
        if len(act) != len(ina):
            raise DataError(f"{where}: active has {len(act)} entries but inactive has {len(ina)}")
        s = np.empty(len(act))
        e = np.empty(len(act))
        for i, (a, b) in enumerate(zip(act, ina)):
            fa, fb = _number(a), _number(b)
            if fa is None or fb is None:
                raise DataError(f"{where}: active[{i}] = {a!r}, inactive[{i}] = {b!r}; expected finite numbers")
            s[i], e[i] = fa, fb
        bad = (s < 0) | (e < s)
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(f"{where}: interval {i} is [{s[i]:g}, {e[i]:g}]; expected 0 <= active <= inactive")
        model = v.get("model", "unknown")
        if not isinstance(model, str):
            raise DataError(f"{where}: model = {model!r}, expected a string")
        if len(s) > 1 and np.any(np.diff(s) < 0):
            rep.unsorted_traces += 1
            o = np.argsort(s, kind="stable")
            s, e = s[o], e[o]
        keep = s < period
        rep.dropped += int((~keep).sum())
        s, e = s[keep], e[keep]
        rep.clipped += int((e > period).sum())
        e = np.minimum(e, period)
        if len(s) > 1:  # merge overlapping / touching closed intervals
            run_end = np.maximum.accumulate(e)
            new = np.ones(len(s), bool)
            new[1:] = s[1:] > run_end[:-1]
            first = np.flatnonzero(new)
            last = np.append(first[1:], len(s)) - 1
            rep.merged += len(s) - len(first)
            s, e = s[first], run_end[last]
        starts.append(s)
        ends.append(e)
        counts.append(len(s))
        periods.append(period)
        models.append(model)
    offsets = np.zeros(len(d) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    start = np.concatenate(starts) if starts else np.zeros(0)
    end = np.concatenate(ends) if ends else np.zeros(0)
    rep.intervals = len(start)
    return AvailabilityTrace(offsets, start, end, np.array(periods), np.array(models, dtype=str)), rep


def import_fedscale_behavior(pkl_path: str | os.PathLike, report: ImportReport | None = None) -> AvailabilityTrace:
    """Read FedScale's pickled ``client_behave_trace`` safely and convert it to a trace."""
    trace, rep = behavior_from_dict(safe_unpickle(pkl_path), str(pkl_path))
    if report is not None:
        report.__dict__.update(rep.__dict__)
    return trace


def export_fedscale_behavior(trace: AvailabilityTrace, keys=None) -> dict:
    """A trace as FedScale's ``client_behave_trace`` dict (keys ``0..N-1`` unless given)."""
    keys = range(trace.num_traces) if keys is None else keys
    return {k: trace.fedscale_dict_entry(i) for i, k in enumerate(keys)}


def capacity_from_dict(obj, source: str = "<dict>"):
    """A FedScale ``client_device_capacity`` dict → :class:`~turnout.devices.fedscale.CapacityTable`."""
    from ..devices.fedscale import CapacityTable

    d = _top_dict(obj, source, "client_device_capacity")
    n = len(d)
    client = np.empty(n, np.int64)
    comp = np.empty(n)
    comm = np.empty(n)
    first = next(iter(d.values()))
    links = isinstance(first, dict) and all(k in first for k in LINK_KEYS)
    dl = np.empty(n) if links else None
    ul = np.empty(n) if links else None
    for i, (key, v) in enumerate(d.items()):
        where = f"FedScale capacity file {source!r} entry {key!r}"
        if isinstance(key, bool) or not isinstance(key, (int, np.integer, str)):
            raise DataError(f"{where}: key must be an integer client id")
        try:
            client[i] = int(key)
        except ValueError:
            raise DataError(f"{where}: key must be an integer client id") from None
        if not isinstance(v, dict):
            raise DataError(f"{where} is a {type(v).__name__}, expected {{'computation': ms, 'communication': kbps}}")
        need = CAPACITY_KEYS + (LINK_KEYS if links else ())
        missing = [k for k in need if k not in v]
        if missing:
            raise DataError(f"{where} lacks {', '.join(missing)}; expected keys {', '.join(need)}")
        c = _number(v["computation"])
        if c is None or c < 0:
            raise DataError(f"{where}: computation = {v['computation']!r}, expected ms/sample >= 0")
        comp[i] = c
        for name, arr in (("communication", comm), ("dl_kbps", dl), ("ul_kbps", ul)):
            if arr is None:
                continue
            x = _number(v[name])
            if x is None or x <= 0:
                raise DataError(f"{where}: {name} = {v[name]!r}, expected a bandwidth > 0 kbps "
                                "(remove or fix that profile before importing)")
            arr[i] = x
    return CapacityTable(client, comp, comm, dl, ul)


def import_fedscale_capacity(pkl_path: str | os.PathLike):
    """Read FedScale's pickled ``client_device_capacity`` safely → ``CapacityTable`` of arrays."""
    return capacity_from_dict(safe_unpickle(pkl_path), str(pkl_path))
