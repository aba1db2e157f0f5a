"""A hardened ``.npz`` reader for trace files that may come from anywhere: the zip directory and every .npy
header are checked against limits (size, compression method, dtype, memory) before any data is decompressed,
and data is read in bounded chunks. Never unpickles anything."""

from __future__ import annotations

import io
import math
import os
import zipfile
from pathlib import Path

import numpy as np

from .validate import EXPECTED, FORMAT_VERSION, OPTIONAL, REQUIRED, TraceFileError, check_layout

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


def read_arrays(path: Path) -> dict[str, np.ndarray]:
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
