"""Hostile trace files and pickles: refused in one line, quickly, with bounded memory.

Every malicious file is built here, byte by byte where the writers would refuse to make it.
The ``*_through_the_cli`` tests run ``python -m turnout`` in a subprocess capped at
:data:`ADDRESS_SPACE` bytes, so that a regression fails instead of eating the machine.
"""

from __future__ import annotations

import io
import pickle
import re
import resource
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from turnout.core.errors import DataError
from turnout.traces import AvailabilityTrace, fedscale, load_trace, safe_npz, save_trace
from turnout.traces.fedscale import behavior_from_dict, capacity_from_dict, safe_unpickle
from turnout.traces.format import TraceError, TraceFileError

ROOT = Path(__file__).resolve().parents[2]
#: Address space of a CLI subprocess: enough for Python, numpy and torch, not for any bomb.
ADDRESS_SPACE = 3 << 30
GOOD = dict(offsets=np.array([0, 1, 3]), start_s=np.array([1.0, 0.0, 4.0]), end_s=np.array([2.0, 3.0, 6.0]),
            period_s=np.array([10.0, 8.0]))


# --- building zips and pickles ------------------------------------------------------------------

def npy(arr) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def npy_header(descr: str, shape: tuple) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def zeros_bomb(head: bytes, mib: int) -> bytes:
    """Raw deflate data of ``head`` then ``mib`` MiB of zeros, about 1 KB per MiB (made in
    milliseconds: one fully flushed 1 MiB block, repeated)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    return first + block * mib + zlib.compressobj(9, zlib.DEFLATED, -15).flush()


def member(name: str, data: bytes, *, method: int = 0, size: int | None = None, flags: int = 0,
           crc: int | None = None) -> tuple:
    """A zip member: ``data`` as stored (already compressed for ``method`` 8), declaring ``size``."""
    return name, data, method, len(data) if size is None else size, flags, zlib.crc32(data) if crc is None else crc


def write_zip(path: Path, members: list[tuple]) -> Path:
    """A zip archive written byte by byte, zip64 records throughout, declaring whatever the
    members say (the zipfile module would not write a lying size or an unknown method)."""
    out, central = bytearray(), bytearray()
    for name, data, method, size, flags, crc in members:
        n = name.encode()
        offset = len(out)
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 45, flags, method, 0, 0x21, crc,
                           0xFFFFFFFF, 0xFFFFFFFF, len(n), 20)
        out += n + struct.pack("<2H2Q", 1, 16, size, len(data)) + data
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45, 45, flags, method, 0, 0x21, crc,
                               0xFFFFFFFF, 0xFFFFFFFF, len(n), 28, 0, 0, 0, 0, 0xFFFFFFFF)
        central += n + struct.pack("<2H3Q", 1, 24, size, len(data), offset)
    cd_at = len(out)
    out += central
    end64 = len(out)
    out += struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, len(members), len(members), len(central), cd_at)
    out += struct.pack("<4sLQL", b"PK\x06\x07", 0, end64, 1)
    out += struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    path.write_bytes(bytes(out))
    return path


def good_members(**replace: tuple) -> list[tuple]:
    """The members of a small valid trace (stored), with some replaced by name."""
    return [replace.get(k, member(f"{k}.npy", npy(v))) for k, v in GOOD.items()]


def encrypted(tmp: Path) -> Path:
    return write_zip(tmp / "encrypted.npz", good_members(start_s=member("start_s.npy", npy(GOOD["start_s"]), flags=1)))


def unknown_method(tmp: Path) -> Path:
    return write_zip(tmp / "method.npz", good_members(end_s=member("end_s.npy", npy(GOOD["end_s"]), method=99)))


def huge_shape(tmp: Path) -> Path:
    data = npy_header("<f8", (10**12,)) + bytes(64)
    return write_zip(tmp / "shape.npz", good_members(start_s=member("start_s.npy", data)))


def zip_bomb(tmp: Path, *, consistent: bool = True) -> Path:
    """start_s (and end_s) declaring 5 GiB of zeros, honestly: a 5.3 MB file."""
    n = (5 << 30) // 8
    head = npy_header("<f8", (n,))
    bomb = member("start_s.npy", zeros_bomb(head, 5 << 10), method=8, size=len(head) + 8 * n, crc=0)
    end = member("end_s.npy", bomb[1], method=8, size=bomb[3], crc=0) if consistent else None
    return write_zip(tmp / "bomb.npz", good_members(start_s=bomb, **({"end_s": end} if end else {})))


def period_file(tmp: Path, period: float, name: str) -> Path:
    """One client online over its whole period (so that every lookup path is exercised)."""
    p = tmp / name
    np.savez_compressed(p, offsets=np.array([0, 1]), start_s=np.array([0.0]), end_s=np.array([period]),
                        period_s=np.array([period]))
    return p


def object_array(tmp: Path) -> Path:
    p = tmp / "object.npz"
    with open(p, "wb") as f:
        np.savez(f, **GOOD, model=np.array([{"x": 1}, None], dtype=object))
    return p


def list_bomb() -> bytes:
    """300 bytes: a field holding 2**40 references to one leaf, through 40 levels of sharing."""
    level = [0]
    for _ in range(40):
        level = [level, level]
    return pickle.dumps({1: {"active": [level], "inactive": [2], "finish_time": 10}})


def flat_list_bomb(levels: int = 40) -> bytes:
    """The same bomb with a constant stack: each level is a new list holding the previous one twice,
    fetched from the memo (no MARK, no nesting on the stack)."""
    ops = b"\x80\x02]q\x00"  # EMPTY_LIST, BINPUT 0
    for i in range(levels):
        ops += b"]" + b"h" + bytes([i]) + b"a" + b"h" + bytes([i]) + b"a" + b"q" + bytes([i + 1]) + b"0"
    return ops + b"h" + bytes([levels]) + b"."


def hash_bomb() -> bytes:
    """200 bytes: a dict keyed by 40 levels of shared tuples (hashing the key takes 2**40 steps)."""
    key = ()
    for _ in range(40):
        key = (key, key)
    inner = pickle.dumps(key, protocol=2)  # building the dict here would hash the key: splice it in
    return b"\x80\x02}" + inner[2:-1] + b"K\x01s."


def deep_value(depth: int = 100_000) -> bytes:
    """A behaviour entry whose active[0] is a list nested ``depth`` levels deep."""
    deep = b"]" * depth + b"a" * (depth - 1)
    return (b"\x80\x04}(K\x01}(\x8c\x06active" + deep + b"\x8c\x08inactive]K\x02a"
            b"\x8c\x0bfinish_timeK\nuu.")


class _ObjectFieldScalar:
    """Pickles as numpy's scalar reconstructor with a structured dtype holding an object field."""

    def __reduce__(self):
        from numpy._core.multiarray import scalar

        return scalar, (np.dtype([("a", "O")]), bytes(8))


class _ForgedDtype:
    """Pickles as ``numpy.dtype(spec, False, True)`` followed by ``state`` (BUILD), whatever the state says."""

    def __init__(self, spec: str, state: tuple):
        self.spec, self.state = spec, state

    def __reduce__(self):
        return np.dtype, (self.spec, False, True), self.state


class _ForgedScalar:
    def __init__(self, dtype: _ForgedDtype, data: bytes):
        self.dtype, self.data = dtype, data

    def __reduce__(self):
        from numpy._core.multiarray import scalar

        return scalar, (self.dtype, self.data)


def forged_scalar(spec: str, state: tuple, data: bytes = b"\x01" * 8) -> bytes:
    """A behaviour pickle whose active[0] is numpy's scalar of a dtype given a forged state (found by
    tests/fuzz: numpy's ``dtype.__setstate__`` trusts the state, and the scalar then crashes or reads
    outside its 8 bytes)."""
    return pickle.dumps(entry(_ForgedScalar(_ForgedDtype(spec, state), data)), protocol=4)


#: numpy's dtype state: (version, byte order, subarray, names, fields, item size, alignment, flags).
OBJECT_FIELD_STATE = (3, "|", None, ("a",), {"a": (np.dtype("O"), 0)}, 8, 1, 16)  # segfault
MISSING_FIELD_STATE = (3, "|", None, ("a", "b"), {"a": (np.dtype("f8"), 0)}, 8, 1, 16)  # segfault
OUTSIDE_FIELD_STATE = (3, "|", None, ("a",), {"a": (np.dtype("f8"), 100)}, 8, 1, 16)  # reads bytes 100-108 of 8


def entry(active) -> dict:
    return {1: {"active": [active], "inactive": [2], "finish_time": 10}}


# --- trace files, in-process --------------------------------------------------------------------

def refused(path, *needles) -> str:
    t0 = time.perf_counter()
    with pytest.raises(TraceFileError) as exc:
        load_trace(path)
    msg = str(exc.value)
    assert time.perf_counter() - t0 < 2.0, msg
    assert "\n" not in msg and str(path) in msg, msg
    for n in needles:
        assert n in msg, (n, msg)
    return msg


def test_encrypted_member(tmp_path):
    refused(encrypted(tmp_path), "member 'start_s.npy' is encrypted", "save it unencrypted")


@pytest.mark.parametrize("method", [99, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_compression_method_other_than_stored_or_deflated(tmp_path, method):
    p = write_zip(tmp_path / "m.npz", good_members(end_s=member("end_s.npy", npy(GOOD["end_s"]), method=method)))
    refused(p, f"member 'end_s.npy' uses zip compression method {method}", "stored or deflated")


def test_declared_shape_beyond_the_member_is_refused_before_allocating(tmp_path):
    refused(huge_shape(tmp_path), "member 'start_s.npy' is truncated or corrupt", "describes 8000000000000 bytes",
            "shape (1000000000000,)")


def test_zip_bomb_is_refused_from_the_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_npz, "_memory_available", lambda: 4 << 30)
    msg = refused(zip_bomb(tmp_path), "declares 10.7 GB of uncompressed arrays", "4.29 GB of memory available",
                  "free memory or use a smaller trace")
    assert "1.43 GB" in msg  # a third of the memory


def test_bomb_with_inconsistent_headers_is_refused_before_decompressing(tmp_path, monkeypatch):
    """Even where memory would allow it, the headers are checked against each other first."""
    monkeypatch.setattr(safe_npz, "_memory_available", lambda: 1 << 50)
    refused(zip_bomb(tmp_path, consistent=False), "arrays 'start_s' (671088640) and 'end_s' (3) differ in length")


def test_lying_sizes_never_decompress_past_the_declared_size(tmp_path):
    """A member declaring 3 floats whose deflate stream holds 5 GiB: reading stops at the declared
    size, and the checksum then tells the lie."""
    head = npy_header("<f8", (3,))
    lie = member("start_s.npy", zeros_bomb(head, 5 << 10), method=8, size=len(head) + 24, crc=0)
    refused(write_zip(tmp_path / "lie.npz", good_members(start_s=lie)), "truncated or corrupt", "CRC")


def test_huge_zip_directory_is_refused_before_zipfile_reads_it(tmp_path):
    p = save_trace(tmp_path / "t.npz", AvailabilityTrace.from_intervals([[(1, 2)]], 10))
    data = bytearray(p.read_bytes())
    assert data[-22:-18] == b"PK\x05\x06"
    data[-10:-6] = (1 << 30).to_bytes(4, "little")  # central directory size
    p.write_bytes(bytes(data))
    refused(p, "has a zip directory of 1073741824 bytes")


def test_members_that_are_not_npy_and_bad_format_version(tmp_path):
    p = write_zip(tmp_path / "text.npz", good_members(offsets=member("offsets.npy", b"hello world, no magic")))
    refused(p, "member 'offsets.npy' is not a .npy array")
    p = write_zip(tmp_path / "fv.npz", good_members() + [member("format_version.npy", npy(np.arange(10**5)))])
    refused(p, "has a format_version of dtype int64 and shape (100000,)")


def test_object_dtype_is_refused_from_the_header(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_npz, "_npy_data", None)  # never reached
    refused(object_array(tmp_path), "holds object arrays that need pickle")


@pytest.mark.parametrize("period, reason", [
    (5e-324, "is denormal"), (1e-300, "is below 1 second"), (0.5, "is below 1 second"),
    (float("inf"), "is not finite"), (float("nan"), "is not finite"), (-3.0, "is not positive"),
    (1e300, "is above 9.0072e+15 seconds"),
])
def test_insane_periods_are_refused(tmp_path, period, reason):
    refused(period_file(tmp_path, period, "p.npz"), f"period_s[0] = {period!r} {reason}",
            "expected a finite period > 0, from 1 to")
    with pytest.raises(TraceError, match=re.escape(reason)):
        AvailabilityTrace(np.array([0, 0]), np.zeros(0), np.zeros(0), np.array([period]))


def test_a_one_second_period_still_loads(tmp_path):
    tr = load_trace(period_file(tmp_path, 1.0, "p.npz"))
    assert tr.is_online(None, 12345.5).tolist() == [True]


@pytest.mark.parametrize("writer", ["save_trace", "save_trace_stored", "savez", "savez_compressed", "float64",
                                    "no_npy_suffix"])
def test_valid_files_read_exactly_as_np_load_reads_them(tmp_path, writer):
    rng = np.random.default_rng(1)
    ivs = [np.sort(rng.choice(np.arange(1, 999), 2 * k, replace=False)).reshape(-1, 2).astype(float)
           for k in rng.integers(0, 5, 300)]
    tr = AvailabilityTrace.from_intervals(ivs, 1000.0, model=[f"m{i % 7}" for i in range(300)])
    arrays = {"offsets": tr.offsets, "start_s": tr.start_s, "end_s": tr.end_s, "period_s": tr.period_s,
              "model": tr.model, "format_version": np.array(1)}
    p = tmp_path / "t.npz"
    if writer == "save_trace":
        save_trace(p, tr)
    elif writer == "save_trace_stored":
        save_trace(p, tr, compress_level=0)
    elif writer in ("savez", "savez_compressed"):
        getattr(np, writer)(p, **arrays)
    elif writer == "float64":
        np.savez_compressed(p, **{**arrays, "start_s": tr.start_s.astype(np.float64) + 0.1,
                                  "end_s": tr.end_s.astype(np.float64) + 0.1})
    else:
        with zipfile.ZipFile(p, "w") as z:
            for k, v in arrays.items():
                z.writestr(k, npy(v))
    got = safe_npz.read_arrays(p)
    with np.load(p, allow_pickle=False) as z:
        want = {k: z[k] for k in z.files}
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert got[k].tobytes() == want[k].tobytes(), k
    back = load_trace(p)
    for k in ("offsets", "period_s", "model"):
        assert np.array_equal(getattr(back, k), want[k])
    np.savez(p, **{**arrays, "start_s": tr.start_s.astype(">f4")})  # refused by dtype, as before
    refused(p, "array 'start_s' has dtype >f4, expected float64 or float32")


# --- pickles, in-process ------------------------------------------------------------------------

def pkl(tmp_path, data: bytes, name: str = "x.pkl") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def import_refused(path, *needles) -> str:
    t0 = time.perf_counter()
    with pytest.raises(DataError) as exc:
        fedscale.import_fedscale_behavior(path)
    msg = str(exc.value)
    assert time.perf_counter() - t0 < 2.0, msg
    assert "\n" not in msg and len(msg) < 400, msg
    for n in needles:
        assert n in msg, (n, msg)
    return msg


def test_list_bombs_are_refused(tmp_path):
    assert len(list_bomb()) < 400
    import_refused(pkl(tmp_path, list_bomb()), "was refused", "nested MARKs")
    import_refused(pkl(tmp_path, flat_list_bomb()), "was refused", "references one container from several places")


def test_hash_bomb_is_refused_before_load(tmp_path):
    assert len(hash_bomb()) < 250
    import_refused(pkl(tmp_path, hash_bomb()), "was refused", "references one container from several places")


@pytest.mark.parametrize("protocol", [2, 4])
def test_shared_sets_are_refused(tmp_path, protocol):
    """A set is a container whether built by EMPTY_SET/ADDITEMS or by calling set() (protocols <= 3)."""
    s = {1, 2}
    import_refused(pkl(tmp_path, pickle.dumps(entry([s, s]), protocol=protocol)),
                   "references one container from several places")


def test_deep_values_are_refused(tmp_path):
    import_refused(pkl(tmp_path, deep_value()), "was refused", "nests values 33 levels deep")


def test_string_reuse_bomb_is_refused(tmp_path):
    """One long string referenced from many two-byte memo GETs, each copied by numpy into a scalar."""
    def text(s: str) -> bytes:  # SHORT_BINUNICODE or BINUNICODE, then MEMOIZE
        b = s.encode()
        return (b"\x8c" + bytes([len(b)]) if len(b) < 256 else b"X" + struct.pack("<I", len(b))) + b + b"\x94"

    ops = b"\x80\x04" + text("numpy._core.multiarray") + text("scalar") + b"\x93\x94"  # memo 0, 1, 2
    ops += text("numpy") + text("dtype") + b"\x93\x94"  # memo 3, 4, 5
    ops += b"h\x05" + text("V1048576") + b"\x89\x88\x87\x94R\x94"  # dtype('V1048576'): memo 6, 7, 8
    ops += text("x" * (1 << 20))  # memo 9
    ops += b"](" + b"h\x02h\x08h\x09\x86R" * 5000 + b"e."
    import_refused(pkl(tmp_path, ops), "was refused", "re-uses", "characters through memo references")


@pytest.mark.parametrize("opcodes, name", [
    (b"\x80\x02cbuiltins\nset\n)\x81.", "NEWOBJ"),
    (b"(ibuiltins\nset\n.", "INST"),
    (b"\x80\x02\x82\x01.", "EXT1"),
    (b"Pfoo\n.", "PERSID"),
    (b"\x80\x02]2.", "DUP"),
])
def test_opcodes_plain_data_never_needs(tmp_path, opcodes, name):
    import_refused(pkl(tmp_path, opcodes), "was refused", name)


def test_huge_ints_and_odd_numbers_are_one_line(tmp_path):
    import_refused(pkl(tmp_path, pickle.dumps(entry(10**400))), "active[0] = <int of 1329 bits>", "finite numbers")
    import_refused(pkl(tmp_path, pickle.dumps(entry(np.zeros(1, dtype=[("a", "f8"), ("b", "i4")])[0]))),
                   "not a readable pickle (UnpicklingError: refused numpy dtype 'V12' (plain numbers and text only))")
    import_refused(pkl(tmp_path, pickle.dumps(entry(_ObjectFieldScalar()))), "refused numpy dtype 'V8'")
    behave = {1: {"active": [1], "inactive": [2], "finish_time": 10**400}}
    with pytest.raises(DataError, match=r"finish_time = <int of 1329 bits> is not a finite number"):
        behavior_from_dict(behave)
    for finish, reason in ((1e-300, "is below 1 second"), (5e-324, "is denormal"), (float("inf"), "not a finite")):
        with pytest.raises(DataError, match=reason):
            behavior_from_dict({1: {"active": [0], "inactive": [0], "finish_time": finish}})
    with pytest.raises(DataError, match=r"key must be an integer client id \(64-bit\)"):
        capacity_from_dict({10**400: {"computation": 1.0, "communication": 2.0}})
    with pytest.raises(DataError, match=r"computation = <int of 1329 bits>"):
        capacity_from_dict({1: {"computation": 10**400, "communication": 2.0}})


def test_forged_dtype_states_are_refused(tmp_path):
    """Only plain dtypes, with the state numpy writes for them (in either byte order), are rebuilt."""
    import_refused(pkl(tmp_path, forged_scalar("V8", OUTSIDE_FIELD_STATE)), "refused numpy dtype 'V8'")
    fields = (3, "<", None, ("a",), {"a": (np.dtype("f8"), 100)}, -1, -1, 0)  # a plain spec, a structured state
    import_refused(pkl(tmp_path, forged_scalar("f8", fields)), "refused numpy dtype state (3, '<', None, ('a',),")
    import_refused(pkl(tmp_path, forged_scalar("U3", (3, "<", None, None, None, 4, 4, 8), b"\x01" * 4)),
                   "refused numpy dtype state")  # U3 with the item size of U1: numpy's SystemError
    for data in (b"\x00\xd8\x00\x00", b"\x01\x01\x01\x01"):  # a surrogate, a code point beyond U+10FFFF
        import_refused(pkl(tmp_path, forged_scalar("U1", np.dtype("U1").__reduce__()[2], data)),
                       "not a readable pickle (UnicodeDecodeError")
    import_refused(pkl(tmp_path, forged_scalar("f8", np.dtype("f8").__reduce__()[2], b"\x01" * 9)),
                   "refused a numpy scalar that is not a plain number or text of its dtype's size")


def test_numpy_scalars_of_either_byte_order_still_import(tmp_path):
    behave = {1: {"active": [np.float64(2.0), np.dtype(">f8").type(4.0)], "inactive": [np.int32(3), np.uint16(5)],
                  "finish_time": np.array(10.0, ">f8")[()], "model": np.str_("SM-G960F")},
              2: {"active": [np.float32(1.5)], "inactive": [np.float16(2.5)], "finish_time": np.int64(10),
                  "model": np.array("Pixel", ">U5")[()]}}
    for protocol in (3, 4, 5):
        tr = fedscale.import_fedscale_behavior(pkl(tmp_path, pickle.dumps(behave, protocol=protocol)))
        assert tr.intervals(0).tolist() == [[2, 3], [4, 5]] and tr.intervals(1).tolist() == [[1.5, 2.5]]
        assert tr.period_s.tolist() == [10, 10] and tr.model.tolist() == ["SM-G960F", "Pixel"]


def test_long_values_are_shown_bounded(tmp_path):
    long = "m" * 10**6
    msg = str(pytest.raises(DataError, behavior_from_dict, {1: {"active": [0], "inactive": [1], "finish_time": 10,
                                                                "model": long}}).value)
    assert "at most 128 characters" in msg and len(msg) < 300
    msg = str(pytest.raises(DataError, behavior_from_dict, {long: [1]}).value)
    assert len(msg) < 300


def test_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(fedscale, "MAX_PICKLE_BYTES", 100)
    import_refused(pkl(tmp_path, list_bomb()), "more than the", "MB turnout imports")


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_pickles_of_every_protocol_still_import(tmp_path, protocol):
    behave = {7: {"duration": 3, "inactive": [5, 9], "finish_time": 100, "active": [3, 8], "model": "SM-G960F"},
              8: {"duration": 0, "inactive": [], "finish_time": 100, "active": [], "model": "SM-G960F"}}
    capacity = {1: {"computation": np.float64(3.5), "communication": 10.0},
                2: {"computation": np.float64(4.5), "communication": np.float32(20.0)}}
    tr = fedscale.import_fedscale_behavior(pkl(tmp_path, pickle.dumps(behave, protocol=protocol), "b.pkl"))
    assert tr.intervals(0).tolist() == [[3, 5], [8, 9]] and tr.model.tolist() == ["SM-G960F"] * 2
    if protocol >= 3:  # numpy scalars need bytes, which protocols 0-2 pickle through _codecs.encode
        table = fedscale.import_fedscale_capacity(pkl(tmp_path, pickle.dumps(capacity, protocol=protocol), "c.pkl"))
        assert table.computation_ms_per_sample.tolist() == [3.5, 4.5]
    sets = [{1, 2}, frozenset([3]), (1, "a")]  # protocols 0-2 name the set types __builtin__.set/frozenset
    assert safe_unpickle(pkl(tmp_path, pickle.dumps(sets, protocol=protocol), "s.pkl")) == sets


# --- through the CLI, in a capped subprocess ----------------------------------------------------

def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "turnout", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, preexec_fn=cap)
    proc.elapsed = time.perf_counter() - t0
    return proc


def assert_one_line(proc, *needles) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("turnout: error: "), proc.stderr[-2000:]
    assert len(proc.stderr) < 600, proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)
    assert proc.elapsed < 60, proc.elapsed


TRACE_CASES = {
    "encrypted": (encrypted, "is encrypted"),
    "unknown compression": (unknown_method, "uses zip compression method 99"),
    "shape 10**12": (huge_shape, "describes 8000000000000 bytes"),
    "5 GiB zip bomb": (zip_bomb, "declares 10.7 GB of uncompressed arrays"),
    "denormal period": (lambda t: period_file(t, 5e-324, "denormal.npz"), "is denormal"),
    "period 1e-300": (lambda t: period_file(t, 1e-300, "tiny.npz"), "is below 1 second"),
    "object dtype": (object_array, "holds object arrays that need pickle"),
}


@pytest.mark.parametrize("case", list(TRACE_CASES))
def test_hostile_trace_files_through_the_cli(tmp_path, case):
    make, needle = TRACE_CASES[case]
    path = make(tmp_path)
    cfg = {"name": "hostile", "seeds": [0], "rounds": 2,
           "data": {"name": "synthetic", "num_clients": 6, "alpha": 0.5, "beta": 0.5},
           "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
           "selector": {"name": "uniform", "clients_per_round": 1}, "output": {"progress": False, "plots": False},
           "availability": {"name": "trace", "path": str(path)}}
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    proc = run_cli("run", str(exp), "--out", str(run_dir), "--quiet")
    assert_one_line(proc, "availability.path", str(path), needle)
    assert not run_dir.exists() and not run_dir.with_name("run.partial").exists()


PICKLE_CASES = {
    "list bomb": ("behavior", list_bomb, "was refused"),
    "flat list bomb": ("behavior", flat_list_bomb, "references one container from several places"),
    "deep value": ("behavior", deep_value, "nests values 33 levels deep"),
    "10**400": ("behavior", lambda: pickle.dumps(entry(10**400)), "active[0] = <int of 1329 bits>"),
    "10**400 capacity": ("capacity", lambda: pickle.dumps({1: {"computation": 10**400, "communication": 1.0}}),
                         "computation = <int of 1329 bits>"),
    "structured scalar": ("capacity", lambda: pickle.dumps(entry(_ObjectFieldScalar())), "refused numpy dtype 'V8'"),
    "dtype state with an object field": ("behavior", lambda: forged_scalar("V8", OBJECT_FIELD_STATE),
                                         "refused numpy dtype 'V8'"),
    "dtype state naming a field it lacks": ("behavior", lambda: forged_scalar("V8", MISSING_FIELD_STATE),
                                            "refused numpy dtype 'V8'"),
    "hash bomb": ("behavior", hash_bomb, "references one container from several places"),
}


@pytest.mark.parametrize("case", list(PICKLE_CASES))
def test_hostile_pickles_through_the_cli(tmp_path, case):
    kind, make, needle = PICKLE_CASES[case]
    path = pkl(tmp_path, make(), "hostile.pkl")
    out = tmp_path / ("out.npz" if kind == "behavior" else "out.csv")
    proc = run_cli("trace", "import", str(path), "--kind", kind, "--out", str(out))
    assert_one_line(proc, str(path), needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.pkl"]  # nothing written
