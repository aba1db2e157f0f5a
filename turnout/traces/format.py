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

The format's pieces: :mod:`.trace` (the trace and its queries), :mod:`.sweep` (the online all-clients
index), :mod:`.validate` (the rules, checked on arrays or on a file's headers), :mod:`.safe_npz` (a hardened
``.npz`` reader for files from anywhere); this module writes and reads files.
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..core.files import replaced_atomically
from .safe_npz import read_arrays
from .trace import AvailabilityTrace
from .validate import (
    CONVERT_HINT,
    EXPECTED,
    FORMAT_VERSION,
    MAX_PERIOD_S,
    MIN_PERIOD_S,
    TraceError,
    TraceFileError,
    check_arrays,
    check_layout,
    period_problem,
)

__all__ = ["AvailabilityTrace", "CONVERT_HINT", "EXPECTED", "FORMAT_VERSION", "MAX_PERIOD_S", "MIN_PERIOD_S",
           "TraceError", "TraceFileError", "check_arrays", "check_layout", "load_trace", "period_problem",
           "save_trace"]

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
    with replaced_atomically(path, "wb") as f:
        _write_npz(f, arrays, int(compress_level))
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
    headers are checked against limits before any data is decompressed
    (:func:`~turnout.traces.safe_npz.read_arrays`).
    """
    path = Path(path)
    _sniff(path)
    try:
        arrays = read_arrays(path)
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


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."

