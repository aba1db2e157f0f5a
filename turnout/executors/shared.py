"""Arrays in files on a RAM-backed file system, mapped by the driver and by every worker process.

Why files, not pickles: the dataset is written once per simulation and each worker maps it
instead of receiving a copy, and the per-round parameter board (start points, objective offsets,
end points, gradient sums) is a mapped array both sides write in place, so a round's messages
carry only row numbers. ``/dev/shm`` is used when it exists (pages stay in RAM); the directory is
removed when the pool closes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ArraySpec:
    """Where a mapped array lives and its layout: enough for another process to map it."""

    path: str
    dtype: str
    shape: tuple[int, ...]

    def open(self, mode: str = "r") -> np.ndarray:
        if 0 in self.shape:  # an empty array has no bytes to map
            return np.zeros(self.shape, dtype=self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode=mode, shape=self.shape)


class SharedDir:
    """A private directory of mapped arrays, removed by :meth:`remove`."""

    def __init__(self, prefix: str = "turnout-"):
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.path = tempfile.mkdtemp(prefix=prefix, dir=base)
        self._count = 0

    def array(self, shape: tuple[int, ...], dtype, fill: np.ndarray | None = None) -> tuple[ArraySpec, np.ndarray]:
        """A new mapped array (a copy of ``fill`` when given), and its spec for other processes."""
        self._count += 1
        spec = ArraySpec(os.path.join(self.path, f"a{self._count}.bin"), np.dtype(dtype).str,
                         tuple(int(s) for s in shape))
        arr = spec.open("w+")
        if fill is not None and arr.size:
            arr[...] = fill
        return spec, arr

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


__all__ = ["ArraySpec", "SharedDir"]
