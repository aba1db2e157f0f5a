"""A model that stops being finite ends its unit: reported as diverged, its accuracy not reported as a result."""

import math

import torch

from turnout.algorithms.fedavg import FedAvg, FedAvgConfig
from turnout.app.commands.run import outcome_lines
from turnout.core.metrics import comparison_rows, cumulate, summarize

RAW = {"name": "div", "rounds": 6, "data": {"name": "synthetic", "num_clients": 12}, "model": {"name": "logreg"},
       "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
       "selector": {"name": "uniform", "clients_per_round": 4},
       "eval": {"every": 1, "target_accuracy": 0.05}, "output": {"progress": False}}


class BlowsUpAtRound2(FedAvg):
    """FedAvg whose aggregate becomes infinite in round 2 (what server_lr = 1e308 used to do at once)."""

    def aggregate(self, round, params, reports):
        out = super().aggregate(round, params, reports)
        return out * float("inf") if round == 2 else out


def test_divergence_stops_the_unit_and_is_reported(build_simulation):
    sim = build_simulation(RAW, components={"algorithm": lambda ctx: BlowsUpAtRound2(FedAvgConfig(),
                                                                                     ctx.algorithm_context)})
    res = sim.run()
    assert [r["round"] for r in res.rounds] == [0, 1, 2]  # the run stopped at the round that diverged
    assert not math.isnan(res.rounds[1]["accuracy"]) and math.isnan(res.rounds[2]["accuracy"])
    assert not torch.isfinite(res.final_params).all()
    assert res.summary["diverged_at_round"] == 2
    cumulate(res.rounds)
    s = summarize(res.variant, res.seed, res.rounds, res.summary, target=0.05)
    # rounds 0–1 reached the target, but a diverged run's accuracy and to-target figures are not results
    for key in ("final_accuracy", "best_accuracy", "tail_accuracy", "final_loss", "rounds_to_target"):
        assert math.isnan(s[key]), key
    mean = [r for r in comparison_rows([s]) if r["seed"] == "mean"][0]
    assert mean["diverged_at_round"] == 2 and math.isnan(mean["final_accuracy"])
    line = outcome_lines({"variants": [mean], "runs": [s]})[0]
    assert "final accuracy —" in line and "diverged in 1 of 1 seed (at round 2)" in line


def test_a_finite_run_has_no_divergence_mark(simulate):
    _, res = simulate(RAW)
    assert len(res.rounds) == 6 and "diverged_at_round" not in res.summary
