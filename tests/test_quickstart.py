"""The README's main job: FedAvg on Synthetic(0.5, 0.5) gets within 3 points of centralised training."""

from pathlib import Path

import pytest

from turnout.app.cli import main

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"


def test_quickstart_config_is_valid_and_small():
    from turnout.sim.composition import load_experiment

    variants = load_experiment(QUICKSTART)
    assert [v.variant for v in variants] == ["K=5", "K=10", "K=20"]
    assert variants[0]["data"].name == "synthetic" and variants[0]["model"].name == "logreg"


@pytest.mark.slow  # ~14 s; the golden hashes pin the quickstart's numbers in the default suite
def test_shorter_quickstart_is_within_three_points_of_centralized(tmp_path):
    """150 rounds of the K=20 variant (the full job runs 300): the gap to centralised is < 3 points."""
    out = tmp_path / "qs"
    assert main(["run", str(QUICKSTART), "--quiet", "--out", str(out), "--set", "rounds=150",
                 "--set", "variants=[]", "--set", "selector.clients_per_round=20"]) == 0
    import json

    run = json.loads((out / "summary.json").read_text())["runs"][0]
    central = run["centralized_accuracy"]
    assert central > 0.85  # the ceiling itself is a well-trained model (sklearn's lbfgs gets 0.915 here)
    assert run["final_accuracy"] > 0.5  # far above chance (0.1)
    assert central - run["final_accuracy"] < 0.03, (central, run["final_accuracy"])
