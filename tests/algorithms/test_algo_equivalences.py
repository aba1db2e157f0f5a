"""Through the real engine: the FedSUM baselines (FedAU, FedAWE, FedVARP, MIFA) reduce to FedAvg under
full participation, FedProx μ=0 is FedAvg, μ>0 pulls local models toward the start, and SCAFFOLD's two
uplink forms give one model."""

import numpy as np
import pytest
import torch

import turnout.algorithms.fedau  # noqa: F401  (registers components)
import turnout.algorithms.fedawe  # noqa: F401
import turnout.algorithms.fedprox  # noqa: F401
import turnout.algorithms.fedvarp  # noqa: F401
import turnout.algorithms.mifa  # noqa: F401
import turnout.algorithms.scaffold  # noqa: F401

N = 12
FULL = {
    "name": "equiv", "seeds": [0], "rounds": 3,
    "data": {"name": "synthetic", "num_clients": N, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 4, "lr": 0.05},
    "selector": {"name": "uniform", "clients_per_round": N, "weighting": "equal"},
    "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
    "eval": {"every": 3},
    "output": {"progress": False},
}




def with_algo(algo, **over):
    return {**FULL, "algorithm": algo, **over}


@pytest.fixture(scope="module")
def fedavg_full(simulate):
    sim, res = simulate(with_algo({"name": "fedavg"}))
    return sim.params


@pytest.mark.parametrize("algo", [{"name": "mifa"}, {"name": "fedvarp"}, {"name": "fedau"},
                                  {"name": "fedawe", "clip": None}])
def test_baselines_equal_fedavg_under_full_participation(algo, fedavg_full, simulate):
    sim, res = simulate(with_algo(algo))
    assert all(r["n_aggregated"] == N for r in res.rounds)
    torch.testing.assert_close(sim.params, fedavg_full, rtol=1e-5, atol=1e-6)
    if algo["name"] == "fedawe":  # and its evaluation model (the mean of all copies) is that same model
        torch.testing.assert_close(sim.algorithm.eval_params(sim.params), fedavg_full, rtol=1e-5, atol=1e-6)
        assert (sim.algorithm.echo == 1).all()


def test_fedau_weights_are_one_under_full_participation(simulate):
    sim, res = simulate(with_algo({"name": "fedau"}))
    np.testing.assert_array_equal(sim.algorithm.last_weights, np.ones(N))
    np.testing.assert_array_equal(sim.algorithm.interval_count, np.full(N, 3))
    np.testing.assert_array_equal(sim.algorithm.interval_sum, np.full(N, 3.0))


def test_fedawe_with_clip_differs_from_fedavg(fedavg_full, simulate):
    sim, _ = simulate(with_algo({"name": "fedawe", "clip": 1e-3}))
    assert not torch.allclose(sim.params, fedavg_full, atol=1e-4)


def test_fedprox_mu0_is_fedavg_and_mu_pulls_toward_start(fedavg_full, simulate):
    sim, _ = simulate(with_algo({"name": "fedprox", "mu": 0.0}))
    torch.testing.assert_close(sim.params, fedavg_full, rtol=0, atol=0)
    # one round: the averaged step shrinks as μ grows (each local model stays nearer its start)
    x0 = simulate(with_algo({"name": "fedavg"}, rounds=1))[0]
    x0_params = x0.params
    from turnout.sim.engine import build_model
    start = build_model(x0.exp, x0.data, 0).flat_params()
    steps = {}
    for mu in (0.0, 1.0, 10.0):
        s, _ = simulate(with_algo({"name": "fedprox", "mu": mu}, rounds=1))
        steps[mu] = float((s.params - start).norm())
    assert steps[0.0] == pytest.approx(float((x0_params - start).norm()))
    assert steps[10.0] < steps[1.0] < steps[0.0]
    assert steps[10.0] < 0.8 * steps[0.0]


def test_fedprox_objective_pulls_each_local_model_toward_its_start(build_simulation):
    from turnout.algorithms.base import AlgorithmContext
    from turnout.algorithms.fedprox import FedProx, FedProxConfig
    from turnout.core import rng
    from turnout.sim.engine import build_model
    from turnout.training.local_sgd import LocalTrainer

    sim = build_simulation(with_algo({"name": "fedavg"}))
    exp, data = sim.exp, sim.data
    fm = build_model(exp, data, 0)
    start = fm.flat_params()
    trainer = LocalTrainer(fm, exp.train)
    x, y = data.client_train(3)
    dist = {}
    for mu in (0.0, 0.5, 5.0):
        algo = FedProx(FedProxConfig(mu=mu), AlgorithmContext(N, fm.dim, data.n_train, 0, 1))
        out = trainer.train(start, {}, x, y, 20, 0.05, rng.stream(0, "batches", 0, 3),
                            objective=algo.local_objective(3, start))
        dist[mu] = float((out.params - start).norm())
    assert dist[5.0] < dist[0.5] < dist[0.0]


def test_scaffold_forms_give_one_model_and_differ_exactly_in_upload_bytes(simulate):
    partial = {"selector": {"name": "uniform", "clients_per_round": 5}, "rounds": 4}
    a, ra = simulate(with_algo({"name": "scaffold", "form": "original"}, **partial))
    b, rb = simulate(with_algo({"name": "scaffold", "form": "single_uplink"}, **partial))
    torch.testing.assert_close(a.params, b.params, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a.algorithm.c.float(), b.algorithm.c.float(), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(a.params, simulate(with_algo({"name": "fedavg"}, **partial))[0].params, atol=1e-4)
    dim = a.model.dim
    for x, y in zip(ra.rounds, rb.rounds):
        assert x["bytes_up"] == 2 * y["bytes_up"] == 2 * 5 * dim * 4
        assert x["bytes_down"] == y["bytes_down"]
    np.testing.assert_array_equal(a.population.bytes_up, 2 * b.population.bytes_up)


def test_fedawe_evaluation_model_is_the_mean_of_all_copies_under_partial_participation(simulate):
    from turnout.algorithms.base import Algorithm
    from turnout.training.local_sgd import evaluate

    sim, res = simulate(with_algo({"name": "fedawe"}, selector={"name": "uniform", "clients_per_round": 4}))
    algo = sim.algorithm
    x_bar = algo.eval_params(sim.params)
    assert not torch.allclose(x_bar, sim.params, atol=1e-4)
    # the running sum matches the copies themselves (clients never selected still hold x⁰)
    torch.testing.assert_close(x_bar, algo.copies(np.arange(N)).mean(0), rtol=1e-5, atol=1e-6)
    assert (~sim.store.has("fedawe/x_hat", np.arange(N))).any() and algo.echo.max() == 4
    loss = evaluate(sim.model, x_bar, {}, sim.data.x_server_test, sim.data.y_server_test)[1]
    if hasattr(Algorithm, "eval_params"):  # once the engine evaluates Algorithm.eval_params(global)
        assert res.rounds[-1]["loss"] == pytest.approx(loss)
