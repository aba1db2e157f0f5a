"""Loss probes (Power-of-Choice) return real losses and are billed to the round."""

import numpy as np
import pytest
import torch

from turnout.core.records import Cohort
from turnout.selectors.base import Selector
from turnout.training.local_sgd import evaluate

RAW = {"name": "probe", "rounds": 2, "data": {"name": "synthetic", "num_clients": 10}, "model": {"name": "logreg"},
       "train": {"batch_size": 10, "local_steps": 2}, "selector": {"name": "uniform", "clients_per_round": 2},
       "devices": {"name": "homogeneous", "compute_s_per_sample": 0.003, "down_kBps": 100, "up_kBps": 50},
       "output": {"progress": False}}
DIM = 610


class ProbeThenPickWorst(Selector):
    """Probe clients 0–4 on their full data, launch the two with the highest loss."""

    Config = None
    seen = []

    def target(self):
        return 2

    def select(self, ctx):
        cand = np.arange(5)
        losses = ctx.probe_loss(cand, None)
        self.seen.append((ctx.round, losses))
        pick = np.sort(cand[np.argsort(-losses)[:2]])
        return Cohort(pick, np.ones(2))


def test_probe_losses_and_costs(build_simulation):
    sim = build_simulation(RAW, components={"selector": lambda ctx: ProbeThenPickWorst(None, ctx.world)})
    data = sim.data
    start = sim.params.clone()
    row0 = sim.step(0)
    _, losses = ProbeThenPickWorst.seen[-1]
    for c in range(5):  # the probe's loss is the global model's loss on the client's training data
        x, y = data.client_train(c)
        assert losses[c] == pytest.approx(evaluate(sim.model, start, {}, x, y)[1], rel=1e-5)
    n = data.n_train[:5]
    probe_s = 4 * DIM / 100e3 + n * 0.003 / 3 + 4 / 50e3
    # 5 full-model downloads for the probe; the 2 launched clients then lack nothing more
    assert row0["bytes_down"] == 5 * 4 * DIM
    assert row0["bytes_up"] == 5 * 4 + 2 * 4 * DIM
    train_s = 0 / 100e3 + 20 * 0.003 + 4 * DIM / 50e3
    assert row0["round_duration_s"] == pytest.approx(probe_s.max() + train_s)
    assert row0["resource_s"] == pytest.approx(probe_s.sum() + 2 * train_s)
    assert sim.population.resource_s.sum() == pytest.approx(row0["resource_s"])
    assert torch.any(sim.params != start)
