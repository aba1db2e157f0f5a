"""FedGS availability modes: formulas (FedGS Table 1, as coded), frequencies, determinism, config errors."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats

from turnout.availability import AVAILABILITY
from turnout.config.components import validate_component
from turnout.core.errors import ConfigError
from turnout.world.context import WorldContext


def make_world(n_train=None, label_hist=None, seed=0, num_clients=None, rounds=100):
    if label_hist is None:
        n = num_clients if num_clients is not None else len(n_train)
        label_hist = np.ones((n, 10), dtype=np.int64)
    label_hist = np.asarray(label_hist)
    if n_train is None:
        n_train = label_hist.sum(axis=1)
    n_train = np.asarray(n_train, dtype=np.int64)
    return WorldContext(num_clients=len(n_train), n_train=n_train, label_hist=label_hist, seed=seed, rounds=rounds)


def build(raw, world):
    cls, cfg = validate_component(AVAILABILITY, raw, "availability")
    return cls(cfg, world)


def masks(av, rounds):
    return np.stack([av.available(r, 0.0) for r in range(rounds)])


def assert_frequencies(freq, p, rounds):
    """Per-client frequencies against p: every |z| < 4 and at least 95 % within 3σ."""
    sd = np.sqrt(np.maximum(p * (1 - p), 1e-12) / rounds)
    z = np.abs(freq - p) / sd
    assert z.max() < 4.0, (z.max(), freq, p)
    assert np.mean(z <= 3.0) >= 0.95


SIZES = np.array([774, 51, 159, 55, 80, 57, 117, 338, 53, 167, 97, 51, 59, 591, 55, 1088, 245, 83, 2143, 132,
                  140, 323, 395, 394, 75, 184, 113, 64, 602, 50])  # FedGS Synthetic(0.5,0.5) client sizes


# ------------------------------------------------------------------------------------------------
def test_idl_every_client_always_available():
    av = build({"name": "idl"}, make_world(SIZES))
    m = masks(av, 50)
    assert m.shape == (50, 30) and m.dtype == bool and m.all()
    assert np.all(np.isinf(av.online_until(np.arange(5), 3, 10.0)))


@pytest.mark.parametrize("name,beta,sign", [("mdf", 0.7, 1.0), ("ldf", 0.7, -1.0), ("ldf", 0.3, -1.0)])
def test_data_size_modes_formula_and_frequency(name, beta, sign):
    av = build({"name": name, "beta": beta}, make_world(SIZES, seed=3))
    x = SIZES.astype(float) ** (sign * beta)
    p = x / x.max()
    np.testing.assert_allclose(av.probabilities(0), p, rtol=1e-12)
    assert av.probabilities(0).max() == 1.0
    if name == "mdf":
        assert np.argmax(av.probabilities(0)) == np.argmax(SIZES)
        assert np.all(np.diff(av.probabilities(0)[np.argsort(SIZES)]) >= 0)
    else:
        assert np.all(np.diff(av.probabilities(0)[np.argsort(SIZES)]) <= 0)
    rounds = 2000
    m = masks(av, rounds)
    # Some client has p = 1, so no round is ever empty and FedGS's redraw never changes the law.
    assert m.any(axis=1).all()
    assert m[:, int(np.argmax(p))].all()
    assert_frequencies(m.mean(axis=0), p, rounds)


def test_beta_zero_is_ideal():
    for name in ("mdf", "ldf"):
        av = build({"name": name, "beta": 0.0}, make_world(SIZES))
        assert masks(av, 20).all()


def test_ymf_hand_built_label_hist():
    hist = np.zeros((5, 10), dtype=np.int64)
    hist[0, [0, 1]] = 5          # min label 0
    hist[1, [3, 7]] = [2, 9]     # min label 3
    hist[2, 9] = 4               # min label 9
    hist[3, [5, 6, 8]] = 1       # min label 5
    # client 4 holds nothing: treated as min label 0
    beta = 0.9
    av = build({"name": "ymf", "beta": beta}, make_world(label_hist=hist, n_train=[10, 11, 4, 3, 0]))
    expected = beta * np.array([0, 3, 9, 5, 0]) / 9 + (1 - beta)
    np.testing.assert_allclose(av.probabilities(0), expected, rtol=1e-12)
    np.testing.assert_allclose(av.probabilities(17), expected, rtol=1e-12)
    assert av.probabilities(0)[2] == pytest.approx(1.0)
    m = masks(av, 2000)
    assert m[:, 2].all()  # p = 1 ⇒ always online (hence never an empty round)
    assert_frequencies(m.mean(axis=0), expected, 2000)


def _yc_code_indicator(label_sets, num_labels, t):
    """The FedGS repo's YCycle loop, verbatim in spirit: float windows (lb/L, (lb+1)/L]."""
    T = 10 * num_labels
    r = 1.0 * (1 + t % T) / T
    return np.array([int(any(1.0 * lb / num_labels < r <= 1.0 * (lb + 1) / num_labels for lb in s))
                     for s in label_sets])


def test_yc_hand_built_label_hist():
    hist = np.zeros((4, 4), dtype=np.int64)
    hist[0, [0, 2]] = 1
    hist[1, 3] = 7
    hist[2, :] = 2
    beta = 0.9
    av = build({"name": "yc", "beta": beta}, make_world(label_hist=hist, n_train=[2, 7, 8, 0]))
    assert av.period == 40
    for t in range(120):
        y_star = (t % 40) // 10
        ind = np.array([y_star in (0, 2), y_star == 3, True, False])
        np.testing.assert_allclose(av.probabilities(t), np.where(ind, 1.0, 1 - beta), rtol=1e-12, atol=1e-15)
    # Clients 0 and 1 hold the current label in complementary windows; client 3 (no labels) stays at 1 − β.
    m = masks(av, 4000)
    t = np.arange(4000)
    on0 = np.isin((t % 40) // 10, [0, 2])
    assert m[on0, 0].all() and m[:, 2].all()
    assert abs(m[~on0, 0].mean() - (1 - beta)) < 4 * np.sqrt(beta * (1 - beta) / (~on0).sum())
    assert abs(m[:, 3].mean() - (1 - beta)) < 4 * np.sqrt(beta * (1 - beta) / 4000)


@pytest.mark.parametrize("num_labels", [3, 7, 10])
def test_yc_integer_window_matches_code_float_test(num_labels):
    rng = np.random.default_rng(num_labels)
    hist = (rng.random((40, num_labels)) < 0.3).astype(np.int64)
    av = build({"name": "yc", "beta": 1.0}, make_world(label_hist=hist, n_train=np.full(40, 5)))
    sets = [set(np.flatnonzero(row)) for row in hist]
    for t in range(3 * 10 * num_labels):
        np.testing.assert_array_equal(av.indicator(t).astype(int), _yc_code_indicator(sets, num_labels, t))


def test_yc_flgo_variant():
    hist = np.zeros((3, 10), dtype=np.int64)
    hist[0, [2, 5]] = 1   # window [2/9, 5/9]
    hist[1, [0, 9]] = 1   # window [0, 1]
    hist[2, 8] = 1        # window [8/9, 8/9]
    av = build({"name": "yc", "beta": 0.5, "variant": "flgo"}, make_world(label_hist=hist, n_train=[2, 2, 1]))
    assert av.period == 24
    for t in range(48):
        r = (1 + t % 24) / 24
        exp = np.array([2 / 9 <= r <= 5 / 9, True, 8 / 9 <= r <= 8 / 9])
        np.testing.assert_array_equal(av.indicator(t), exp)
        np.testing.assert_allclose(av.probabilities(t), np.where(exp, 1.0, 0.5))


def test_ln_formula():
    beta = 0.5
    n = 200_000
    av = build({"name": "ln", "beta": beta}, make_world(num_clients=n, n_train=np.full(n, 10)))
    p = av.probabilities(0)
    assert p.max() == 1.0 and p.min() > 0
    sigma = -np.log(1 - beta - 1e-6)
    # log p = log c − max log c: a normal sample with standard deviation σ, shifted.
    assert np.std(np.log(p)) == pytest.approx(sigma, rel=0.01)
    assert stats.kstest(np.log(p) - np.log(p).mean(), "norm", args=(0, sigma)).pvalue > 1e-4
    np.testing.assert_array_equal(av.probabilities(0), av.probabilities(99))  # static


def test_ln_frequency_and_sln_formula():
    beta = 0.5
    world = make_world(SIZES, seed=11)
    ln = build({"name": "ln", "beta": beta}, world)
    sln = build({"name": "sln", "beta": beta}, world)
    q = ln.probabilities(0)
    np.testing.assert_array_equal(sln.q, q)  # SLN's q_i is LN's p_i for the same seed and β
    theta = np.linspace(0, 2 * np.pi, 24)
    for t in range(60):
        np.testing.assert_allclose(sln.probabilities(t), (0.4 * np.sin(theta[t % 24]) + 0.5) * q, rtol=1e-12)
    assert sln.probabilities(5)[np.argmax(q)] == pytest.approx(0.4 * np.sin(2 * np.pi * 5 / 23) + 0.5)
    paper = build({"name": "sln", "beta": beta, "variant": "paper"}, world)
    np.testing.assert_allclose(paper.probabilities(3), (0.4 * np.sin(2 * np.pi * 4 / 24) + 0.5) * q, rtol=1e-12)
    m = masks(ln, 2000)
    assert_frequencies(m.mean(axis=0), q, 2000)


def test_resample_empty_conditions_on_nonempty():
    # Three clients with min label 0 under YMF-0.95: p = 0.05 each, P(empty) = 0.95³ ≈ 0.857.
    hist = np.zeros((3, 10), dtype=np.int64)
    hist[:, 0] = 1
    world = make_world(label_hist=hist, n_train=[1, 1, 1], seed=5)
    rounds = 4000
    on = masks(build({"name": "ymf", "beta": 0.95}, world), rounds)
    assert on.any(axis=1).all()
    p = 0.05
    cond = p / (1 - (1 - p) ** 3)  # P(i online | someone online) ≈ 0.3506
    assert_frequencies(on.mean(axis=0), np.full(3, cond), rounds)
    off = masks(build({"name": "ymf", "beta": 0.95, "resample_empty": False}, world), rounds)
    assert not off.any(axis=1).all()
    assert_frequencies(off.mean(axis=0), np.full(3, p), rounds)
    # Rounds that were not empty are left exactly as drawn.
    keep = off.any(axis=1)
    np.testing.assert_array_equal(on[keep], off[keep])
    # β = 1 and every client's smallest label is 0 ⇒ p = 0 for all: empty, without hanging.
    zero = build({"name": "ymf", "beta": 1.0}, world)
    assert not masks(zero, 5).any()


@pytest.mark.parametrize("raw", [{"name": "mdf"}, {"name": "ldf"}, {"name": "ymf"}, {"name": "yc"},
                                 {"name": "ln"}, {"name": "sln"}])
def test_deterministic_per_seed_and_round(raw):
    hist = np.random.default_rng(0).integers(0, 3, (300, 10))
    n_train = hist.sum(axis=1) + 1
    a = build(raw, make_world(n_train, hist, seed=7))
    b = build(raw, make_world(n_train, hist, seed=7))
    c = build(raw, make_world(n_train, hist, seed=8))
    fwd = masks(a, 30)
    rev = np.stack([b.available(r, 123.0) for r in reversed(range(30))])[::-1]  # call order does not matter
    np.testing.assert_array_equal(fwd, rev)
    assert not np.array_equal(fwd, masks(c, 30))


@pytest.mark.parametrize("raw,key", [
    ({"name": "ldf", "beta": -0.1}, "availability.beta"),
    ({"name": "mdf", "beta": -1}, "availability.beta"),
    ({"name": "ymf", "beta": 1.5}, "availability.beta"),
    ({"name": "yc", "beta": -0.2}, "availability.beta"),
    ({"name": "yc", "variant": "cycle"}, "availability.variant"),
    ({"name": "ln", "beta": 1.0}, "availability.beta"),
    ({"name": "ln", "beta": 0.9999995}, "availability.beta"),
    ({"name": "sln", "beta": 1.2}, "availability.beta"),
    ({"name": "idl", "beta": 0.5}, "availability.beta"),
    ({"name": "ldf", "alpha": 0.5}, "availability.alpha"),
])
def test_bad_parameters_name_the_key(raw, key):
    with pytest.raises(ConfigError) as exc:
        validate_component(AVAILABILITY, raw, "availability")
    assert exc.value.key == key
    assert key in str(exc.value)


def test_vectorised_at_a_million_clients():
    n = 1_000_000
    rng = np.random.default_rng(0)
    hist = rng.integers(0, 4, (n, 10)).astype(np.int32)
    world = make_world(rng.integers(1, 1000, n), hist)
    for raw in ({"name": "ldf"}, {"name": "yc"}, {"name": "sln"}):
        av = build(raw, world)
        av.available(0, 0.0)
        t0 = time.perf_counter()
        for r in range(1, 4):
            m = av.available(r, 0.0)
        per_call = (time.perf_counter() - t0) / 3
        assert m.shape == (n,)
        assert per_call < 0.25, (raw, per_call)  # milliseconds in practice; a Python loop takes seconds
