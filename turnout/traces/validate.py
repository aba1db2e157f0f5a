"""The trace format's rules, as one-line problems: on arrays in memory, or on a file's .npy headers before its
data is read (so a hostile file is refused early); and the errors that carry them."""

from __future__ import annotations

import os

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


#: Dtypes each array may have (checked from a file's .npy headers before its data is read).
DTYPES = {"offsets": ("int64",), "start_s": ("float64", "float32"), "end_s": ("float64", "float32"),
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
    for name, kinds in DTYPES.items():
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
