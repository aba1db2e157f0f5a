"""The synthetic trace generator reproduces the Stunner online-fraction calibration."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from turnout.core.errors import DataError
from turnout.traces import GeneratorConfig, generate_trace, load_calibration
from turnout.traces.generate import DAY_S, STUNNER_ONLINE, daily_online_fraction

#: The Stunner online-percentage histogram (GPL data, not shipped): set TURNOUT_STUNNER_FILE to check our summary of it
STUNNER = Path(os.environ.get("TURNOUT_STUNNER_FILE", "/nonexistent"))
N = 20_000


@pytest.fixture(scope="module")
def trace():
    return generate_trace(N, seed=7)


@pytest.fixture(scope="module")
def fractions(trace):
    return daily_online_fraction(trace)


def test_builtin_calibration_summary():
    assert STUNNER_ONLINE.zero_mass == pytest.approx(0.121, abs=0.001)
    assert STUNNER_ONLINE.mean() == pytest.approx(0.133, abs=0.002)


def test_schema_and_period(trace):
    assert trace.num_traces == N
    assert np.all(trace.period_s == 6 * DAY_S)  # FedScale's finish_time 518,400 s
    assert np.all(trace.start_s == np.round(trace.start_s)) and np.all(trace.end_s == np.round(trace.end_s))
    assert trace.num_intervals > N  # several sessions per client


def test_online_fraction_matches_calibration(fractions):
    f = fractions.ravel()
    assert f.mean() == pytest.approx(0.133, abs=0.02)  # mean within ±2 points
    assert (f == 0).mean() == pytest.approx(0.121, abs=0.03)  # zero mass within ±3 points
    # the whole distribution, against the built-in summary
    for q in (0.2, 0.5, 0.8, 0.9):
        assert np.quantile(f, q) == pytest.approx(float(STUNNER_ONLINE.quantile(q)), abs=0.02), q


@pytest.mark.skipif(not STUNNER.is_file(), reason="Stunner histogram not available here")
def test_against_the_real_histogram(fractions):
    cal = load_calibration(STUNNER)
    assert cal.zero_mass == pytest.approx(14006 / 115419)
    assert cal.mean() == pytest.approx(0.13285, abs=0.001)
    data = np.loadtxt(STUNNER, comments="#")
    pct, counts = data[:, 0], data[:, 1]
    cdf = np.cumsum(counts) / counts.sum()
    f = fractions.ravel() * 100
    for q in (0.25, 0.5, 0.75, 0.9, 0.95):
        real = pct[np.searchsorted(cdf, q)]  # the histogram bin holding the q-quantile
        assert abs(np.quantile(f, q) - real) <= 1.5, (q, np.quantile(f, q), real)
    # the built-in summary agrees with the real file
    for q in (0.1, 0.3, 0.5, 0.7, 0.9, 0.97, 0.99):
        tol = 0.005 if q <= 0.9 else 0.02  # linear between the summary's tail knots
        assert float(STUNNER_ONLINE.quantile(q)) == pytest.approx(float(cal.quantile(q)), abs=tol), q
    # generating from the file gives the same distribution
    g = daily_online_fraction(generate_trace(5000, 1, GeneratorConfig(calibration_path=str(STUNNER))))
    assert g.mean() == pytest.approx(0.133, abs=0.02)


def test_sessions_are_mostly_short_and_diurnal(trace):
    length = trace.end_s - trace.start_s
    assert np.median(length) < 3600  # most sessions last minutes
    hour = (trace.start_s % DAY_S) // 3600
    night = np.isin(hour, [0, 1, 2, 3]).mean()
    midday = np.isin(hour, [9, 10, 11, 12]).mean()
    assert night > 1.8 * midday  # starts concentrate at night (charging)
    flat = generate_trace(3000, 7, GeneratorConfig(diurnal_strength=0.0))
    h = (flat.start_s % DAY_S) // 3600
    assert np.isin(h, [0, 1, 2, 3]).mean() < 1.5 * np.isin(h, [9, 10, 11, 12]).mean()


def test_days_of_a_client_are_correlated(fractions):
    a, b = fractions[:, 0], fractions[:, 1]
    assert np.corrcoef(a, b)[0, 1] > 0.3
    ind = daily_online_fraction(generate_trace(5000, 7, GeneratorConfig(day_correlation=0.0)))
    assert abs(np.corrcoef(ind[:, 0], ind[:, 1])[0, 1]) < 0.1


def test_deterministic_per_seed_and_prefix_stable():
    a = generate_trace(3000, 11)
    b = generate_trace(3000, 11)
    c = generate_trace(3000, 12)
    assert np.array_equal(a.start_s, b.start_s) and np.array_equal(a.offsets, b.offsets)
    assert not np.array_equal(a.offsets, c.offsets)
    d = generate_trace(10, 11, GeneratorConfig(days=2))
    assert np.all(d.period_s == 2 * DAY_S) and d.end_s.max() <= 2 * DAY_S


def test_pinned_output_in_float32():
    """The trace of a seed is pinned (it did not change when times became float32 and chunks were
    built in blocks); whole seconds are held as float32, fractional ones as float64."""
    t = generate_trace(3000, 11)
    assert t.start_s.dtype == np.float32 and t.end_s.dtype == np.float32
    assert t.num_intervals == 63893 and int(t.offsets[1500]) == 32060
    assert int(t.start_s.astype(np.float64).sum()) == 16368746910
    assert int(t.end_s.astype(np.float64).sum()) == 16573402331
    frac = generate_trace(200, 11, GeneratorConfig(resolution_s=0))
    assert frac.start_s.dtype == np.float64 and not np.all(frac.start_s == np.round(frac.start_s))


def test_blocks_threads_and_chunks_layout(monkeypatch):
    """Blocks inside a chunk and the number of threads do not change the trace."""
    import turnout.traces.generate as gen

    cfg = GeneratorConfig(day_start_hour=0.0, day_start_jitter_h=0.0)  # days start at midnight
    monkeypatch.setattr(gen, "CHUNK", 700)
    monkeypatch.setattr(gen, "BLOCK", 700)
    monkeypatch.setattr(gen.os, "cpu_count", lambda: 1)
    ref = generate_trace(2000, 5, cfg)
    for block, cpus in ((3, 1), (64, 2), (333, 3)):
        monkeypatch.setattr(gen, "BLOCK", block)
        monkeypatch.setattr(gen.os, "cpu_count", lambda cpus=cpus: cpus)
        t = generate_trace(2000, 5, cfg)
        assert np.array_equal(t.offsets, ref.offsets) and np.array_equal(t.start_s, ref.start_s)
        assert np.array_equal(t.end_s, ref.end_s), (block, cpus)
    assert generate_trace(0, 5).num_traces == 0


def test_calibration_file_errors(tmp_path):
    bad = tmp_path / "h.out"
    bad.write_text("#@arppy\n0 10 0.1\nabc\n")
    with pytest.raises(DataError, match="line 3"):
        load_calibration(bad)
    with pytest.raises(DataError, match="not found"):
        load_calibration(tmp_path / "missing.out")
    zero = tmp_path / "z.out"
    zero.write_text("0 10\n")
    with pytest.raises(DataError, match="no positive counts"):
        load_calibration(zero)
    ok = tmp_path / "ok.out"
    ok.write_text("#c\n0 1 0.5\n50 1 0.5\n")
    cal = load_calibration(ok)
    assert cal.zero_mass == 0.5 and cal.mean() == pytest.approx(0.25, abs=1e-9)


def test_no_artifacts_at_day_boundaries(trace):
    """Online share is smooth through midnight and the clients' own day boundaries (around noon)."""
    hours = np.arange(0, 2 * 24 * 3600, 900.0)
    share = np.array([trace.is_online(None, t).mean() for t in hours])
    assert share.min() > 0.04 and share.max() < 0.3
    assert np.abs(np.diff(share)).max() < 0.02  # no jumps between quarter-hours
    for midnight in (DAY_S, 2 * DAY_S, 5 * DAY_S):
        around = [trace.is_online(None, midnight + dt).mean() for dt in (-60.0, 0.0, 60.0)]
        assert max(around) - min(around) < 0.02, around
    # sessions do continue across midnight
    crossing = (trace.start_s < DAY_S) & (trace.end_s > DAY_S)
    assert crossing.sum() > 0.01 * N
