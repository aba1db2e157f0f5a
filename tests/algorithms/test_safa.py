"""SAFA (docs/algorithms/baselines.md#safa): REFL's emulation (every online client launched, a target
ratio of reports, deadline rounds, stale bound 5) plus SAFA's cache of the latest client models."""

import dataclasses
import math

import numpy as np
import pytest
import torch

import turnout.algorithms.safa  # noqa: F401  (registers components)
from turnout.algorithms.base import AlgorithmContext, Reports
from turnout.algorithms.safa import CACHE_SLOT, SAFA, SAFAConfig
from turnout.selectors.base import SelectionContext
from turnout.selectors.safa import SAFASelector
from turnout.training.local_sgd import evaluate
from turnout.world.context import WorldContext


def test_selector_launches_every_online_client_and_wants_a_ratio_of_them():
    world = WorldContext(num_clients=50, n_train=np.arange(1, 51), label_hist=np.ones((50, 2)), seed=0, rounds=5)
    sel = SAFASelector(SAFASelector.Config(target_ratio=0.1), world)
    assert sel.target() == 50
    online = np.arange(0, 50, 2)  # 25 online
    ctx = SelectionContext(round=0, time_s=0.0, available=online, launch=sel.target(), rng=np.random.default_rng(0),
                           world=world, availability=None, probe_loss=None)
    cohort = sel.select(ctx)
    assert cohort.clients.tolist() == online.tolist() and cohort.target == 2  # ⌊25 · 0.1⌋
    np.testing.assert_array_equal(cohort.weights, online + 1)  # n_k
    capped = SAFASelector(SAFASelector.Config(target_ratio=0.5, clients_per_round=10), world)
    ctx = dataclasses.replace(ctx, launch=capped.target())
    c2 = capped.select(ctx)
    assert len(c2.clients) == 10 and set(c2.clients) <= set(online) and c2.target == 5
    ctx = dataclasses.replace(ctx, available=np.zeros(0, np.int64))
    assert len(sel.select(ctx).clients) == 0


def reports(clients, ups, staleness):
    k = len(clients)
    return Reports(np.asarray(clients), torch.tensor(ups, dtype=torch.float32), np.ones(k), True, np.full(k, 5),
                   np.zeros(k), np.asarray(staleness, np.int64))


def test_cache_average_with_stale_models_and_forced_sync():
    n_train = np.array([1, 2, 3, 4])
    p = n_train / n_train.sum()
    alg = SAFA(SAFAConfig(max_staleness=1), AlgorithmContext(4, 2, n_train, 0, 10))
    x0 = torch.tensor([0.0, 0.0])
    x1 = alg.aggregate(0, x0, reports([0], [[1.0, 2.0]], [0]))
    m0 = x0 + torch.tensor([1.0, 2.0])
    torch.testing.assert_close(x1, p[0] * m0)  # everyone else still holds x^0 = 0
    # round 1: client 2 fresh (on x^1), client 1 stale by one round (built on x^0)
    x2 = alg.aggregate(1, x1, reports([2, 1], [[0.0, 1.0], [4.0, 0.0]], [0, 1]))
    m1, m2 = x0 + torch.tensor([4.0, 0.0]), x1 + torch.tensor([0.0, 1.0])
    torch.testing.assert_close(x2, (p[0] * m0 + p[1] * m1 + p[2] * m2 + p[3] * x0).float())
    assert alg.version.tolist() == [0, 0, 1, 0]
    # round 2, nobody reports: entries built on x^0 are 2 > 1 rounds old → re-synced to x^2
    x3 = alg.aggregate(2, x2, reports([], np.zeros((0, 2)), []))
    assert alg.version.tolist() == [2, 2, 1, 2] and alg.last_deprecated == 3
    torch.testing.assert_close(x3, ((p[0] + p[1] + p[3]) * x2 + p[2] * m2).float())
    torch.testing.assert_close(alg.store.get(CACHE_SLOT, np.array([3]))[0], x2)


def test_fedavg_aggregation_is_refls_emulation():
    alg = SAFA(SAFAConfig(aggregation="fedavg"), AlgorithmContext(4, 2, np.ones(4), 0, 10))
    assert alg.max_staleness == 5
    x = torch.tensor([1.0, 1.0])
    new = alg.aggregate(3, x, reports([0, 1], [[2.0, 0.0], [0.0, 4.0]], [0, 3]))
    torch.testing.assert_close(new, x + torch.tensor([1.0, 2.0]))


N = 20
EMULATION = {
    "name": "safa", "seeds": [0], "rounds": 30,
    "data": {"name": "digits", "num_clients": N, "partition": {"name": "dirichlet", "alpha": 0.3}},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 5, "lr": 0.1},
    "selector": {"name": "safa", "target_ratio": 0.3},
    "round_mode": {"name": "deadline", "deadline_s": 0.25, "max_reports": "target"},
    "eval": {"every": 30},
    "output": {"progress": False},
}


@pytest.mark.parametrize("aggregation", ["cache", "fedavg"])
def test_refl_emulation_through_the_engine(aggregation, build_simulation, compute_speeds):
    speeds = compute_speeds(lambda c: 0.001 * (1 + np.arange(len(c)) % 10))  # 0.05 … 0.5 s per round
    sim = build_simulation({**EMULATION, "algorithm": {"name": "safa", "aggregation": aggregation}},
                           components={"devices": speeds})
    data = sim.data
    first = evaluate(sim.model, sim.params, sim.buffers, data.x_server_test, data.y_server_test)[1]
    res = sim.run()
    for row in res.rounds:
        # every online client not still busy with a late report is launched; at most ⌊0.3·launched⌋ fresh reports
        assert row["n_selected"] == row["n_available"]
        assert row["n_aggregated"] - row["n_stale"] <= max(1, math.floor(0.3 * row["n_selected"]))
    assert sum(r["n_stale"] for r in res.rounds) > 0
    # the cache average moves the model by Σ_{reporters} p_k Δ_k only: slower than FedAvg, still clearly training
    assert res.rounds[-1]["loss"] < 0.7 * first
    if aggregation == "cache":
        assert sim.store.has(CACHE_SLOT, np.arange(N)).sum() > 0




@pytest.mark.parametrize("aggregation", ["cache", "fedavg"])
def test_trains_on_synthetic_with_p2_participation(aggregation, build_simulation):
    raw = {"name": "p2", "seeds": [0], "rounds": 30,
           "data": {"name": "synthetic", "num_clients": 20, "alpha": 0.5, "beta": 0.5}, "model": {"name": "logreg"},
           "train": {"batch_size": 10, "local_steps": 5, "lr": 0.05}, "availability": {"name": "p2_bernoulli"},
           "selector": {"name": "uniform", "clients_per_round": 20}, "eval": {"every": 30},
           "output": {"progress": False}, "algorithm": {"name": "safa", "aggregation": aggregation}}
    sim = build_simulation(raw)
    data = sim.data
    first = evaluate(sim.model, sim.params, sim.buffers, data.x_server_test, data.y_server_test)[1]
    res = sim.run()
    assert res.rounds[-1]["loss"] < 0.6 * first
