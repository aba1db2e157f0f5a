"""SCAFFOLD's control variates through the engine: option II, c = mean_i c_i, and a 10,000-client run whose
state spills past a 200 MB budget yet gives the same model as an unlimited budget."""

import dataclasses

import numpy as np
import pytest
import torch

import turnout.algorithms.scaffold  # noqa: F401  (registers components)
from turnout.core import rng
from turnout.runs.experiment import prepare
from turnout.sim.composition import expand
from turnout.sim.engine import Simulation, build_model
from turnout.training.local_sgd import LocalTrainer

N = 12
RAW = {
    "name": "scaffold", "seeds": [0], "rounds": 4,
    "data": {"name": "synthetic", "num_clients": N, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 4, "lr": 0.05},
    "algorithm": {"name": "scaffold"},
    "selector": {"name": "uniform", "clients_per_round": 5},
    "eval": {"every": 4},
    "output": {"progress": False},
}


def test_option_two_control_variates_and_their_mean(build_simulation):
    sim = build_simulation(RAW)
    exp, data = sim.exp, sim.data
    try:
        x0 = sim.params.clone()
        sim.step(0)
        picked = np.flatnonzero(sim.population.times_aggregated)
        assert len(picked) == 5
        # round 0 starts from c = c_i = 0: local training is plain SGD and c_i⁺ = (x⁰ − y_K)/(K η)
        trainer = LocalTrainer(build_model(exp, data, 0), exp.train)
        for c in picked:
            x, y = data.client_train(int(c))
            end = trainer.train(x0, {}, x, y, 4, 0.05, rng.stream(0, "batches", 0, int(c))).params
            torch.testing.assert_close(sim.store.get("scaffold/c_i", [c])[0], (x0 - end) / (4 * 0.05),
                                       rtol=1e-4, atol=1e-5)
        for r in range(1, 4):
            sim.step(r)
        ci = sim.store.get("scaffold/c_i", np.arange(N))
        torch.testing.assert_close(sim.algorithm.c.float(), ci.mean(0), rtol=1e-5, atol=1e-6)
        assert sim.store.has("scaffold/c_i", np.arange(N)).sum() == (sim.population.times_aggregated > 0).sum()
    finally:
        sim.store.close()


def test_small_budget_spills_and_gives_the_same_model(tmp_path, build_simulation):
    exp_raw = {**RAW, "rounds": 3, "selector": {"name": "uniform", "clients_per_round": 8}}
    out = {}
    for budget in (0.01, 1e6):  # 0.01 MB holds 4 rows of the 610-parameter model
        sim = build_simulation({**exp_raw, "runtime": {"state_budget_mb": budget}},
                               scratch_dir=tmp_path / f"b{budget:g}")
        out[budget] = sim.run()
    assert out[0.01].summary["state_spilled_bytes"] > 0 == out[1e6].summary["state_spilled_bytes"]
    assert out[0.01].summary["state_rows"] == out[1e6].summary["state_rows"] > 4
    assert torch.equal(out[0.01].final_params, out[1e6].final_params)


BIG = {
    "name": "spill", "seeds": [0], "rounds": 4,
    "data": {"name": "synthetic", "num_clients": 10_000, "dim": 10, "min_samples": 5},
    "model": {"name": "mlp", "hidden": [320, 300]},
    "train": {"batch_size": 5, "local_steps": 1, "lr": 0.05},
    "algorithm": {"name": "scaffold"},
    "selector": {"name": "uniform", "clients_per_round": 160, "weighting": "equal"},
    "eval": {"every": 4},
    "output": {"progress": False},
}


@pytest.mark.slow
def test_ten_thousand_clients_spill_past_the_budget_with_the_same_model(tmp_path):
    finals, stats = {}, {}
    data = None
    for budget in (200.0, 1e6):
        exp = expand({**BIG, "runtime": {"state_budget_mb": budget}})[0]
        if data is None:
            data = prepare([exp]).dataset_for(exp, 0)
            # keep the final evaluation cheap: a 2,000-row server test set
            data = dataclasses.replace(data, x_server_test=data.x_server_test[:2000],
                                       y_server_test=data.y_server_test[:2000])
        sim = Simulation(exp, data, 0, scratch_dir=tmp_path / f"b{budget:g}")
        assert sim.model.dim >= 100_000
        res = sim.run()
        finals[budget], stats[budget] = res.final_params, res.summary
    rows = stats[200.0]["state_rows"]
    assert rows == stats[1e6]["state_rows"] > 200 * 2**20 // (4 * sim.model.dim)  # more rows than fit in RAM
    assert stats[200.0]["state_spilled_bytes"] > 0 and stats[1e6]["state_spilled_bytes"] == 0
    assert stats[200.0]["state_peak_ram_bytes"] <= 200 * 2**20
    assert torch.equal(finals[200.0], finals[1e6])
    assert not list(tmp_path.rglob("*.f32"))  # spill files removed when the run ends
