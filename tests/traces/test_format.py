"""turnout's availability-trace format: exact lookups, periodicity, safe and validated files."""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest

from turnout.core.errors import DataError
from turnout.traces import AvailabilityTrace, load_trace, save_trace
from turnout.traces.format import TraceError, TraceFileError


def brute_online(trace: AvailabilityTrace, c: int, t: float) -> bool:
    tau = t % trace.period_s[c]
    return any(s <= tau <= e for s, e in trace.intervals(c))


def brute_until(trace: AvailabilityTrace, c: int, t: float) -> float:
    """Walk forward interval by interval (closed intervals, periodic)."""
    if not brute_online(trace, c, t):
        return t
    p = trace.period_s[c]
    iv = trace.intervals(c)
    if len(iv) == 1 and iv[0, 0] == 0 and iv[0, 1] == p:
        return np.inf
    tau = t % p
    k = next(i for i, (s, e) in enumerate(iv) if s <= tau <= e)
    until = t + (iv[k, 1] - tau)
    if iv[k, 1] == p and iv[0, 0] == 0:
        until += iv[0, 1]
    return until


def random_trace(rng, n=60, period=1000.0, max_k=6, integer=True) -> AvailabilityTrace:
    ivs = []
    for _ in range(n):
        k = rng.integers(0, max_k + 1)
        pts = np.sort(rng.choice(np.arange(1, int(period)), size=2 * k, replace=False)).astype(float)
        if not integer:
            pts = np.sort(rng.uniform(0, period, 2 * k))
        iv = pts.reshape(-1, 2)
        if k and rng.random() < 0.2:
            iv[0, 0] = 0.0
        if k and rng.random() < 0.2:
            iv[-1, 1] = period
        ivs.append(iv)
    return AvailabilityTrace.from_intervals(ivs, period)


def test_example_lookup_and_periodicity():
    tr = AvailabilityTrace.from_intervals([[(10, 20), (50, 60)], [], [(0, 100)], [(0, 5), (90, 100)]], 100)
    c = np.array([0, 1, 2, 3])
    assert tr.is_online(c, 10).tolist() == [True, False, True, False]  # closed at the start
    assert tr.is_online(c, 5).tolist() == [False, False, True, True]
    assert tr.is_online(c, 20).tolist() == [True, False, True, False]  # closed at the end
    assert tr.is_online(c, 20.5).tolist() == [False, False, True, False]
    assert tr.is_online(c, 315).tolist() == [True, False, True, False]  # 315 mod 100 = 15
    assert tr.is_online(c, 395).tolist() == [False, False, True, True]
    assert tr.is_online([0], 1015.0).tolist() == [True]
    u = tr.online_until(c, 215.0)
    assert u[0] == 220.0 and u[1] == 215.0 and np.isinf(u[2]) and u[3] == 215.0
    # interval [90, 100] continues into [0, 5] of the next period
    assert tr.online_until([3], 95.0)[0] == 105.0
    assert tr.online_until([3], 2.0)[0] == 5.0


@pytest.mark.parametrize("integer", [True, False])
def test_exact_lookup_matches_brute_force(integer):
    rng = np.random.default_rng(3)
    tr = random_trace(rng, integer=integer)
    clients = np.arange(tr.num_traces)
    times = np.concatenate([rng.uniform(0, 5000, 60), tr.start_s[:20], tr.end_s[:20],
                            tr.start_s[:10] + 3 * 1000.0, [0.0, 999.999, 1000.0]])
    for t in times:
        got = tr.is_online(clients, t)
        want = np.array([brute_online(tr, c, t) for c in clients])
        assert np.array_equal(got, want), t
        assert np.array_equal(tr.search_online(clients, t), want)
        until = tr.online_until(clients, t)
        want_u = np.array([brute_until(tr, c, t) for c in clients])
        assert np.allclose(until, want_u, rtol=0, atol=1e-9) or np.array_equal(until, want_u), t


def test_key_search_matches_bisection():
    """Large stateless queries on a trace with several periods use global float keys; small ones
    bisect: both exact and equal. A single-period trace never builds the keys (it has the sweep)."""
    rng = np.random.default_rng(11)
    one = random_trace(rng, n=6000, period=86400.0, max_k=10, integer=False)
    c = np.arange(one.num_traces)
    assert one._locate(c, 5000.0)[0] is not None and one._keys is False
    periods = np.where(c % 2 == 0, 86400.0, 90000.0)
    tr = AvailabilityTrace(one.offsets, one.start_s, one.end_s, periods)
    for t in np.concatenate([rng.uniform(0, 3e5, 20), tr.start_s[:5], tr.end_s[:5]]):
        tau = t % 86400.0
        j1, f1 = tr._locate(c, tau)
        j2, f2 = tr._bisect(c, tau)
        assert tr._keys is not None and tr._keys is not False  # the key path was taken
        assert np.array_equal(f1, f2) and np.array_equal(j1[f1], j2[f2]), t
        small = rng.choice(tr.num_traces, 50)
        assert np.array_equal(tr.search_online(small, t), tr.search_online(c, t)[small])


@pytest.mark.parametrize("integer", [True, False])
def test_sweep_matches_search_over_a_long_walk(integer):
    """The incremental all-clients path equals the stateless search, forward, backward and across
    wraps (float32 times when whole seconds, float64 otherwise)."""
    rng = np.random.default_rng(5)
    tr = random_trace(rng, n=400, period=1000.0, max_k=8, integer=integer)
    assert tr.start_s.dtype == (np.float32 if integer else np.float64)
    t = 0.0
    steps = np.concatenate([rng.uniform(0, 40, 150), rng.uniform(-300, 300, 50), rng.uniform(0, 3000, 20)])
    exact = np.concatenate([tr.start_s, tr.end_s])
    for i, dt in enumerate(steps):
        t = max(0.0, t + dt)
        if i % 3 == 0:  # land exactly on an interval start or end (closed-interval edge cases)
            t = float(rng.choice(exact)) + 1000.0 * rng.integers(0, 4)
        assert np.array_equal(tr.is_online(None, t), tr.search_online(None, t)), t
        sub = rng.choice(tr.num_traces, 300)
        assert np.array_equal(tr.is_online(sub, t), tr.search_online(sub, t)), t


def test_float_key_ties_are_resolved_exactly():
    # Many clients and sub-ulp gaps: keys round, the exact re-check must still be right.
    n = 200_000
    period = 518400.0
    starts = np.full(n, period - 2.0)
    periods = np.full(n, period)
    periods[-1] = 2 * period  # not one period for all: large queries use the global keys
    trace = AvailabilityTrace(np.arange(n + 1), starts, starts + 1e-6, periods)
    c = np.arange(n)
    tau = np.nextafter(period - 2.0, 0.0)  # just before every start: offline
    assert not trace.search_online(c, tau).any()
    assert trace._keys is not None and trace._keys is not False
    assert trace.search_online(c, period - 2.0).all()
    assert not trace.search_online(c, period - 2.0 + 2e-6).any()


def vector_brute_online(trace: AvailabilityTrace, t: float) -> np.ndarray:
    """The interval test over every interval at once, in float64 (independent of the lookups)."""
    owner = np.repeat(np.arange(trace.num_traces), trace.counts())
    tau = np.mod(t, trace.period_s)[owner]
    inside = (trace.start_s.astype(np.float64) <= tau) & (tau <= trace.end_s.astype(np.float64))
    return np.bincount(owner, weights=inside, minlength=trace.num_traces) > 0


def test_times_are_float32_exactly_when_lossless():
    whole = AvailabilityTrace.from_intervals([[(1, 2), (5, 9)], [(0, 10)]], 10)
    assert whole.start_s.dtype == np.float32 and whole.end_s.dtype == np.float32
    assert whole.intervals(0).dtype == np.float64 and whole.intervals(0).tolist() == [[1, 2], [5, 9]]
    assert AvailabilityTrace.from_intervals([[(0.1, 0.2)]], 1).start_s.dtype == np.float64  # 0.1 is not a float32
    big = AvailabilityTrace.from_intervals([[(0, 2.0**25 + 1)]], 2.0**26)  # whole seconds past 2**24: not exact
    assert big.end_s.dtype == np.float64 and big.end_s[0] == 2.0**25 + 1
    half = AvailabilityTrace.from_intervals([[(0.5, 1.25)]], 10)  # binary fractions are exact
    assert half.start_s.dtype == np.float32
    # float32 input is kept as it is; arithmetic helpers widen
    f32 = AvailabilityTrace(np.array([0, 1]), np.array([3.0], np.float32), np.array([7.5], np.float32),
                            np.array([10.0]))
    assert f32.start_s.dtype == np.float32 and f32.online_seconds().tolist() == [4.5]
    with pytest.raises(TraceError, match="NaN"):
        AvailabilityTrace(np.array([0, 1]), np.array([np.nan]), np.array([1.0]), np.array([10.0]))


@pytest.mark.parametrize("periods", ["one", "several"])
def test_float32_times_answer_exactly(periods):
    """Float32 times are compared in float64 on every path (sweep, bisection, global keys), so a
    query time that float32 cannot tell from an interval edge is still answered exactly."""
    rng = np.random.default_rng(4)
    n = 5000
    base = random_trace(rng, n=n, period=1000.0, max_k=5)
    per = np.full(n, 1000.0) if periods == "one" else np.where(np.arange(n) % 2 == 0, 1000.0, 2000.0)
    tr = AvailabilityTrace(base.offsets, base.start_s, base.end_s, per)
    assert tr.start_s.dtype == np.float32
    c = np.arange(n)
    edges = np.concatenate([tr.start_s[:15], tr.end_s[:15]]).astype(np.float64)
    small = c[::97]
    for t in np.concatenate([edges - 1e-6, edges, edges + 1e-6, edges + 2000.0 + 1e-6]):
        want = vector_brute_online(tr, t)
        assert np.array_equal(tr.is_online(None, t), want), t  # sweep (one period) or search
        assert np.array_equal(tr.search_online(c, t), want), t  # bisection or global keys
        assert np.array_equal(tr.is_online(small, t), want[small]), t
        until = tr.online_until(small, t)
        assert np.array_equal(until, [brute_until(tr, i, t) for i in small]), t
    assert (tr._keys is False) == (periods == "one")


def test_save_load_roundtrip(tmp_path):
    tr = AvailabilityTrace.from_intervals([[(1, 2.5)], [(0, 3), (4, 6)]], [10, 8], model=["CPH1801", "SM-G960F"])
    p = save_trace(tmp_path / "t.npz", tr)
    back = load_trace(p)
    for name in ("offsets", "start_s", "end_s", "period_s", "model"):
        assert np.array_equal(getattr(back, name), getattr(tr, name))
    # exactly the given name, no ".npz" appended
    p2 = save_trace(tmp_path / "noext", tr)
    assert p2.name == "noext" and p2.is_file()
    assert load_trace(p2).num_traces == 2


def test_float32_files(tmp_path):
    """Files may hold float32 times (save_trace writes what the trace holds); float64 files load
    as before, narrowed in memory when that is lossless."""
    tr = AvailabilityTrace.from_intervals([[(1, 2)], [(0, 3), (4, 6)]], [10, 8])
    back = load_trace(save_trace(tmp_path / "t.npz", tr))
    with np.load(tmp_path / "t.npz") as z:
        assert z["start_s"].dtype == np.float32 and z["end_s"].dtype == np.float32
    assert back.start_s.dtype == np.float32 and np.array_equal(back.end_s, tr.end_s)
    mixed = write_npz(tmp_path / "mixed.npz", **{**GOOD, "start_s": GOOD["start_s"].astype(np.float32)})
    assert load_trace(mixed).start_s.dtype == np.float32
    frac = write_npz(tmp_path / "frac.npz", **{**GOOD, "end_s": np.array([2.1, 3.0, 6.0])})
    got = load_trace(frac)
    assert got.end_s.dtype == np.float64 and got.end_s[0] == 2.1
    bad = write_npz(tmp_path / "f16.npz", **{**GOOD, "start_s": GOOD["start_s"].astype(np.float16)})
    with pytest.raises(TraceFileError, match="dtype float16, expected float64 or float32"):
        load_trace(bad)


def write_npz(path, **arrays):
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)
    return path


GOOD = dict(offsets=np.array([0, 1, 3]), start_s=np.array([1.0, 0.0, 4.0]), end_s=np.array([2.0, 3.0, 6.0]),
            period_s=np.array([10.0, 8.0]))


@pytest.mark.parametrize("change, needle", [
    (dict(offsets=None), "lacks array(s) offsets"),
    (dict(start_s=np.array([1, 0, 4])), "dtype int64, expected float64"),
    (dict(offsets=np.array([0, 1, 3], np.int32)), "expected int64"),
    (dict(period_s=np.array([[10.0, 8.0]])), "expected a 1-D array"),
    (dict(offsets=np.array([0, 3, 3])), "intervals of client 0 are unsorted or overlap"),
    (dict(offsets=np.array([0, 2])), "expected len(period_s) + 1"),
    (dict(offsets=np.array([0, 1, 2])), "must start at 0 and end at the number of intervals"),
    (dict(offsets=np.array([0, 2, 1, 3]), period_s=np.array([10.0, 8.0, 8.0])), "not monotone"),
    (dict(start_s=np.array([1.0, 4.0, 0.0]), end_s=np.array([2.0, 6.0, 3.0])), "unsorted or overlap"),
    (dict(start_s=np.array([1.0, 0.0, 3.0])), "unsorted or overlap"),  # touching closed intervals
    (dict(end_s=np.array([2.0, 3.0, 9.0])), "expected 0 <= start < period"),
    (dict(start_s=np.array([-1.0, 0.0, 4.0])), "expected 0 <= start < period"),
    (dict(end_s=np.array([0.5, 3.0, 6.0])), "start <= end"),
    (dict(period_s=np.array([10.0, 0.0])), "expected a finite period > 0"),
    (dict(start_s=np.array([np.nan, 0.0, 4.0])), "NaN"),
    (dict(model=np.array(["a"])), "array 'model' has 1 entries"),
    (dict(model=np.array([1, 2])), "expected 1-D unicode"),
    (dict(format_version=np.array(99)), "format_version"),
])
def test_malformed_arrays_are_one_line_errors(tmp_path, change, needle):
    arrays = {**GOOD, **change}
    arrays = {k: v for k, v in arrays.items() if v is not None}
    p = write_npz(tmp_path / "bad.npz", **arrays)
    with pytest.raises(TraceFileError) as exc:
        load_trace(p)
    msg = str(exc.value)
    assert needle in msg and "bad.npz" in msg and "\n" not in msg, msg


def test_object_arrays_are_never_unpickled(tmp_path):
    p = tmp_path / "obj.npz"
    with open(p, "wb") as f:
        np.savez(f, **GOOD, model=np.array([{"x": 1}, None], dtype=object))
    with pytest.raises(TraceFileError, match="need pickle"):
        load_trace(p)


def test_truncated_and_corrupt_files(tmp_path):
    tr = AvailabilityTrace.from_intervals([[(1, 2)]] * 50, 10)
    p = save_trace(tmp_path / "t.npz", tr)
    data = p.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFileError, match="truncated or corrupt"):
        load_trace(tmp_path / "trunc.npz")
    corrupt = bytearray(data)
    for i in range(60, min(len(corrupt) - 120, 200)):
        corrupt[i] ^= 0xFF
    (tmp_path / "corrupt.npz").write_bytes(bytes(corrupt))
    with pytest.raises(DataError):
        load_trace(tmp_path / "corrupt.npz")
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(TraceFileError, match="is empty"):
        load_trace(tmp_path / "empty.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(TraceFileError, match="not a .npz"):
        load_trace(tmp_path / "text.npz")
    np.save(tmp_path / "a.npy", np.arange(3))
    with pytest.raises(TraceFileError, match="single .npy"):
        load_trace(tmp_path / "a.npy")
    with pytest.raises(TraceFileError, match="not found"):
        load_trace(tmp_path / "missing.npz")
    with zipfile.ZipFile(tmp_path / "other.npz", "w") as z:
        z.writestr("readme.txt", "x")
    with pytest.raises(TraceFileError, match="lacks array"):
        load_trace(tmp_path / "other.npz")


def test_pickles_are_detected_not_loaded(tmp_path):
    p = tmp_path / "client_behave_trace"
    p.write_bytes(pickle.dumps({1: {"active": [1], "inactive": [2], "finish_time": 10}}, protocol=4))
    with pytest.raises(TraceFileError) as exc:
        load_trace(p)
    assert "is a Python pickle" in str(exc.value)
    assert "turnout trace import FILE.pkl --out FILE.npz" in str(exc.value)
    p0 = tmp_path / "old.pkl"
    p0.write_bytes(pickle.dumps([1, 2], protocol=0))  # protocol 0 has no \x80 header: named by suffix
    with pytest.raises(TraceFileError, match="is a Python pickle"):
        load_trace(p0)


def test_in_memory_validation_and_readonly():
    with pytest.raises(TraceError, match="overlap"):
        AvailabilityTrace.from_intervals([[(0, 5), (3, 6)]], 10)
    tr = AvailabilityTrace.from_intervals([[(0, 5)]], 10)
    with pytest.raises(ValueError):
        tr.start_s[0] = 1.0
    with pytest.raises(IndexError):
        tr.is_online([1], 0.0)


def test_subset_and_online_seconds():
    tr = AvailabilityTrace.from_intervals([[(1, 2)], [], [(0, 3), (4, 6)]], [10, 10, 8])
    s = tr.subset([2, 0, 2, 1])
    assert s.counts().tolist() == [2, 1, 2, 0]
    assert s.period_s.tolist() == [8, 10, 8, 10]
    assert s.online_seconds().tolist() == [5.0, 1.0, 5.0, 0.0]
    assert tr.fedscale_dict_entry(2) == {"duration": 5, "inactive": [3, 6], "finish_time": 8,
                                         "active": [0, 4], "model": "unknown"}
