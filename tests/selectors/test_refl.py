"""REFL IPS (REFL §4.1, Algorithm 1): least-available-first, noisy oracle, cooldown, pending exclusion, APT."""

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from turnout.availability.base import Availability
from turnout.availability.fedsum import BiasedByIndex
from turnout.availability.trace import trace_window_fraction
from turnout.core import rng as rngmod
from turnout.core.records import RoundFeedback, SelectionContext
from turnout.selectors.availability_predictor import HistoryPredictor, OraclePredictor
from turnout.selectors.refl import REFLSelector
from turnout.selectors.uniform import UniformSelector
from turnout.traces.format import AvailabilityTrace
from turnout.world.context import WorldContext


def world(n, rounds=100, n_train=None):
    return WorldContext(num_clients=n, n_train=np.full(n, 50) if n_train is None else n_train,
                        label_hist=np.zeros((n, 2)), seed=0, rounds=rounds)


def refl(w, **kw):
    return REFLSelector(REFLSelector.Config(**kw), w)


def ctx(w, r, available, launch, availability=None, time_s=None, pending=(), arrivals=()):
    return SelectionContext(round=r, time_s=float(r * 10 if time_s is None else time_s),
                            available=np.asarray(available, dtype=np.int64), launch=launch,
                            rng=rngmod.stream(0, "selection", r), world=w, availability=availability,
                            probe_loss=None, pending_clients=np.asarray(pending, dtype=np.int64),
                            pending_arrival_s=np.asarray(arrivals, dtype=np.float64))


def pick(sel, c, mu=10.0):
    """``sel.select(c)`` by a selector whose moving-average round duration μ_t is ``mu`` seconds."""
    sel.mean_round_s = mu
    return sel.select(c)


def feedback(r, clients, late=None):
    k = len(clients)
    late = np.zeros(k, bool) if late is None else np.asarray(late)
    return RoundFeedback(r, np.asarray(clients), ~late, late, np.ones(k), np.full(k, 20), np.ones(k), np.ones(k),
                         torch.zeros(k, 1), 10.0)


class Probs(Availability):
    """A Bernoulli-style model whose exact window answer is a fixed probability; everyone online."""

    def __init__(self, p):
        self.p = np.asarray(p, dtype=np.float64)

    @property
    def num_clients(self):
        return len(self.p)

    def window_fraction(self, clients, round, t0, t1):
        return self.p[clients]

    def available(self, round, time_s):
        return np.ones(len(self.p), bool)


def selection_shares(selector, w, av, rounds, k):
    counts = np.zeros(w.num_clients)
    for r in range(rounds):
        c = pick(selector, ctx(w, r, np.flatnonzero(av.available(r, r * 10.0)), k, av)).clients
        counts[c] += 1
        selector.observe(feedback(r, c))
    return counts


# -- least-available first ---------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"oracle_rule": "refl_code"}, {"predictor": "history"}])
def test_rarely_available_clients_get_a_larger_share_than_under_uniform(options):
    n = 100
    w = world(n)
    av = BiasedByIndex(BiasedByIndex.Config(), w)  # p = 0.5, 0.45, ..., 0.05 in blocks of 11
    rare = av.probabilities(0) <= 0.15
    uni = selection_shares(UniformSelector(UniformSelector.Config(clients_per_round=10), w), w, av, 300, 10)
    ips = selection_shares(refl(w, clients_per_round=10, **options), w, av, 300, 10)
    share_uni, share_ips = uni[rare].sum() / uni.sum(), ips[rare].sum() / ips.sum()
    assert share_ips > 1.4 * share_uni
    assert ips.sum() == uni.sum() == 300 * 10  # always a full cohort


def test_perfect_oracle_takes_the_lowest_probabilities_and_breaks_ties_at_random():
    w = world(10)
    p = np.array([0.9, 0.1, 0.5, 0.2, 0.2, 0.2, 0.8, 0.7, 0.2, 0.6])
    av = Probs(p)
    picks = set()
    for r in range(40):
        sel = refl(w, clients_per_round=3, oracle_accuracy=1.0)
        c = pick(sel, ctx(w, r, np.arange(10), 3, av)).clients
        assert 1 in c and set(c) <= {1, 3, 4, 5, 8}
        picks.add(tuple(c))
    assert len(picks) > 3  # the four tied clients share the two remaining places at random


def test_noisy_oracle_hides_a_tenth_of_the_pool():
    w = world(10)
    av = Probs(np.linspace(0.05, 0.95, 10))
    sel = refl(w, clients_per_round=1, cooldown_rounds=0)  # oracle_accuracy 0.9: int(0.9·10) = 9 answered
    hits = sum(int(pick(sel, ctx(w, r, np.arange(10), 1, av)).clients[0] == 0) for r in range(1000))
    assert 0.86 < hits / 1000 < 0.94  # the least available client is hidden in 1 round out of 10


# -- exclusions --------------------------------------------------------------------------------
def test_cooldown_blocks_five_rounds_and_fills_from_resting_clients_when_short():
    w = world(30)
    av = Probs(np.zeros(30))
    sel = refl(w, clients_per_round=5)
    first = pick(sel, ctx(w, 0, np.arange(30), 5, av)).clients
    sel.observe(feedback(0, first))
    for r in range(1, 6):
        c = pick(sel, ctx(w, r, np.arange(30), 5, av)).clients
        assert not set(c) & set(first) and len(c) == 5
        sel.observe(feedback(r, c))
    # round 6: only `first` has rested 6 rounds; the others ran within the last 5
    assert set(pick(sel, ctx(w, 6, np.arange(30), 5, av)).clients) == set(first)

    small = refl(w, clients_per_round=5)
    c0 = pick(small, ctx(w, 0, np.arange(8), 5, av)).clients
    small.observe(feedback(0, c0))
    c1 = pick(small, ctx(w, 1, np.arange(8), 5, av)).clients
    assert len(c1) == 5 and set(np.arange(8)) - set(c0) <= set(c1)  # 3 rested + 2 random from cooldown
    strict = refl(w, clients_per_round=5, cooldown_fill=False)
    strict.observe(feedback(0, c0))
    assert len(pick(strict, ctx(w, 1, np.arange(8), 5, av)).clients) == 3


def test_clients_with_a_pending_late_report_are_never_selected():
    w = world(12)
    av = Probs(np.zeros(12))
    for r in range(20):
        sel = refl(w, clients_per_round=10, cooldown_rounds=0)
        c = pick(sel, ctx(w, r, np.arange(12), 10, av, pending=[2, 7], arrivals=[1e9, 1e9])).clients
        assert 2 not in c and 7 not in c and len(c) == 10


def test_late_clients_count_as_having_run_for_the_cooldown():
    w = world(6)
    sel = refl(w, clients_per_round=2)
    sel.observe(feedback(3, np.array([0, 1]), late=np.array([False, True])))
    assert sel.last_run[0] == 3 == sel.last_run[1] and (sel.last_run[2:] < 0).all()


def test_fewer_available_than_asked_selects_all_and_nobody_available_gives_an_empty_cohort():
    w = world(20)
    av = Probs(np.zeros(20))
    sel = refl(w, clients_per_round=10)
    cohort = pick(sel, ctx(w, 0, [3, 4, 9], 10, av))
    assert list(cohort.clients) == [3, 4, 9] and cohort.target == 3
    empty = pick(sel, ctx(w, 1, [], 10, av))
    assert len(empty.clients) == 0 and len(empty.weights) == 0 and empty.target == 0
    assert len(pick(refl(w, clients_per_round=5, apt="paper"), ctx(w, 0, [], 5, av)).clients) == 0


# -- APT ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,ready,expected", [
    ("paper", 3, 7), ("paper", 12, 1), ("capped", 3, 7), ("capped", 8, 5), ("off", 3, 10)])
def test_apt_reduces_the_fresh_clients_by_the_ready_stragglers(mode, ready, expected):
    w = world(60)
    av = Probs(np.zeros(60))
    sel = refl(w, clients_per_round=10, apt=mode)
    t, mu = 1000.0, 50.0
    due = t + mu * np.linspace(0.0, 1.0, ready)  # within [t, t + μ]: ready this round
    later = np.array([t + mu + 0.5, t + 3 * mu])  # in flight but not due yet
    pending = np.arange(40, 40 + ready + 2)
    c = pick(sel, ctx(w, 5, np.arange(40), 10, av, time_s=t, pending=pending,
                       arrivals=np.concatenate([due, later])), mu=mu)
    assert len(c.clients) == expected == c.target
    assert sel.last_ready == (ready if mode != "off" else 0)


def test_apt_keeps_the_over_commitment_ratio_and_uses_the_window():
    w = world(60)
    av = Probs(np.zeros(60))
    sel = refl(w, clients_per_round=10, apt="paper")
    c = pick(sel, ctx(w, 1, np.arange(50), 13, av, time_s=100.0, pending=[55, 56, 57],
                       arrivals=[105.0, 110.0, 111.0]), mu=10.0)
    assert c.target == 8 and len(c.clients) == 11  # ceil(13 · 8/10)
    # before any round closed μ = 0: the initial window (1000 s) applies; window_s overrides μ
    assert refl(w, clients_per_round=10, apt="paper").select(  # a fresh selector: μ = 0
        ctx(w, 0, np.arange(50), 10, av, time_s=0.0, pending=[55], arrivals=[900.0])).target == 9
    fixed = refl(w, clients_per_round=10, apt="paper", window_s=4.0)
    assert pick(fixed, ctx(w, 1, np.arange(50), 10, av, time_s=100.0, pending=[55, 56],
                            arrivals=[103.0, 106.0]), mu=10.0).target == 9


def test_config_is_validated():
    with pytest.raises(ValidationError):
        REFLSelector.Config(apt="hard")
    with pytest.raises(ValidationError):
        REFLSelector.Config(oracle_accuracy=0.0)
    with pytest.raises(ValidationError):
        REFLSelector.Config(cooldown_rounds=-1)
    with pytest.raises(ValidationError):
        REFLSelector.Config(predictor="prophet")


# -- predictors --------------------------------------------------------------------------------
def test_trace_window_fraction_is_exact_and_wraps_the_period():
    trace = AvailabilityTrace.from_intervals([[(0, 10), (50, 60)], [(20, 100)], [], [(0, 100)]], period_s=100)
    clients = np.array([0, 1, 2, 3])

    def grid(a, b, m=200001):
        s = np.linspace(a, b, m)
        return trace.is_online(np.repeat(clients, m), np.tile(s, len(clients))).reshape(len(clients), m).mean(1)

    for a, b in [(0, 100), (5, 55), (95, 115), (140, 260), (58, 58.5)]:
        np.testing.assert_allclose(trace_window_fraction(trace, clients, a, b), grid(a, b), atol=2e-3)
    np.testing.assert_allclose(trace_window_fraction(trace, clients, 5, 5), [1, 0, 0, 1])


class TraceLike(Availability):
    """A trace-driven model that answers the two optional capabilities exactly."""

    def __init__(self, trace):
        self.trace = trace

    @property
    def num_clients(self):
        return self.trace.num_traces

    def available(self, round, time_s):
        return self.trace.is_online(None, time_s)

    def online_until(self, clients, round, time_s):
        return self.trace.online_until(clients, time_s)

    def window_fraction(self, clients, round, t0, t1):
        return trace_window_fraction(self.trace, clients, t0, t1)

    def online_throughout(self, clients, round, t0, t1):
        return self.trace.is_online(clients, t0) & (self.trace.online_until(clients, t0) >= t1)


class TimeOnly(Availability):
    """The same model seen only through the required interface (no exact capabilities)."""

    def __init__(self, trace):
        self._t = trace

    @property
    def num_clients(self):
        return self._t.num_traces

    def available(self, round, time_s):
        return self._t.is_online(None, time_s)

    def online_until(self, clients, round, time_s):
        return self._t.online_until(clients, time_s)


def test_oracle_paths_agree_and_the_refl_code_rule_flags_clients_about_to_leave():
    trace = AvailabilityTrace.from_intervals([[(0, 30)], [(0, 15)], [(0, 100)], [(0, 12), (20, 100)]], period_s=100)
    w = world(4)
    clients = np.arange(4)
    exact = OraclePredictor().predict(ctx(w, 0, clients, 2, TraceLike(trace), time_s=0.0), clients, 10.0, 20.0)
    sampled = OraclePredictor(samples=1000).predict(ctx(w, 0, clients, 2, TimeOnly(trace), time_s=0.0),
                                                    clients, 10.0, 20.0)
    np.testing.assert_allclose(exact, [1.0, 0.5, 1.0, 0.2])
    np.testing.assert_allclose(sampled, exact, atol=2e-3)
    # code rule, w = 10 at t = 0: priority (0) iff online through [0, 10] and not through [10, 20]
    for av in (TraceLike(trace), TimeOnly(trace)):
        code = OraclePredictor("refl_code").predict(ctx(w, 0, clients, 2, av, time_s=0.0), clients, 10.0, 20.0)
        np.testing.assert_array_equal(code, [1.0, 0.0, 1.0, 0.0])


class Hidden(Availability):
    """Any availability model seen only through available() / online_until()."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def num_clients(self):
        return self.inner.num_clients

    def available(self, round, time_s):
        return self.inner.available(round, time_s)

    def online_until(self, clients, round, time_s):
        return self.inner.online_until(clients, round, time_s)


def test_oracle_on_the_trace_availability_reads_the_trace_exactly_with_its_time_offset():
    from turnout.availability.trace import TraceAvailability

    w = world(200)
    av = TraceAvailability(TraceAvailability.Config(time_offset_s=5000.0), w)
    clients = np.flatnonzero(av.available(0, 7200.0))
    c = ctx(w, 0, clients, 5, av, time_s=7200.0)
    exact = OraclePredictor().predict(c, clients, 9000.0, 10800.0)
    sampled = OraclePredictor(samples=600).predict(ctx(w, 0, clients, 5, Hidden(av), time_s=7200.0),
                                                   clients, 9000.0, 10800.0)
    np.testing.assert_allclose(exact, sampled, atol=0.01)
    assert 0.0 < exact.mean() < 1.0
    code = OraclePredictor("refl_code").predict(c, clients, 9000.0, 10800.0)
    code_generic = OraclePredictor("refl_code").predict(ctx(w, 0, clients, 5, Hidden(av), time_s=7200.0),
                                                        clients, 9000.0, 10800.0)
    np.testing.assert_array_equal(code, code_generic)


def test_history_predictor_learns_frequency_and_time_of_day():
    n = 3
    hist = HistoryPredictor(n, period_s=100.0, bins=4, prior=2.0)
    w = world(n)
    for r in range(200):
        t = r * 25.0 + 1.0  # visits every quarter of the "day" in turn
        online = [0] + ([1] if (t % 100) < 50 else []) + ([2] if r % 10 == 0 else [])
        hist.observe(ctx(w, r, online, 1, time_s=t))
    morning = hist.predict(None, np.arange(n), 0.0, 50.0)
    evening = hist.predict(None, np.arange(n), 50.0, 100.0)
    assert morning[0] > 0.95 and evening[0] > 0.95
    assert morning[1] > 0.9 and evening[1] < 0.1
    assert 0.05 < morning[2] < 0.2 and 0.05 < evening[2] < 0.2
    plain = HistoryPredictor(n, period_s=None)
    plain.observe(ctx(w, 0, [0], 1, time_s=0.0, pending=[2]))
    np.testing.assert_allclose(plain.predict(None, np.arange(n), 0.0, 1.0), [2 / 3, 1 / 3, 0.5])


# -- in the engine -----------------------------------------------------------------------------
N, K = 40, 5
BASE = {
    "name": "refl", "seeds": [0], "rounds": 40,
    "data": {"name": "synthetic", "num_clients": N, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "availability": {"name": "biased"},  # blocks of 5 clients: p = 0.5, 0.45, ..., 0.15
    "round_mode": {"name": "deadline", "deadline_s": 5.0},
    "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
    "eval": {"every": 1000},
    "output": {"progress": False},
}


def _slow_every_fourth(cost):
    cost = np.full(len(cost), 0.01)
    cost[::4] = 0.4  # every 4th client needs ~8 s for its 20 samples: it misses the 5 s deadline
    return cost


@pytest.fixture
def simulate(build_simulation, compute_speeds, spy):
    def simulate(selector):
        keep = lambda sel, cohort, c: (c, cohort, getattr(sel, "last_ready", 0), getattr(sel, "mean_round_s", 0.0))  # noqa: E731
        sim = build_simulation({**BASE, "selector": selector},
                               components={"devices": compute_speeds(_slow_every_fourth),
                                           "selector": spy("selector", "select", keep)})
        return sim, sim.run(), sim.selector.calls

    return simulate


def test_refl_in_the_engine_prefers_rare_clients_and_apt_counts_the_due_stragglers(simulate):
    sim, res, seen = simulate({"name": "refl_ips", "clients_per_round": K, "apt": "paper"})
    usim, _, _ = simulate({"name": "uniform", "clients_per_round": K})
    assert all(np.isfinite(r["train_loss"]) or r["n_aggregated"] == 0 for r in res.rounds)
    rare = np.arange(N) >= 30  # p = 0.2 and 0.15
    share = sim.population.times_selected[rare].sum() / sim.population.times_selected.sum()
    ushare = usim.population.times_selected[rare].sum() / usim.population.times_selected.sum()
    assert share > ushare
    adapted = 0
    for c, cohort, ready, mu in seen:  # μ_t: the selector's moving-average round duration at selection
        due = int((c.pending_arrival_s <= c.time_s + mu).sum()) if mu > 0 else \
            int((c.pending_arrival_s <= c.time_s + 1000.0).sum())
        assert ready == due
        assert len(cohort.clients) == min(max(1, K - due), len(c.available))
        assert not set(cohort.clients) & set(c.pending_clients)
        adapted += due > 0
    assert adapted >= 5
    assert sum(r["n_late"] for r in res.rounds) > 0


def test_rounds_with_nobody_available_run_with_an_empty_cohort(build_simulation):
    raw = {**BASE, "rounds": 30, "data": {"name": "synthetic", "num_clients": 5, "alpha": 0.5, "beta": 0.5},
           "selector": {"name": "refl_ips", "clients_per_round": 2, "apt": "paper"}}
    sim = build_simulation(raw)
    res = sim.run()  # biased availability over 5 clients: p = 0.5 ... 0.3, nobody online in some rounds
    empty = [r for r in res.rounds if r["n_available"] == 0]
    assert empty and all(r["n_selected"] == 0 for r in empty)
    # APT may shrink the cohort to one, never to zero while someone is available
    assert all(1 <= r["n_selected"] <= min(2, r["n_available"]) for r in res.rounds if r["n_available"])
