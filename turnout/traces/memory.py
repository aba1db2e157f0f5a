"""Giving memory that big NumPy builds freed back to the OS (the generator's and the sweep index's)."""

from __future__ import annotations

_TRIM = None


def trim_heap() -> None:
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
