"""Every algorithm of this issue trains on Synthetic(0.5, 0.5) under FedSUM's P2 participation
(independent Bernoulli(p_i) availability, every available client takes part, as the FedAU/FedAWE code samples)."""

import math

import numpy as np
import pytest

import turnout.algorithms.fedau  # noqa: F401  (registers components)
import turnout.algorithms.fedawe  # noqa: F401
import turnout.algorithms.fedprox  # noqa: F401
import turnout.algorithms.fedvarp  # noqa: F401
import turnout.algorithms.mifa  # noqa: F401
import turnout.algorithms.scaffold  # noqa: F401
import turnout.algorithms.server_optim  # noqa: F401
from turnout.sim.engine import build_model
from turnout.training.local_sgd import evaluate

N = 30
P2 = {
    "name": "p2", "seeds": [0], "rounds": 15,
    "data": {"name": "synthetic", "num_clients": N, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 10, "lr": 0.05},
    "availability": {"name": "p2_bernoulli"},
    "selector": {"name": "uniform", "clients_per_round": N, "weighting": "equal"},
    "eval": {"every": 15},
    "output": {"progress": False},
}
ALGOS = [
    {"name": "fedavg", "server_lr_decay": 0.98, "server_lr_decay_every": 10},
    {"name": "fedprox", "mu": 0.01},
    {"name": "scaffold", "form": "original"},
    {"name": "scaffold", "form": "single_uplink"},
    {"name": "fedadam", "server_lr": 0.03},
    {"name": "fedyogi", "server_lr": 0.03},
    {"name": "fedau"},
    {"name": "fedawe"},
    {"name": "fedvarp"},
    {"name": "mifa"},
]


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: "-".join(str(v) for v in a.values()))
def test_trains_on_synthetic_with_p2_participation(algo, build_simulation):
    sim = build_simulation({**P2, "algorithm": algo})
    exp, data = sim.exp, sim.data
    res = sim.run()
    n_agg = [r["n_aggregated"] for r in res.rounds]
    assert 0 < np.mean(n_agg) < N  # partial participation: every available client, not everyone
    assert all(r["n_aggregated"] == r["n_available"] for r in res.rounds)
    init = evaluate(sim.model, build_model(exp, data, 0).flat_params(), {}, data.x_server_test, data.y_server_test)[1]
    final = res.rounds[-1]["loss"]
    if algo["name"] == "fedawe":  # FedAWE is judged on the mean of the clients' copies, as its code does
        final = evaluate(sim.model, sim.algorithm.eval_params(sim.params), {}, data.x_server_test,
                         data.y_server_test)[1]
    assert math.isfinite(final) and final < 0.6 * init, (algo, init, final)
