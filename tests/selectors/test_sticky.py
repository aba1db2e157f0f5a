"""GlueFL sticky sampling (GlueFL §3.1, Algorithm 2, App. B, F): Proposition 2, unbiased weights, rebalancing,
over-commitment, edges."""

import time

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from turnout.core import rng as rngmod
from turnout.core.errors import ConfigError
from turnout.selectors.base import RoundFeedback, SelectionContext
from turnout.selectors.sticky import StickySelector, resample_probability
from turnout.selectors.uniform import UniformSelector
from turnout.world.context import WorldContext


def world(n, n_train=None, rounds=100):
    return WorldContext(num_clients=n, n_train=np.full(n, 50) if n_train is None else np.asarray(n_train),
                        label_hist=np.zeros((n, 2)), seed=0, rounds=rounds)


def sticky(w, **kw):
    return StickySelector(StickySelector.Config(**kw), w)


def ctx(w, r, available=None, launch=10):
    avail = np.arange(w.num_clients) if available is None else np.asarray(available, dtype=np.int64)
    return SelectionContext(round=r, time_s=0.0, available=avail, launch=launch,
                            rng=rngmod.stream(0, "selection", r), world=w, availability=None,
                            probe_loss=None)


def feedback(r, clients, aggregated=None):
    k = len(clients)
    agg = np.ones(k, bool) if aggregated is None else np.asarray(aggregated, bool)
    return RoundFeedback(r, np.asarray(clients, dtype=np.int64), agg, np.zeros(k, bool), np.ones(k), np.full(k, 20),
                         np.ones(k), np.ones(k), torch.zeros(k, 1), 1.0)


def paper_prop2(r, n, k, s, c):
    """Proposition 2 as printed in GlueFL's Appendix B (computed independently of the module's helper)."""
    r = np.asarray(r, dtype=float)
    return (k * (n * c - s * k) / s * (1 - k / s) ** (r - 1)
            + (k - c) ** 2 * (1 - (k - c) / (n - s)) ** (r - 1)) / ((n - s) * k - (k - c) * s)


def gap_distribution(selector, w, rounds, k, max_gap=6):
    """Empirical P(next sampled exactly r rounds later | sampled now), r = 1..max_gap."""
    n = w.num_clients
    last = np.full(n, -1)
    hits = np.zeros(max_gap + 1)
    events = 0
    horizon = rounds - max_gap - 1  # events up to here have every gap ≤ max_gap observable
    for r in range(rounds):
        cohort = selector.select(ctx(w, r, launch=k))
        c = cohort.clients
        seen = c[last[c] >= 0]
        gaps = r - last[seen]
        ok = (gaps <= max_gap) & (last[seen] <= horizon)
        np.add.at(hits, gaps[ok], 1)
        if r <= horizon:
            events += len(c)
        last[c] = r
        selector.observe(feedback(r, c))
    return hits[1:] / events, events


# -- Proposition 2 ----------------------------------------------------------------------------
def test_closed_form_matches_the_papers_case_study_and_is_a_distribution():
    r = np.arange(1, 7)
    printed = np.array([20.0, 15.0, 11.2, 8.5, 6.4, 4.8])
    p = 100 * paper_prop2(r, 2800, 30, 120, 24)
    assert np.abs(p - printed).max() < 0.1  # the paper truncates 11.27 to 11.2
    np.testing.assert_allclose(resample_probability(r, 2800, 30, 120, 24), p / 100)
    for n, k, s, c in [(2800, 30, 120, 24), (500, 20, 60, 12), (1000, 10, 40, 5)]:
        rr = np.arange(1, 20000)
        q = paper_prop2(rr, n, k, s, c)
        assert q.sum() == pytest.approx(1.0, abs=1e-9)
        assert (rr * q).sum() == pytest.approx(n / k, rel=1e-6)  # "the client trains every N/K rounds"


def test_proposition_2_gluefl_case_study():
    n, k, s, c = 2800, 30, 120, 24
    w = world(n)
    emp, events = gap_distribution(sticky(w, clients_per_round=k, sticky_size=s, sticky_per_round=c,
                                          overcommit_weight=None), w, 2000, k)
    printed = np.array([20.0, 15.0, 11.2, 8.5, 6.4, 4.8]) / 100
    assert np.abs(emp - printed).max() < 0.01, emp
    se = np.sqrt(paper_prop2(np.arange(1, 7), n, k, s, c) / events)
    assert np.all(np.abs(emp - paper_prop2(np.arange(1, 7), n, k, s, c)) < 5 * se + 1e-4)


@pytest.mark.parametrize("n,k,s,c", [(500, 20, 60, 12), (1000, 10, 40, 5)])
def test_proposition_2_other_parameters(n, k, s, c):
    w = world(n)
    emp, events = gap_distribution(sticky(w, clients_per_round=k, sticky_size=s, sticky_per_round=c), w, 2500, k)
    want = paper_prop2(np.arange(1, 7), n, k, s, c)
    assert np.all(np.abs(emp - want) < 5 * np.sqrt(want / events) + 1e-4), (emp, want)


def test_uniform_resampling_is_geometric_with_k_over_n():
    n, k = 2800, 30
    w = world(n)
    emp, events = gap_distribution(UniformSelector(UniformSelector.Config(clients_per_round=k), w), w, 2000, k)
    want = k / n * (1 - k / n) ** np.arange(6)
    assert abs(emp[0] - k / n) < 0.002
    assert np.all(np.abs(emp - want) < 5 * np.sqrt(want / events)), (emp, want)


# -- unbiasedness -------------------------------------------------------------------------------
def _weighted_sum_mean(select_round, v, rounds):
    est = np.zeros((rounds, v.shape[1]))
    for r in range(rounds):
        clients, weights = select_round(r)
        est[r] = weights @ v[clients]
    return est.mean(0), est.std(0) / np.sqrt(rounds)


@pytest.mark.parametrize("weights", ["paper", "code"])
def test_sticky_weights_are_unbiased(weights):
    n, k = 60, 6
    gen = np.random.default_rng(3)
    n_train = gen.integers(1, 100, n)
    v = gen.normal(size=(n, 3)) + 2.0
    w = world(n, n_train)
    sel = sticky(w, clients_per_round=k, sticky_size=18, sticky_per_round=4, weighting="n_samples", weights=weights)

    def one(r):
        cohort = sel.select(ctx(w, r, launch=k))
        assert not cohort.normalize and cohort.target == k
        sel.observe(feedback(r, cohort.clients))
        return cohort.clients, cohort.weights

    mean, se = _weighted_sum_mean(one, v, 3000)
    want = (n_train / n_train.sum()) @ v
    assert np.all(np.abs(mean - want) < 4.5 * se), (mean, want, se)


def test_sticky_with_overcommitment_and_settled_weights_is_unbiased():
    """Launch 1.3K, a random K of them report (iid finish times): actual-count weights stay unbiased."""
    n, k = 60, 6
    gen = np.random.default_rng(4)
    n_train = gen.integers(1, 100, n)
    v = gen.normal(size=(n, 3)) + 2.0
    w = world(n, n_train)
    sel = sticky(w, clients_per_round=k, sticky_size=18, sticky_per_round=4, weighting="n_samples")

    def one(r):
        cohort = sel.select(ctx(w, r, launch=8))
        agg = np.zeros(len(cohort.clients), bool)
        agg[rngmod.stream(9, "finish", r).permutation(len(agg))[:k]] = True
        fb = feedback(r, cohort.clients, agg)
        weights = sel.settle_weights(cohort, fb)
        sel.observe(fb)
        return cohort.clients[agg], weights[agg]

    mean, se = _weighted_sum_mean(one, v, 3000)
    want = (n_train / n_train.sum()) @ v
    assert np.all(np.abs(mean - want) < 4.5 * se), (mean, want, se)


def test_uniform_with_unbiased_weighting_is_unbiased():
    n, k = 60, 6
    gen = np.random.default_rng(5)
    n_train = gen.integers(1, 100, n)
    v = gen.normal(size=(n, 3)) + 2.0
    w = world(n, n_train)
    sel = UniformSelector(UniformSelector.Config(clients_per_round=k, weighting="unbiased"), w)

    def one(r):
        cohort = sel.select(ctx(w, r, launch=k))
        assert not cohort.normalize
        return cohort.clients, cohort.weights

    mean, se = _weighted_sum_mean(one, v, 3000)
    want = (n_train / n_train.sum()) @ v
    assert np.all(np.abs(mean - want) < 4.5 * se), (mean, want, se)


# -- weights, split, rebalancing ------------------------------------------------------------------
def test_equal_weights_give_every_report_one_kth():
    """GlueFL (Equal), the paper's Fig. 5 ablation: ν = 1/K for sticky and non-sticky alike (biased)."""
    n, k, s_, c = 200, 10, 40, 8
    w = world(n)
    eq = sticky(w, clients_per_round=k, sticky_size=s_, sticky_per_round=c, weights="equal")
    paper = sticky(w, clients_per_round=k, sticky_size=s_, sticky_per_round=c)
    for r in range(5):
        a, b = eq.select(ctx(w, r, launch=k)), paper.select(ctx(w, r, launch=k))
        np.testing.assert_array_equal(a.clients, b.clients)  # same sampling, only the weights differ
        np.testing.assert_allclose(a.weights, 1.0 / k)
        if r > 0:
            assert eq.last_sticky.sum() == c
            np.testing.assert_allclose(b.weights[~paper.last_sticky], (n - s_) / (k - c) / n)
        eq.observe(feedback(r, a.clients))
        paper.observe(feedback(r, b.clients))


def test_weights_are_the_papers_nu_s_and_nu_r():
    n, k, s, c = 200, 10, 40, 8
    w = world(n)
    sel = sticky(w, clients_per_round=k, sticky_size=s, sticky_per_round=c)
    first = sel.select(ctx(w, 0, launch=k))  # initialisation: everyone "changed", ν = 1/K for p = 1/N
    assert len(first.clients) == k and not sel.last_sticky.any()
    np.testing.assert_allclose(first.weights, 1.0 / k)
    assert len(sel.group) == s and set(first.clients) <= set(sel.group)
    sel.observe(feedback(0, first.clients))
    assert len(sel.group) == s  # no rebalancing after the initialisation round
    second = sel.select(ctx(w, 1, launch=k))
    st = sel.last_sticky
    assert st.sum() == c and (~st).sum() == k - c
    assert sel.in_group[second.clients[st]].all() and not sel.in_group[second.clients[~st]].any()
    np.testing.assert_allclose(second.weights[st], s / c / n)
    np.testing.assert_allclose(second.weights[~st], (n - s) / (k - c) / n)
    np.testing.assert_allclose(sel.last_scale[st], s / c)


@pytest.mark.parametrize("w_oc,n_st,n_ch", [(0.4, 29, 10), (None, 31, 8), (0.9, 25, 14), (0.0, 33, 6)])
def test_overcommitment_split(w_oc, n_st, n_ch):
    """K = 30, C = 24, launch 39: GlueFL's n_ch = (K−C) + round(w·9), or round((K−C)·1.3) when unset."""
    w = world(2800)
    sel = sticky(w, clients_per_round=30, sticky_size=120, sticky_per_round=24, overcommit_weight=w_oc)
    sel.observe(feedback(0, sel.select(ctx(w, 0, launch=39)).clients))
    cohort = sel.select(ctx(w, 1, launch=39))
    assert len(cohort.clients) == 39 and cohort.target == 30
    assert sel.last_sticky.sum() == n_st and (~sel.last_sticky).sum() == n_ch


def _after_init(w, **kw):
    sel = sticky(w, **kw)
    sel.observe(feedback(0, sel.select(ctx(w, 0, launch=kw["clients_per_round"])).clients))
    return sel


def test_only_aggregated_newcomers_are_promoted_and_sticky_participants_stay():
    n, k, s, c = 200, 10, 40, 6
    w = world(n)
    sel = _after_init(w, clients_per_round=k, sticky_size=s, sticky_per_round=c)
    cohort = sel.select(ctx(w, 1, launch=13))
    st = sel.last_sticky.copy()
    agg = np.ones(len(cohort.clients), bool)
    newcomers = np.flatnonzero(~st)
    agg[newcomers[:3]] = False  # three stragglers among the non-sticky candidates
    agg[np.flatnonzero(st)[:1]] = False  # and one sticky straggler
    before = sel.group.copy()
    sel.observe(feedback(1, cohort.clients, agg))
    fast = cohort.clients[agg & ~st]
    slow = cohort.clients[~agg & ~st]
    assert len(sel.group) == s
    assert sel.in_group[fast].all() and not sel.in_group[slow].any()
    assert sel.in_group[cohort.clients[agg & st]].all()  # paper: removal only from S∖C
    assert len(np.setdiff1d(before, sel.group)) == len(fast)
    assert sel.in_group.sum() == s


def test_settled_weights_use_actual_counts():
    n, k, s, c = 200, 10, 40, 6
    w = world(n)
    sel = _after_init(w, clients_per_round=k, sticky_size=s, sticky_per_round=c)
    cohort = sel.select(ctx(w, 1, launch=k))
    st = sel.last_sticky.copy()
    agg = np.ones(k, bool)
    agg[np.flatnonzero(~st)[0]] = False  # 3 of 4 non-sticky report
    fb = feedback(1, cohort.clients, agg)
    paper = sel.settle_weights(cohort, fb)
    np.testing.assert_allclose(paper[st], s / c / n)
    np.testing.assert_allclose(paper[~st], (n - s) / 3 / n)
    code = _after_init(w, clients_per_round=k, sticky_size=s, sticky_per_round=c, weights="code")
    cohort = code.select(ctx(w, 1, launch=k))
    weights = code.settle_weights(cohort, feedback(1, cohort.clients, agg))
    np.testing.assert_allclose(weights[code.last_sticky], s / (9 - 4) / n)  # K_run − (K − C) = 9 − 4
    np.testing.assert_allclose(weights[~code.last_sticky], (n - s) / 4 / n)


def test_code_rebalancing_can_evict_this_rounds_sticky_participants():
    n, k, s, c = 100, 10, 12, 8
    w = world(n)
    evicted = {"paper": 0, "code": 0}
    for mode in evicted:
        sel = _after_init(w, clients_per_round=k, sticky_size=s, sticky_per_round=c, rebalance=mode)
        for r in range(1, 60):
            cohort = sel.select(ctx(w, r, launch=k))
            ran_sticky = cohort.clients[sel.last_sticky]
            sel.observe(feedback(r, cohort.clients))
            evicted[mode] += int((~sel.in_group[ran_sticky]).sum())
            assert len(sel.group) == s
    assert evicted["paper"] == 0 and evicted["code"] > 0


def test_nothing_new_ran_keeps_the_group():
    w = world(200)
    sel = _after_init(w, clients_per_round=10, sticky_size=40, sticky_per_round=6)
    cohort = sel.select(ctx(w, 1, launch=10))
    before = sel.group.copy()
    sel.observe(feedback(1, cohort.clients, sel.last_sticky))  # no non-sticky client reported
    np.testing.assert_array_equal(sel.group, before)


# -- edge cases ---------------------------------------------------------------------------------
def test_fewer_available_than_asked_selects_all_available():
    w = world(100)
    sel = sticky(w, clients_per_round=10, sticky_size=40, sticky_per_round=8)
    few = np.array([3, 17, 42, 77, 90])
    c0 = sel.select(ctx(w, 0, few, launch=13))
    np.testing.assert_array_equal(c0.clients, few)
    assert c0.target == 5 and len(sel.group) == 5
    sel.observe(feedback(0, c0.clients))
    # later round: 2 group members and 3 outsiders available, 13 asked → all 5, both sides
    sel2 = _after_init(w, clients_per_round=10, sticky_size=40, sticky_per_round=8)
    avail = np.concatenate([sel2.group[:2], np.flatnonzero(~sel2.in_group)[:3]])
    c1 = sel2.select(ctx(w, 1, avail, launch=13))
    np.testing.assert_array_equal(c1.clients, np.sort(avail))
    assert sel2.last_sticky.sum() == 2 and np.isfinite(c1.weights).all()
    # only group members available (no outsiders): the sticky side fills the round
    c2 = sel2.select(ctx(w, 2, sel2.group, launch=10))
    assert len(c2.clients) == 10 and sel2.last_sticky.all()


def test_nobody_available_gives_an_empty_cohort():
    w = world(50)
    sel = sticky(w, clients_per_round=5, sticky_size=20)
    empty = sel.select(ctx(w, 0, [], launch=5))
    assert len(empty.clients) == 0 and len(empty.weights) == 0 and empty.target == 0
    sel.observe(feedback(0, empty.clients))
    assert len(sel.group) == 0  # initialised as soon as somebody is available
    first = sel.select(ctx(w, 1, launch=5))
    sel.observe(feedback(1, first.clients))
    assert len(first.clients) == 5 and len(sel.group) == 20
    again = sel.select(ctx(w, 2, [], launch=5))
    sel.observe(feedback(2, again.clients))
    assert len(again.clients) == 0 and len(sel.group) == 20


def test_bad_sizes_are_rejected_at_construction():
    w = world(100)
    with pytest.raises(ConfigError, match="selector.sticky_size"):
        sticky(w, clients_per_round=10, sticky_size=101)
    with pytest.raises(ValidationError, match="sticky_size"):
        StickySelector.Config(clients_per_round=10, sticky_size=8)
    with pytest.raises(ValidationError, match="sticky_per_round"):
        StickySelector.Config(clients_per_round=10, sticky_per_round=11)
    with pytest.raises(ValidationError):
        StickySelector.Config(clients_per_round=0)
    with pytest.raises(ValidationError):
        StickySelector.Config(overcommit_weight=1.5)
    sel = sticky(world(12), clients_per_round=4)  # defaults fit a small population: S ≤ N − (K − C)
    assert sel.C == 3 and sel.S == 11


def test_deterministic_and_resumable():
    w = world(300)
    a = _after_init(w, clients_per_round=10, sticky_size=40)
    b = _after_init(w, clients_per_round=10, sticky_size=40)
    for r in range(1, 6):
        ca, cb = a.select(ctx(w, r, launch=13)), b.select(ctx(w, r, launch=13))
        np.testing.assert_array_equal(ca.clients, cb.clients)
        a.observe(feedback(r, ca.clients))
        b.observe(feedback(r, cb.clients))
    c = sticky(w, clients_per_round=10, sticky_size=40)
    c.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a.group, c.group)
    np.testing.assert_array_equal(a.select(ctx(w, 6, launch=13)).clients, c.select(ctx(w, 6, launch=13)).clients)


def test_a_million_clients_select_in_milliseconds():
    n = 1_000_000
    w = world(n)
    sel = sticky(w, clients_per_round=100)
    avail = np.flatnonzero(np.random.default_rng(0).random(n) < 0.5)
    worst = 0.0
    for r in range(4):
        t = time.perf_counter()
        cohort = sel.select(ctx(w, r, avail, launch=130))
        sel.observe(feedback(r, cohort.clients, np.arange(len(cohort.clients)) < 100))
        worst = max(worst, time.perf_counter() - t) if r else 0.0
    assert len(sel.group) == 400 and worst < 0.25


# -- end to end ---------------------------------------------------------------------------------
BASE = {
    "name": "sticky", "seeds": [0], "rounds": 4,
    "data": {"name": "synthetic", "num_clients": 30, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "selector": {"name": "sticky", "clients_per_round": 5, "sticky_size": 10, "sticky_per_round": 3},
    "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
    "eval": {"every": 2},
    "output": {"progress": False},
}



def test_engine_run_wait_all(simulate):
    sim, res = simulate(BASE)
    assert [r["n_selected"] for r in res.rounds] == [5] * 4
    assert all(r["n_aggregated"] == 5 for r in res.rounds)
    assert np.isfinite(res.rounds[-1]["loss"])
    assert len(sim.selector.group) == 10


def test_engine_run_over_commit(simulate):
    sim, res = simulate({**BASE, "round_mode": {"name": "over_commit", "oc": 1.3}})
    assert [r["n_selected"] for r in res.rounds] == [7] * 4  # ceil(1.3·5)
    assert all(r["n_aggregated"] == 5 for r in res.rounds)
    assert np.isfinite(res.rounds[-1]["loss"])
    assert len(sim.selector.group) == 10
