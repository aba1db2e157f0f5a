"""Oort (docs/algorithms/baselines.md#oort): utility, duration penalty and pacer, ε-greedy exploration,
clipping, staleness bonus."""

import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from turnout.core import rng as rngmod
from turnout.selectors.base import RoundFeedback, SelectionContext
from turnout.selectors.oort import OortSelector, weighted_sample
from turnout.selectors.uniform import UniformSelector
from turnout.world.context import WorldContext


def world(n, n_train=None):
    return WorldContext(num_clients=n, n_train=np.full(n, 100) if n_train is None else np.asarray(n_train),
                        label_hist=np.zeros((n, 2)), seed=0, rounds=300)


def oort(w, **kw):
    return OortSelector(OortSelector.Config(**kw), w)


def ctx(w, r, available, launch, pending=()):
    return SelectionContext(round=r, time_s=0.0, available=np.asarray(available, dtype=np.int64), launch=launch,
                            rng=rngmod.stream(0, "selection", r), world=w, availability=None,
                            probe_loss=None, pending_clients=np.asarray(pending, dtype=np.int64))


def feedback(r, clients, durations, losses, aggregated=None, samples=20):
    k = len(clients)
    agg = np.ones(k, bool) if aggregated is None else np.asarray(aggregated)
    return RoundFeedback(r, np.asarray(clients), agg, np.zeros(k, bool), np.asarray(losses, dtype=np.float64),
                         np.full(k, samples), np.asarray(durations, dtype=np.float64),
                         np.asarray(durations, dtype=np.float64), torch.zeros(k, 1),
                         float(np.max(durations, initial=0)))


def run(selector, w, duration, rounds, k, loss=lambda r, c: np.ones(len(c))):
    """Wait-all rounds on an always-available population: the round lasts as long as its slowest client."""
    out = []
    for r in range(rounds):
        c = selector.select(ctx(w, r, np.arange(w.num_clients), k)).clients
        out.append(duration[c].max() if len(c) else 0.0)
        selector.observe(feedback(r, c, duration[c], loss(r, c)))
    return np.array(out)


# -- behaviour ---------------------------------------------------------------------------------
def test_oort_rounds_are_shorter_than_uniform_once_it_has_explored_the_slow_devices():
    n = 50
    w = world(n)
    duration = 1.0 + rngmod.stream(1, "test").random(n)
    duration[:5] = 100.0  # a few very slow devices
    o = run(oort(w, clients_per_round=5), w, duration, 150, 5)
    u = run(UniformSelector(UniformSelector.Config(clients_per_round=5), w), w, duration, 150, 5)
    assert o[60:].mean() < 0.6 * u[60:].mean()


def test_pacer_relaxes_the_duration_threshold_when_utility_stalls():
    w = world(40)
    sel = oort(w, clients_per_round=4)
    duration = np.linspace(1, 10, 40)
    thresholds = []
    for r in range(81):
        c = sel.select(ctx(w, r, np.arange(40), 4)).clients
        thresholds.append(float(sel.threshold))
        sel.observe(feedback(r, c, duration[c], np.ones(len(c))))
    # Round 0 is the client manager's uniform draw, so Oort's T equals the round index and pacer windows
    # close at rounds 40, 60, 80. T = 1 had no exploited clients yet (utility 0), so the first two
    # windows differ by 5 % (380 vs 400) ≤ 10 %: every window relaxes the threshold by 5.
    assert sel.util_history[0] == 0.0 and np.ptp(sel.util_history[1:]) < 0.01
    assert set(thresholds[:40]) == {30.0}
    assert thresholds[40] == 35.0 and thresholds[59] == 35.0 and thresholds[60] == 40.0 and thresholds[80] == 45.0
    # the preferred duration follows the threshold: 45th percentile of the known durations
    known = np.sort(duration)
    assert float(sel.prefer_duration) == known[int(40 * 0.45)]


def test_pacer_tightens_the_threshold_when_utility_jumps():
    w = world(40)
    sel = oort(w, clients_per_round=4)
    duration = np.linspace(1, 10, 40)
    def jump(r, c):
        return np.full(len(c), 1.0 if r < 20 else 50.0)

    run(sel, w, duration, 41, 4, loss=jump)  # the window closes at T = 40: round 40 (round 0 is not Oort's)
    assert float(sel.threshold) == 25.0


def test_exploration_decays_to_its_floor_and_explores_large_clients_first():
    n = 100
    w = world(n, n_train=np.arange(1, n + 1) * 10)
    sel = oort(w, clients_per_round=4, first_round="oort")
    first = sel.select(ctx(w, 0, np.arange(n), 4)).clients
    assert float(sel.exploration) == pytest.approx(0.9 * 0.98)
    assert (first >= n - 20).all()  # drawn among the top sample_window·4 = 20 by data size
    for r in range(1, 80):
        sel.select(ctx(w, r, np.arange(n), 4))
    assert float(sel.exploration) == pytest.approx(0.3)


def test_the_first_round_is_a_uniform_draw_and_oorts_counter_starts_at_the_second():
    """FedScale's client manager draws round 0 uniformly; Oort's T (ε, pacer, ln T) counts Oort's own calls."""
    n = 100
    w = world(n, n_train=np.arange(1, n + 1) * 10)
    sel = oort(w, clients_per_round=4)
    first = sel.select(ctx(w, 0, np.arange(n), 4)).clients
    assert float(sel.exploration) == 0.9 and int(sel.oort_calls) == 0 and len(sel.util_history) == 0
    assert (first < n - 20).any()  # not the data-size exploration: seed 0's draw includes a small client
    sel.observe(feedback(0, first, np.ones(4), np.ones(4)))
    sel.select(ctx(w, 1, np.arange(n), 4))
    assert float(sel.exploration) == pytest.approx(0.9 * 0.98) and int(sel.oort_calls) == 1  # FedScale: 0.88200
    sel.select(ctx(w, 2, np.arange(10), 10))  # every available client fits: launched without calling Oort
    assert int(sel.oort_calls) == 1 and int(sel.selections) == 3


def test_a_straggler_gets_the_mean_utility_reported_this_round():
    """FedScale's ``last_round_avg_util`` / REFL's ``avgUtilLastEpoch``: this round's reporters only."""
    w = world(6, n_train=np.full(6, 100))
    sel = oort(w, clients_per_round=4)
    sel.observe(feedback(0, [0, 1], [1.0, 1.0], [5.0, 7.0]))  # an earlier round: rewards 20·5, 20·7
    sel.observe(feedback(1, [2, 3, 4, 5], [1, 1, 9, 9], [1.0, 2.0, np.nan, np.nan],
                         aggregated=[True, True, False, False]))
    np.testing.assert_array_equal(sel.reward[2:], [20.0, 40.0, 30.0, 30.0])  # not (100+140+20+40)/4 = 75
    np.testing.assert_array_equal(sel.last_round[2:], [2, 2, 2, 2])
    sel.observe(feedback(2, [0, 1], [1, 1], [np.nan, np.nan], aggregated=[False, False]))
    np.testing.assert_array_equal(sel.reward[:2], [0.0, 0.0])  # nobody reported: 0, as the code's sum / max(1, 0)
    late = oort(w, clients_per_round=4, straggler_round="next")
    late.observe(feedback(1, [2, 3, 4, 5], [1, 1, 9, 9], [1.0, 2.0, np.nan, np.nan],
                          aggregated=[True, True, False, False]))
    np.testing.assert_array_equal(late.last_round[2:], [2, 2, 3, 3])


def test_score_clips_at_the_95th_percentile_and_adds_the_staleness_bonus():
    n = 21
    w = world(n)
    sel = oort(w, clients_per_round=5)
    sel.explored[:] = True
    sel.reward[:] = np.arange(1, n + 1, dtype=float)
    sel.reward[20] = 1000.0  # an outlier
    sel.duration[:] = 1.0
    sel.last_round[:] = 4
    sel.last_round[0] = 1  # not seen for a long time
    t = 10
    sc = sel.scores(np.arange(n), t)
    pos = np.sort(sel.reward)
    clip = pos[int(21 * 0.95)]  # index 19: reward 20
    assert clip == 20.0
    lo, span = pos[0] * 0.999, pos[-1] - pos[0] * 0.999
    expected = (np.minimum(sel.reward, clip) - lo) / span + np.sqrt(0.1 * math.log(t) / sel.last_round)
    np.testing.assert_allclose(sc, expected)
    assert sc[20] == pytest.approx(sc[19])  # the outlier is clipped to the 95th percentile
    assert sc[0] > sc[1]  # lower reward, but a larger temporal-uncertainty bonus


def test_duration_penalty_above_the_preferred_duration():
    w = world(10)
    sel = oort(w, clients_per_round=2)
    sel.explored[:] = True
    sel.reward[:] = 5.0
    sel.duration[:] = np.arange(1, 11, dtype=float)
    sel.last_round[:] = 1
    sel.prefer_duration = np.float64(sel.preferred_duration())
    assert sel.prefer_duration == 4.0  # 30th percentile of 1..10
    sc = sel.scores(np.arange(10), 2)
    base = sc[0]
    np.testing.assert_allclose(sc[:4], base)
    np.testing.assert_allclose(sc[4:], base * (4.0 / np.arange(5, 11)) ** 2)


def test_clients_that_did_not_deliver_get_the_mean_utility():
    w = world(6)
    sel = oort(w, clients_per_round=3)
    sel.observe(feedback(0, np.array([0, 1, 2]), [1.0, 2.0, 3.0], [2.0, 4.0, np.nan],
                         aggregated=[True, True, False]))
    np.testing.assert_allclose(sel.reward[:3], [40.0, 80.0, 60.0])  # |B| = min(100, 20) samples · loss
    np.testing.assert_allclose(sel.duration[:3], [1.0, 2.0, 3.0])
    assert sel.explored[:3].all() and not sel.explored[3:].any() and (sel.last_round[:3] == 1).all()


def test_unfilled_exploration_slots_go_to_random_padding_or_to_exploitation():
    n = 30
    w = world(n)
    duration = np.ones(n)
    duration[:3] = 100.0
    rnd = run(oort(w, clients_per_round=10, exploration_min=0.5), w, duration, 80, 10)[40:]
    exp = run(oort(w, clients_per_round=10, unfilled="exploit", exploration_min=0.5), w, duration, 80, 10)[40:]
    # random: 5 of 10 places are random once everyone is explored, so slow devices keep coming back
    assert np.mean(rnd > 50) > 0.5 and np.mean(exp > 50) < 0.1


# -- edge cases --------------------------------------------------------------------------------
def test_fewer_available_than_asked_selects_all_and_nobody_available_gives_an_empty_cohort():
    w = world(20)
    sel = oort(w, clients_per_round=10)
    cohort = sel.select(ctx(w, 0, [3, 4, 9], 10))
    assert list(cohort.clients) == [3, 4, 9] and cohort.target == 3
    sel.observe(feedback(0, cohort.clients, [1.0, 2.0, 3.0], [1.0, 1.0, 1.0]))
    assert list(sel.select(ctx(w, 1, [3, 4, 9, 11], 10)).clients) == [3, 4, 9, 11]
    empty = sel.select(ctx(w, 2, [], 10))
    assert len(empty.clients) == 0 and empty.target == 0
    sel.observe(feedback(2, np.zeros(0, np.int64), [], []))
    assert len(sel.select(ctx(w, 3, np.arange(20), 10)).clients) == 10


def test_pending_clients_are_not_selected_and_state_round_trips():
    w = world(12)
    sel = oort(w, clients_per_round=10)
    for r in range(5):
        c = sel.select(ctx(w, r, np.arange(12), 10, pending=[0, 5])).clients
        assert 0 not in c and 5 not in c and len(c) == 10
        sel.observe(feedback(r, c, np.ones(10), np.ones(10)))
    clone = oort(w, clients_per_round=10)
    clone.load_state_dict(sel.state_dict())
    a = sel.select(ctx(w, 5, np.arange(12), 6)).clients
    b = clone.select(ctx(w, 5, np.arange(12), 6)).clients
    np.testing.assert_array_equal(a, b)
    assert float(clone.exploration) == float(sel.exploration)


def test_weighted_sample_follows_the_weights_and_puts_zero_weights_last():
    g = np.random.default_rng(0)
    counts = np.zeros(4)
    for _ in range(4000):
        counts[weighted_sample(g, np.arange(4), np.array([1.0, 2.0, 7.0, 0.0]), 1)] += 1
    np.testing.assert_allclose(counts[:3] / 4000, [0.1, 0.2, 0.7], atol=0.03)
    assert counts[3] == 0
    assert sorted(weighted_sample(g, np.arange(4), np.array([0.0, 1.0, 0.0, 0.0]), 3))[0] in (0, 1)
    assert set(weighted_sample(g, np.arange(4), np.zeros(4), 4)) == {0, 1, 2, 3}


def test_config_is_validated():
    with pytest.raises(ValidationError):
        OortSelector.Config(round_threshold=120)
    with pytest.raises(ValidationError):
        OortSelector.Config(unfilled="skip")
    with pytest.raises(ValidationError):
        OortSelector.Config(clients_per_round=0)


# -- in the engine -----------------------------------------------------------------------------
N = 30
BASE = {
    "name": "oort", "seeds": [0], "rounds": 50,
    "data": {"name": "synthetic", "num_clients": N, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
    "eval": {"every": 1000},
    "output": {"progress": False},
}


def _four_slow(cost):
    cost[:4] = 2.0  # four devices 200× slower
    return cost


@pytest.fixture
def simulate(build_simulation, compute_speeds):
    def simulate(selector):
        sim = build_simulation({**BASE, "selector": selector}, components={"devices": compute_speeds(_four_slow)})
        return sim, sim.run()

    return simulate


def test_oort_in_the_engine_shortens_rounds_with_slow_devices(simulate):
    sim, res = simulate({"name": "oort", "clients_per_round": 5})
    _, ures = simulate({"name": "uniform", "clients_per_round": 5})
    d = np.array([r["round_duration_s"] for r in res.rounds])
    ud = np.array([r["round_duration_s"] for r in ures.rounds])
    assert all(r["n_selected"] == 5 for r in res.rounds)
    assert np.isfinite([r["train_loss"] for r in res.rounds]).all()
    assert d[20:].mean() < 0.6 * ud[20:].mean()
    assert sim.selector.explored.all() and np.isfinite(sim.selector.duration).all()


def test_rounds_with_nobody_available_run_with_an_empty_cohort(build_simulation):
    raw = {**BASE, "rounds": 30, "data": {"name": "synthetic", "num_clients": 5, "alpha": 0.5, "beta": 0.5},
           "availability": {"name": "biased"}, "selector": {"name": "oort", "clients_per_round": 2}}
    res = build_simulation(raw).run()
    empty = [r for r in res.rounds if r["n_available"] == 0]
    assert empty and all(r["n_selected"] == 0 for r in empty)
    assert all(r["n_selected"] == min(2, r["n_available"]) for r in res.rounds)
