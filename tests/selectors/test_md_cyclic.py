"""MD sampling (FedProx / FedGS MDSample) and the cyclic selectors (FedSUM Cases 3–4, FedSUM §2.1)."""

import math
import time

import numpy as np
import pytest
from pydantic import ValidationError

from turnout.core import rng as rngmod
from turnout.selectors.base import SELECTORS, SelectionContext
from turnout.selectors.cyclic import CyclicSelector, ReshuffledCyclicSelector
from turnout.selectors.md import MDSelector
from turnout.world.context import WorldContext


def world(n, n_train=None, rounds=100):
    return WorldContext(num_clients=n, n_train=np.full(n, 50) if n_train is None else np.asarray(n_train),
                        label_hist=np.zeros((n, 2)), seed=0, rounds=rounds)


def ctx(w, r, available=None, launch=10):
    avail = np.arange(w.num_clients) if available is None else np.asarray(available, dtype=np.int64)
    return SelectionContext(round=r, time_s=0.0, available=avail, launch=launch,
                            rng=rngmod.stream(0, "selection", r), world=w, availability=None,
                            probe_loss=None)


def make(cls, w, **kw):
    return cls(cls.Config(**kw), w)


# -- MD -----------------------------------------------------------------------------------------
def test_md_draws_are_proportional_to_data_size():
    n = 20
    n_train = np.arange(1, n + 1) * 10
    w = world(n, n_train)
    sel = make(MDSelector, w, clients_per_round=10)
    draws = np.zeros(n)
    rounds = 3000
    for r in range(rounds):
        c = sel.select(ctx(w, r))
        assert c.normalize and c.weights.sum() == 10 and len(np.unique(c.clients)) == len(c.clients)
        assert c.target == len(c.clients)
        draws[c.clients] += c.weights
    p = n_train / n_train.sum()
    expected = p * 10 * rounds
    assert np.all(np.abs(draws - expected) < 5 * np.sqrt(expected))


def test_md_uniform_average_over_draws_is_unbiased():
    n, k = 30, 5
    gen = np.random.default_rng(1)
    n_train = gen.integers(1, 80, n)
    v = gen.normal(size=(n, 2)) + 1.0
    w = world(n, n_train)
    sel = make(MDSelector, w, clients_per_round=k)
    est = []
    for r in range(3000):
        c = sel.select(ctx(w, r, launch=k))
        est.append((c.weights / c.weights.sum()) @ v[c.clients])  # what the server computes when all report
    est = np.array(est)
    want = (n_train / n_train.sum()) @ v
    assert np.all(np.abs(est.mean(0) - want) < 4.5 * est.std(0) / np.sqrt(len(est)))


def test_md_absolute_weights_and_overcommitment():
    w = world(50)
    sel = make(MDSelector, w, clients_per_round=10, normalize=False)
    c = sel.select(ctx(w, 0, launch=13))
    assert not c.normalize and c.weights.sum() == pytest.approx(1.0)
    assert c.target <= len(c.clients) <= 13
    # the target is the number of distinct clients among the first K draws
    sel2 = make(MDSelector, w, clients_per_round=10)
    c2 = sel2.select(ctx(w, 0, launch=13))
    assert c2.weights.sum() == 13 and c2.target <= 10


def test_md_availability_edges():
    w = world(50)
    sel = make(MDSelector, w, clients_per_round=10)
    few = np.array([4, 9, 33])
    c = sel.select(ctx(w, 0, few))
    assert set(c.clients) <= set(few) and c.weights.sum() == 10  # with replacement: K draws from 3 clients
    empty = sel.select(ctx(w, 1, []))
    assert len(empty.clients) == 0 and empty.target == 0
    zero = world(5, np.zeros(5, int))  # no data anywhere: uniform draws instead of a division by zero
    assert len(make(MDSelector, zero, clients_per_round=3).select(ctx(zero, 0, launch=3)).clients) >= 1
    with pytest.raises(ValidationError):
        MDSelector.Config(clients_per_round=0)


# -- cyclic ---------------------------------------------------------------------------------------
def tau_max(selections, n):
    """FedSUM τ_max over rounds 0..T−1 with τ(t) = t − min_i τ_i(t) (never selected: τ_i = −1)."""
    last = np.full(n, -1)
    worst = 0
    for t, c in enumerate(selections):
        last[c] = t
        worst = max(worst, t - last.min())
    return worst


def test_cyclic_blocks_in_turn():
    n, k = 20, 5
    w = world(n)
    sel = make(CyclicSelector, w, clients_per_round=k)
    picks = [sel.select(ctx(w, r, launch=k)).clients for r in range(12)]
    for r, c in enumerate(picks):
        b = r % 4
        np.testing.assert_array_equal(c, np.arange(b * k, (b + 1) * k))
    assert tau_max(picks, n) == n // k - 1


def test_cyclic_short_last_block_and_random_order():
    n, k = 23, 5
    w = world(n)
    sel = make(CyclicSelector, w, clients_per_round=k, order="random")
    picks = [sel.select(ctx(w, r, launch=k)).clients for r in range(15)]
    assert [len(c) for c in picks[:5]] == [5, 5, 5, 5, 3]
    np.testing.assert_array_equal(np.sort(np.concatenate(picks[:5])), np.arange(n))
    for r in range(5, 15):
        np.testing.assert_array_equal(picks[r], picks[r - 5])  # the same order every epoch
    assert tau_max(picks, n) == math.ceil(n / k) - 1
    assert picks[0].tolist() != list(range(5))  # a permutation, not the index order (seed 0)


def test_reshuffled_cyclic_epochs():
    n, k = 40, 5
    w = world(n)
    sel = make(ReshuffledCyclicSelector, w, clients_per_round=k)
    picks = [sel.select(ctx(w, r, launch=k)).clients for r in range(80)]
    epochs = [np.sort(np.concatenate(picks[e * 8:(e + 1) * 8])) for e in range(10)]
    for e in epochs:
        np.testing.assert_array_equal(e, np.arange(n))  # everyone exactly once per epoch
    assert picks[0].tolist() != picks[8].tolist()  # reshuffled
    t = tau_max(picks, n)
    assert n // k - 1 <= t <= 2 * (n // k) - 2
    # a pure function of the round: a fresh selector asked for round 37 gives the same block
    other = make(ReshuffledCyclicSelector, w, clients_per_round=k)
    np.testing.assert_array_equal(other.select(ctx(w, 37, launch=k)).clients, picks[37])


@pytest.mark.parametrize("cls", [CyclicSelector, ReshuffledCyclicSelector])
def test_cyclic_availability_and_overcommitment(cls):
    n, k = 30, 5
    gen_n = np.arange(1, n + 1)
    w = world(n, gen_n)
    sel = make(cls, w, clients_per_round=k)
    block = sel.block(0)
    avail = np.setdiff1d(np.arange(n), block[:2])  # two block members offline
    c = sel.select(ctx(w, 0, avail, launch=k))
    assert len(c.clients) == k and set(block[2:]) <= set(c.clients) and not set(block[:2]) & set(c.clients)
    np.testing.assert_array_equal(c.weights, gen_n[c.clients])  # n_samples weighting, normalised
    assert c.normalize
    strict = make(cls, w, clients_per_round=k, fill=False, weighting="equal")
    c = strict.select(ctx(w, 0, avail, launch=k))
    np.testing.assert_array_equal(c.clients, np.sort(block[2:]))
    np.testing.assert_array_equal(c.weights, np.ones(3))
    assert c.target == 3
    # over-commitment: the block plus extras from outside it
    c = sel.select(ctx(w, 1, launch=7))
    assert len(c.clients) == 7 and set(sel.block(1)) <= set(c.clients) and c.target == k
    # fewer available than asked: every available client; nobody available: empty cohort
    few = np.array([1, 12, 29])
    np.testing.assert_array_equal(sel.select(ctx(w, 2, few, launch=7)).clients, few)
    empty = sel.select(ctx(w, 3, [], launch=7))
    assert len(empty.clients) == 0 and empty.target == 0


def test_registry_descriptions():
    from turnout.core.registry import describe
    for name in ("md", "cyclic", "reshuffled_cyclic"):
        assert describe(SELECTORS.get(name))


def test_a_million_clients_select_in_milliseconds():
    n = 1_000_000
    w = world(n, np.random.default_rng(0).integers(1, 100, n))
    avail = np.flatnonzero(np.random.default_rng(1).random(n) < 0.5)
    for cls in (MDSelector, CyclicSelector, ReshuffledCyclicSelector):
        sel = make(cls, w, clients_per_round=100)
        sel.select(ctx(w, 0, avail, launch=130))  # the reshuffled permutation is drawn once per epoch
        t = time.perf_counter()
        for r in range(1, 4):
            c = sel.select(ctx(w, r, avail, launch=130))
        assert (time.perf_counter() - t) / 3 < 0.25 and len(c.clients) >= 1


# -- end to end ---------------------------------------------------------------------------------
BASE = {
    "name": "mdcyc", "seeds": [0], "rounds": 4,
    "data": {"name": "synthetic", "num_clients": 12, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
    "eval": {"every": 2},
    "output": {"progress": False},
}



def test_engine_md(simulate):
    sim, res = simulate({**BASE, "selector": {"name": "md", "clients_per_round": 4}})
    assert all(1 <= r["n_selected"] <= 4 and r["n_aggregated"] == r["n_selected"] for r in res.rounds)
    assert np.isfinite(res.rounds[-1]["loss"])


@pytest.mark.parametrize("name", ["cyclic", "reshuffled_cyclic"])
def test_engine_cyclic(name, simulate):
    sim, res = simulate({**BASE, "selector": {"name": name, "clients_per_round": 4},
                         "round_mode": {"name": "over_commit", "oc": 1.3}})
    assert all(r["n_selected"] == 6 and r["n_aggregated"] == 4 for r in res.rounds)
    assert np.isfinite(res.rounds[-1]["loss"])
    if name == "cyclic":
        assert (sim.population.times_selected >= 1).all()  # 3 blocks of 4 cover the 12 clients
