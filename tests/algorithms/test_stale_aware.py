"""Stale-aware aggregation (REFL §4.2, Eq. (2)): the REFL / Equal / DynSGD / AdaSGD / Average weights, the
code's one-round-late emulation, full-model combination, and deadline rounds through the real engine."""

import math

import numpy as np
import pytest
import torch

import turnout.algorithms.stale_aware  # noqa: F401  (registers components)
from turnout.algorithms.base import AlgorithmContext, Reports
from turnout.algorithms.stale_aware import UNBOUNDED, StaleAware, StaleAwareConfig, refl_deviation, staleness_factors
from turnout.training.local_sgd import evaluate


def make(dim=2, **cfg):
    ctx = AlgorithmContext(num_clients=10, dim=dim, n_train=np.full(10, 5), seed=0, rounds=10)
    return StaleAware(StaleAwareConfig(**cfg), ctx)


def reports(ups, weights, staleness, clients=None):
    k = len(ups)
    return Reports(np.arange(k) if clients is None else np.asarray(clients), torch.tensor(ups, dtype=torch.float32),
                   np.asarray(weights, float), True, np.full(k, 5), np.zeros(k), np.asarray(staleness, np.int64))


EMPTY = Reports(np.zeros(0, np.int64), torch.zeros(0, 2), np.zeros(0), True, np.zeros(0, np.int64), np.zeros(0),
                np.zeros(0, np.int64))


def test_staleness_rules_use_the_papers_names():
    tau = np.array([1, 2, 4])
    np.testing.assert_allclose(staleness_factors("equal", tau), [1, 1, 1])
    np.testing.assert_allclose(staleness_factors("dynsgd", tau), [1 / 2, 1 / 3, 1 / 5])
    np.testing.assert_allclose(staleness_factors("adasgd", tau), np.exp([-2, -3, -5]))
    np.testing.assert_allclose(staleness_factors("average", tau), [1 / (10 / 3)] * 3)
    dev = np.array([0.5, 1.0, 0.0])
    expect = 0.65 / (tau + 1) + 0.35 * (1 - np.exp(-dev) / 2.0)
    np.testing.assert_allclose(staleness_factors("refl", tau, dev, beta=0.35, scale_coff=2.0), expect)


def test_refl_deviation_is_the_papers_lambda():
    fresh = torch.tensor([[1.0, 0.0], [3.0, 2.0]])
    stale = torch.tensor([[0.0, 0.0], [2.0, 1.0], [5.0, -1.0]])
    lam, ratio = refl_deviation(fresh, np.array([1.0, 1.0]), stale)
    u_f, n_f = fresh.mean(0), 2
    paper = [float(((u_f - (s + n_f * u_f) / (n_f + 1)) ** 2).sum() / (u_f ** 2).sum()) for s in stale]
    np.testing.assert_allclose(lam, paper, rtol=1e-6)
    np.testing.assert_allclose(ratio, np.array(paper) / max(paper), rtol=1e-6)
    assert ratio[1] == 0.0  # equal to the fresh mean: no boost
    # no fresh report to deviate from: every stale report counts as maximally novel
    assert refl_deviation(fresh[:0], np.zeros(0), stale)[1].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("rule", ["refl", "equal", "dynsgd", "adasgd", "average"])
def test_aggregate_weights_fresh_by_one_and_stale_by_the_rule(rule):
    alg = make(rule=rule)
    ups = [[1.0, 0.0], [3.0, 2.0], [0.0, 0.0], [5.0, -1.0]]
    rep = reports(ups, [1.0, 1.0, 1.0, 2.0], [0, 0, 1, 3])
    x = torch.tensor([10.0, 10.0])
    new = alg.aggregate(5, x, rep)
    u = torch.tensor(ups)
    dev = refl_deviation(u[:2], np.ones(2), u[2:])[1]
    f = np.concatenate([[1.0, 1.0], staleness_factors(rule, np.array([1, 3]), dev)])
    w = np.array([1.0, 1.0, 1.0, 2.0]) * f
    torch.testing.assert_close(new, x + torch.tensor(w / w.sum(), dtype=torch.float32) @ u)
    assert alg.max_staleness == UNBOUNDED


def test_bound_and_dropping_are_engine_attributes():
    assert make(max_staleness=5).max_staleness == 5
    alg = make(use_stale=False)
    assert alg.max_staleness is None  # late reports are dropped on arrival
    x = torch.zeros(2)
    torch.testing.assert_close(alg.aggregate(0, x, reports([[2.0, 4.0]], [1.0], [0])), torch.tensor([2.0, 4.0]))
    torch.testing.assert_close(alg.aggregate(1, x, EMPTY), x)  # nobody reported: the model stays


def test_refl_code_timing_applies_a_stale_report_one_round_late():
    alg = make(rule="equal", timing="refl_code")
    x = torch.zeros(2)
    # round 3: one fresh report and one stale arrival (τ = 2): only the fresh one is applied now
    new = alg.aggregate(3, x, reports([[1.0, 0.0], [0.0, 8.0]], [1.0, 1.0], [0, 2], clients=[0, 1]))
    torch.testing.assert_close(new, torch.tensor([1.0, 0.0]))
    # round 4: the held report joins this round's fresh one, still labelled τ = 2
    seen = []
    factors = alg.factors
    alg.factors = lambda rep, u: (seen.append(rep.staleness.copy()), factors(rep, u))[1]
    new = alg.aggregate(4, new, reports([[2.0, 0.0]], [1.0], [0], clients=[2]))
    torch.testing.assert_close(new, torch.tensor([1.0, 0.0]) + torch.tensor([1.0, 4.0]))
    assert seen[0].tolist() == [0, 2]


def test_models_mode_averages_full_local_models_built_on_their_origin():
    alg = make(rule="equal", combine="models", max_staleness=3)
    x0, x1 = torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])
    alg.aggregate(0, x0, EMPTY)
    # round 1 (x1): a fresh delta (built on x1) and a stale one built on x0
    new = alg.aggregate(1, x1, reports([[1.0, 0.0], [0.0, 3.0]], [1.0, 1.0], [0, 1]))
    models = torch.stack([x1 + torch.tensor([1.0, 0.0]), x0 + torch.tensor([0.0, 3.0])])
    torch.testing.assert_close(new, models.mean(0))


# ---- deadline rounds through the engine ---------------------------------------------------------
N = 20
DEADLINE = {
    "name": "refl-dl", "seeds": [0], "rounds": 40,
    "data": {"name": "digits", "num_clients": N, "partition": {"name": "dirichlet", "alpha": 0.3}},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 5, "lr": 0.1},
    "selector": {"name": "uniform", "clients_per_round": 10, "weighting": "equal"},
    "round_mode": {"name": "deadline", "deadline_s": 0.25},
    "eval": {"every": 40},
    "output": {"progress": False},
}


@pytest.fixture
def run_deadline(build_simulation, compute_speeds):
    # odd clients are 6× slower: 50 samples take 0.6 s, so they miss the 0.25 s deadline and arrive 2 rounds late
    odd_slow = compute_speeds(lambda c: np.where(np.arange(len(c)) % 2, 0.012, 0.002))

    def run(algo):
        sim = build_simulation({**DEADLINE, "algorithm": algo}, components={"devices": odd_slow})
        return sim, sim.run()

    return run


def test_deadline_rounds_aggregate_stale_updates_and_are_not_less_accurate_than_dropping_them(run_deadline):
    sim, res = run_deadline({"name": "stale_aware", "rule": "refl"})
    n_stale = sum(r["n_stale"] for r in res.rounds)
    assert n_stale > 0 and sum(r["n_stale_dropped"] for r in res.rounds) == 0
    slow = np.arange(N) % 2 == 1
    assert sim.population.times_aggregated[slow].sum() > 0  # the slow clients' data reaches the model
    drop, res_drop = run_deadline({"name": "stale_aware", "rule": "refl", "use_stale": False})
    assert sum(r["n_stale"] for r in res_drop.rounds) == 0 and sum(r["n_stale_dropped"] for r in res_drop.rounds) > 0
    assert drop.population.times_aggregated[slow].sum() == 0
    assert res.rounds[-1]["accuracy"] >= res_drop.rounds[-1]["accuracy"]
    assert sum(r["wasted_s"] for r in res.rounds) < sum(r["wasted_s"] for r in res_drop.rounds)


def test_staleness_bound_drops_reports_that_are_too_late(run_deadline):
    sim, res = run_deadline({"name": "stale_aware", "rule": "dynsgd", "max_staleness": 1})
    assert sum(r["n_stale"] for r in res.rounds) == 0  # every straggler arrives 2 rounds late
    assert sum(r["n_stale_dropped"] for r in res.rounds) > 0




@pytest.mark.parametrize("rule", ["refl", "equal", "dynsgd", "adasgd", "average"])
def test_trains_on_synthetic_with_p2_participation(rule, build_simulation):
    raw = {"name": "p2", "seeds": [0], "rounds": 30,
           "data": {"name": "synthetic", "num_clients": 20, "alpha": 0.5, "beta": 0.5}, "model": {"name": "logreg"},
           "train": {"batch_size": 10, "local_steps": 5, "lr": 0.05}, "availability": {"name": "p2_bernoulli"},
           "selector": {"name": "uniform", "clients_per_round": 20}, "eval": {"every": 30},
           "output": {"progress": False}, "algorithm": {"name": "stale_aware", "rule": rule}}
    sim = build_simulation(raw)
    data = sim.data
    first = evaluate(sim.model, sim.params, sim.buffers, data.x_server_test, data.y_server_test)[1]
    res = sim.run()
    assert math.isfinite(res.rounds[-1]["loss"]) and res.rounds[-1]["loss"] < 0.6 * first


# ---- YoGi on the stale-aware aggregate (REFL §5.1) ----------------------------------------------
YOGI = {"name": "yogi", "server_lr": 3e-3, "tau": 1e-8, "beta2": 0.99, "init": "fedscale"}


def test_yogi_server_step_is_applied_to_the_staleness_weighted_aggregate():
    from turnout.algorithms.server_step import ServerStep, ServerStepConfig

    alg = make(rule="dynsgd", server_optimizer=YOGI)
    ref = ServerStep(ServerStepConfig(name="yogi", lr=3e-3, tau=1e-8, beta2=0.99, init="fedscale"))
    plain = make(rule="dynsgd")  # the same rule without an optimiser: x + 1 · aggregate
    x = torch.tensor([1.0, -1.0])
    for r, (ups, w, tau) in enumerate([([[1.0, 0.0], [3.0, 2.0], [0.5, 0.5]], [1.0, 1.0, 1.0], [0, 0, 2]),
                                       ([[0.2, -0.4], [1.0, 1.0]], [1.0, 2.0], [0, 1])]):
        agg = plain.aggregate(r, x, reports(ups, w, tau)) - x  # the staleness-weighted aggregate
        new = alg.aggregate(r, x, reports(ups, w, tau))
        torch.testing.assert_close(new, ref.apply(r, x, agg))
        if r == 0:  # FedScale's YoGi: the first round is a plain step
            torch.testing.assert_close(new, x + agg)
        x = new
    torch.testing.assert_close(alg.server_step.m, ref.m)
    assert torch.equal(alg.aggregate(2, x, EMPTY), x)  # no reports: neither the model nor the moments move
    torch.testing.assert_close(alg.server_step.v, ref.v)


def test_default_has_no_optimiser_and_a_second_step_size_is_refused():
    assert make().server_step.cfg.plain and make().cfg.server_optimizer.name == "none"
    with pytest.raises(ValueError, match="server_optimizer.server_lr"):
        StaleAwareConfig(server_lr=0.5, server_optimizer=YOGI)


def test_yogi_with_stale_models_runs_through_the_engine_and_checkpoints(run_deadline, build_simulation):
    from turnout.core.state import decode_state, encode_state

    algo = {"name": "stale_aware", "rule": "refl", "combine": "models", "server_optimizer": YOGI}
    sim, res = run_deadline(algo)
    assert sum(r["n_stale"] for r in res.rounds) > 0 and math.isfinite(res.rounds[-1]["loss"])
    assert sim.algorithm.server_step.m is not None
    arrays, meta = encode_state(sim.algorithm.state_dict())
    fresh = build_simulation({**DEADLINE, "algorithm": algo}).algorithm
    fresh.load_state_dict(decode_state(arrays, meta))
    torch.testing.assert_close(fresh.server_step.v, sim.algorithm.server_step.v)
