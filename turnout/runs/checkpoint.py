"""A unit's checkpoint: the simulation's whole state as plain arrays + JSON, written atomically.

Layout of ``UNIT/checkpoint/``: ``arrays.npz`` (every array of the state, uncompressed — models,
counters, the client-state store's RAM rows), one ``NAME.npy`` per array larger than
:data:`BIG_ARRAY_BYTES` (spilled store rows; read back memory-mapped, so resuming a run whose
store spilled 50 GB does not need 50 GB of RAM), and ``state.json`` (the state's structure
pointing at those arrays, plus what the run layer needs: the next round, rows written, wall time).
Nothing is pickled (``allow_pickle=False`` on every read).

Writing never leaves a half-written checkpoint in place: everything goes to ``checkpoint.tmp-PID/``
(each file fsync'ed, ``state.json`` last), then the previous ``checkpoint/`` is renamed to
``checkpoint.old/``, the new one renamed into place, and only then is the old one removed. A
crash at any moment leaves ``checkpoint/`` or ``checkpoint.old/`` complete, and :func:`load`
takes whichever is there.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ..core import faults
from ..core.state import decode_state, encode_state

CURRENT, PREVIOUS, TMP_PREFIX = "checkpoint", "checkpoint.old", "checkpoint.tmp-"
FORMAT = 1
#: arrays at least this large get their own .npy file (memory-mapped when loaded)
BIG_ARRAY_BYTES = 64 << 20


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, write) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def save(unit_dir: Path, state: Any, info: dict, rows_text: str = "") -> Path:
    """Write ``state`` (a state tree), ``info`` (JSON-able) and the unit's rows so far (``rows.jsonl`` text)
    as the unit's checkpoint; returns its folder.

    The rows travel with the state because a worker's rows reach the run folder's ``rounds.jsonl``
    asynchronously: the checkpoint, not that file, is what a resumed unit starts from.
    """
    unit_dir = Path(unit_dir)
    arrays, meta = encode_state(state)
    tmp = unit_dir / f"{TMP_PREFIX}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    big = sorted(k for k, v in arrays.items() if v.nbytes >= BIG_ARRAY_BYTES)
    _write(tmp / "arrays.npz", lambda f: np.savez(f, **{k: v for k, v in arrays.items() if k not in big}))
    for key in big:
        _write(tmp / f"{key}.npy", lambda f, key=key: np.save(f, arrays[key], allow_pickle=False))
    _write(tmp / "rows.jsonl", lambda f: f.write(rows_text.encode()))
    faults.point("checkpoint-arrays")
    doc = {"format": FORMAT, "info": info, "big_arrays": big, "state": meta}
    _write(tmp / "state.json", lambda f: f.write(json.dumps(doc, allow_nan=False).encode()))
    _fsync_dir(tmp)
    current, previous = unit_dir / CURRENT, unit_dir / PREVIOUS
    if current.exists():
        shutil.rmtree(previous, ignore_errors=True)
        os.rename(current, previous)
    faults.point("checkpoint-swap")
    os.rename(tmp, current)
    _fsync_dir(unit_dir)
    shutil.rmtree(previous, ignore_errors=True)
    return current


def load(unit_dir: Path) -> tuple[Any, dict, str] | None:
    """``(state, info, rows_text)`` of the unit's latest complete checkpoint, or ``None`` when it has none."""
    for name in (CURRENT, PREVIOUS):
        folder = Path(unit_dir) / name
        if (folder / "state.json").is_file():
            return _read(folder)
    return None


def _read(folder: Path) -> tuple[Any, dict, str]:
    doc = json.loads((folder / "state.json").read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{folder}: checkpoint format {doc.get('format')!r}, this turnout reads {FORMAT}")
    with np.load(folder / "arrays.npz", allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    for key in doc["big_arrays"]:
        arrays[key] = np.load(folder / f"{key}.npy", mmap_mode="r", allow_pickle=False)
    return decode_state(arrays, doc["state"]), doc["info"], (folder / "rows.jsonl").read_text()


def remove(unit_dir: Path) -> None:
    """Delete every checkpoint of a unit (it finished: its tables are the record now)."""
    for child in Path(unit_dir).iterdir() if Path(unit_dir).is_dir() else ():
        if child.name in (CURRENT, PREVIOUS) or child.name.startswith(TMP_PREFIX):
            shutil.rmtree(child, ignore_errors=True)


__all__ = ["save", "load", "remove", "BIG_ARRAY_BYTES"]
