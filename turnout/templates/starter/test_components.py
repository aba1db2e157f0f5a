"""Tests of components.py: each rule on numbers worked out by hand, then the experiment run end to end.

Run with ``python -m pytest __NAME__`` (``pip install pytest`` first if needed). The pattern is
turnout's own: a component is checked on its own inputs, then inside a short real run.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

import turnout
from turnout.algorithms.base import AlgorithmContext
from turnout.core.records import Reports
from turnout.sim import plugins
from turnout.sim.composition import registries

HERE = Path(__file__).resolve().parent


def components():
    """(selector class, algorithm class), imported as a run imports them (``plugins:`` of the experiment)."""
    plugins.load([str(HERE / "components.py")])
    return registries()["selector"].get("my_selector"), registries()["algorithm"].get("my_rule")


CTX = AlgorithmContext(num_clients=3, dim=2, n_train=np.array([10, 10, 20]), seed=0, rounds=1)
# norms 5, 1, 50: only the last is clipped (to 5)
REPORTS = Reports(clients=np.arange(3), updates=torch.tensor([[3.0, 4.0], [0.0, 1.0], [30.0, 40.0]]),
                  weights=np.array([1.0, 1.0, 2.0]), normalize=True, n_samples=np.array([10, 10, 20]),
                  losses=np.zeros(3), staleness=np.zeros(3, np.int64))


def test_my_rule_clips_long_updates_then_takes_the_weighted_mean():
    _, rule_cls = components()
    rule = rule_cls(rule_cls.Config(clip_norm=5.0, server_lr=1.0), CTX)
    start = torch.tensor([1.0, 1.0])
    # (1·[3, 4] + 1·[0, 1] + 2·[3, 4]) / 4 = [2.25, 3.25]
    torch.testing.assert_close(rule.aggregate(0, start, REPORTS), start + torch.tensor([2.25, 3.25]))


def test_my_rule_takes_yogis_step_from_the_config_alone():
    """The same direction d = [2.25, 3.25] under ``server_step: {name: yogi}`` (Reddi et al.): from m = 0,
    v = τ², the first step is η (1 − β₁) d / (√(τ² + (1 − β₂) d²) + τ), nearly η in every coordinate."""
    _, rule_cls = components()
    cfg = rule_cls.Config(clip_norm=5.0, server_step={"name": "yogi", "lr": 0.01, "beta1": 0.9, "beta2": 0.99,
                                                      "tau": 1e-3})
    rule = rule_cls(cfg, CTX)
    start = torch.tensor([1.0, 1.0])
    step = rule.aggregate(0, start, REPORTS) - start
    want = [0.01 * 0.1 * d / (math.sqrt(1e-6 + 0.01 * d * d) + 1e-3) for d in (2.25, 3.25)]  # 0.009956, 0.009969
    torch.testing.assert_close(step, torch.tensor(want), rtol=1e-5, atol=1e-8)
    nobody = Reports(clients=np.zeros(0, np.int64), updates=torch.zeros(0, 2), weights=np.zeros(0), normalize=True,
                     n_samples=np.zeros(0, np.int64), losses=np.zeros(0), staleness=np.zeros(0, np.int64))
    assert torch.equal(rule.aggregate(1, start, nobody), start)  # nobody reported: the model stays put


def test_the_experiment_runs_and_my_selector_gives_everyone_a_turn(tmp_path):
    components()
    # 6 rounds of 10 from 30 always-available clients: fewest turns first launches every client twice
    results = turnout.run(HERE / "experiment.yaml", overrides={"rounds": 6, "seeds": [0]}, out=tmp_path / "run",
                          quiet=True)
    mine = results.clients[results.clients["variant"] == "mine"]
    assert mine["times_selected"].tolist() == [2] * 30
    final = results.comparison.set_index(["variant", "seed"])["final_accuracy"]
    assert final[("mine", "0")] > 0.5  # 10 classes: well above chance after 6 rounds
    assert final[("mine+yogi", "0")] > 0.5  # the same rule under Yogi's server step, set in experiment.yaml
