"""System-only mode (--no-train): the same world as a trained run, without the model; refusals; a large population."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from turnout.core.errors import ConfigError
from turnout.data.population import PopulationDataset
from turnout.sim.composition import expand
from turnout.sim.system_only import PROXY_NOTE, SystemOnlyWork, samples_processed
from turnout.training.local_sgd import batch_indices

ROOT = Path(__file__).resolve().parents[1]
BASE = {"name": "whatif", "rounds": 8, "data": {"name": "synthetic", "num_clients": 24}, "model": {"name": "logreg"},
        "train": {"batch_size": 10, "local_steps": 4, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": 4}, "devices": {"name": "flash"},
        "eval": {"every": 2}, "output": {"progress": False, "plots": False}}
#: settings whose system numbers do not depend on update values: the trained run and the proxy must agree
SETTINGS = {
    "wait_all": {},
    "deadline_late_reports_stale_rule": {"round_mode": {"name": "deadline", "deadline_s": 0.1},
                                         "algorithm": {"name": "stale_aware", "rule": "refl"},
                                         "selector": {"name": "refl_ips", "clients_per_round": 4, "apt": "paper"}},
    "over_commit_sticky_trace": {"round_mode": {"name": "over_commit", "oc": 1.5}, "availability": {"name": "trace"},
                                 "selector": {"name": "sticky", "clients_per_round": 4, "sticky_size": 8,
                                              "sticky_per_round": 3}},
    "fedsum_two_vectors_down_quant8": {"algorithm": {"name": "fedsum"}, "compressor": {"name": "quant8"},
                                       "train": {"batch_size": 10, "local_epochs": 1, "lr": 0.05}},
}
#: what only a trained run has: evaluation, training loss, the algorithm's own columns
TRAINED_ONLY = {"accuracy", "loss", "train_loss", "stale_weight_mean", "safa_deprecated"}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_proxy_reproduces_a_trained_runs_participation_bytes_time_and_waste(setting, simulate):
    raw = {**copy.deepcopy(BASE), **SETTINGS[setting]}
    trained_sim, trained = simulate(raw)
    system_sim, system = simulate({**raw, "no_train": True})
    assert isinstance(system_sim.work, SystemOnlyWork) and not isinstance(trained_sim.work, SystemOnlyWork)
    compared = 0
    for a, b in zip(trained.rounds, system.rounds, strict=True):
        assert all(math.isnan(b[k]) for k in ("accuracy", "loss", "train_loss"))
        for key, value in a.items():
            if key not in TRAINED_ONLY:
                assert b[key] == value, (setting, a["round"], key)
                compared += 1
    assert compared >= 8 * 19  # every row column but the trained-only ones (19 of them), every round
    for key in ("times_selected", "times_aggregated", "bytes_up", "bytes_down", "resource_s", "wasted_s",
                "last_round"):
        np.testing.assert_array_equal(trained.clients[key], system.clients[key], err_msg=key)
    assert system.summary["system_only"] is True
    assert sum(r["bytes_down"] for r in system.rounds) > 0 and sum(r["n_aggregated"] for r in system.rounds) > 0


def test_late_reports_really_are_in_flight_in_the_deadline_setting(simulate):
    _, system = simulate({**copy.deepcopy(BASE), **SETTINGS["deadline_late_reports_stale_rule"], "no_train": True})
    assert sum(r["n_late"] for r in system.rounds) > 0 and sum(r["n_stale"] for r in system.rounds) > 0


@pytest.mark.parametrize("n,batch,steps", [(0, 10, 5), (7, 10, 1), (7, 10, 3), (25, 10, 2), (25, 10, 3),
                                          (25, 10, 7), (30, 10, 6), (1, 5, 4), (100, 32, 10)])
def test_samples_processed_counts_what_local_sgd_draws(n, batch, steps):
    drawn = sum(len(b) for b in batch_indices(n, batch, steps, np.random.default_rng(0)))
    assert samples_processed(np.array([n]), batch, np.array([steps]))[0] == drawn


REFUSED = {
    "selector": ({"name": "power_of_choice", "clients_per_round": 4},
                 "ranks clients by their loss on the global model"),
    "compressor": ({"name": "topk", "ratio": 0.1}, "sends the largest coordinates of each update"),
    "algorithm": ({"name": "adaptive_ou"}, "decides from each update's norm whether to send it or a NACK"),
}


@pytest.mark.parametrize("seam", list(REFUSED))
def test_components_that_need_a_trained_model_are_refused_in_one_line(seam):
    block, why = REFUSED[seam]
    with pytest.raises(ConfigError) as err:
        expand({**copy.deepcopy(BASE), seam: block, "no_train": True})
    text = str(err.value)
    assert text.startswith(f"{seam}.name = '{block['name']}': {why}, so it needs a trained model; without training "
                           "(--no-train) use one of: ")
    assert block["name"] not in text.split("use one of: ")[1].split(", ")
    expand({**copy.deepcopy(BASE), seam: block})  # with training it is fine


POPULATION = {"name": "population", "num_clients": 50_000, "input_shape": [784], "num_classes": 10,
              "sizes": {"distribution": "lognormal", "median": 40, "sigma": 1.0, "max": 2000}}


def test_the_population_dataset_draws_sizes_from_the_seed_and_holds_no_rows():
    cfg = expand({**copy.deepcopy(BASE), "data": POPULATION, "no_train": True})[0]["data"].cfg
    a, b, other = (PopulationDataset.counts(cfg, s) for s in (0, 0, 1))
    assert np.array_equal(a, b) and not np.array_equal(a, other)
    assert a.min() >= 1 and a.max() <= 2000 and 35 <= np.median(a) <= 45
    data = PopulationDataset.build(cfg, 0)
    assert data.num_clients == 50_000 and np.array_equal(data.n_train, a)
    assert data.x_train.shape == (int(a.sum()), 784) and data.x_train.strides == (0, 0)  # no memory for rows
    sizes = {"distribution": "uniform", "low": 3, "high": 5}
    cfg = expand({**copy.deepcopy(BASE), "data": {**POPULATION, "sizes": sizes}, "no_train": True})[0]["data"].cfg
    assert set(PopulationDataset.counts(cfg, 0)) == {3, 4, 5}
    with pytest.raises(ConfigError, match=r"^data.name = 'population': holds per-client sample counts only .* add "
                                          r"--no-train \(no_train: true\)$"):
        expand({**copy.deepcopy(BASE), "data": POPULATION})
    with pytest.raises(ConfigError, match=r"^data.sizes.min = 9: must be <= sizes.max \(5\)$"):
        expand({**copy.deepcopy(BASE), "data": {**POPULATION, "sizes": {"min": 9, "max": 5}}, "no_train": True})


def test_a_component_that_reads_labels_is_refused_on_a_population(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**BASE, "data": {**POPULATION, "num_clients": 100},
                                    "availability": {"name": "ymf", "beta": 0.9}}))
    r = subprocess.run([sys.executable, "-m", "turnout", "check", str(path), "--no-train", "--data"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip() == ("turnout: error: data.name = 'population': holds per-client sample counts only (no "
                                "labels), and a component of this experiment reads label histograms; choose one that "
                                "does not")


def test_no_train_run_of_a_large_population_through_the_command_line(tmp_path):
    raw = {**copy.deepcopy(BASE), "rounds": 30, "data": {**POPULATION, "num_clients": 200_000},
           "model": {"name": "mlp", "hidden": [64]}, "availability": {"name": "trace"},
           "round_mode": {"name": "deadline", "deadline_s": 8}, "algorithm": {"name": "stale_aware", "rule": "refl"},
           "selector": {"name": "uniform", "clients_per_round": 50}, "train": {"batch_size": 20, "local_steps": 20},
           "eval": {"every": 5, "centralized_baseline": True}}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "turnout", "run", str(path), "--no-train", "--out", str(out), "--quiet"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "system-only, no training (1 seed)" in r.stdout and f"note: {PROXY_NOTE}" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["system_only"] == PROXY_NOTE and summary["runs"][0]["system_only"] is True
    assert "centralized_accuracy" not in summary["runs"][0]  # nothing is trained, not even the baseline
    assert yaml.safe_load((out / "config.yaml").read_text())["variants"]["base"]["no_train"] is True
    rounds = pd.read_csv(out / "rounds.csv")
    assert rounds["accuracy"].isna().all() and len(rounds) == 30
    dense = 4 * (784 * 64 + 64 + 64 * 10 + 10)  # the MLP's float32 bytes
    assert (rounds["bytes_up"] % dense == 0).all() and (rounds["bytes_down"] % dense == 0).all()  # dense updates
    assert (rounds["bytes_down"] > 0).all() and rounds["bytes_up"].sum() > 0
    assert rounds["n_available"].between(10_000, 120_000).all()  # generated traces: a share of 200,000 online
    assert rounds["n_late"].sum() > 0 and rounds["wasted_s"].sum() >= 0
    clients = pd.read_csv(out / "clients.csv")
    assert len(clients) == 200_000 and clients["times_selected"].sum() == rounds["n_selected"].sum()
    assert not list(out.glob("*.png"))  # no accuracy to plot


def test_a_no_train_run_resumes_byte_identically_with_late_reports_in_flight(tmp_path):
    raw = {**copy.deepcopy(BASE), **SETTINGS["deadline_late_reports_stale_rule"], "rounds": 10, "no_train": True,
           "runtime": {"checkpoint_every_rounds": 2}}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    cmd = [sys.executable, "-m", "turnout"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert subprocess.run([*cmd, "run", str(path), "--out", str(whole), "--quiet"], cwd=ROOT,
                          capture_output=True).returncode == 0
    crashed = subprocess.run([*cmd, "run", str(path), "--out", str(cut), "--quiet"], cwd=ROOT, capture_output=True,
                             env={**os.environ, "TURNOUT_CRASH_AT": "round@6"})
    assert crashed.returncode != 0
    assert subprocess.run([*cmd, "resume", str(cut), "--quiet"], cwd=ROOT, capture_output=True).returncode == 0
    for table in ("rounds.csv", "clients.csv"):
        assert (whole / table).read_bytes() == (cut / table).read_bytes()


def test_an_aggregating_round_is_recorded_in_o_rounds_without_an_index_of_the_models_size():
    """SystemOnlyWork marks every coordinate through the ledger's record_all, as a trained dense step does."""
    from types import SimpleNamespace

    from turnout.world.ledger import CoordinateLedger

    ledger = CoordinateLedger(1_000_000, max_rounds=4)
    calls = []
    ledger.record = lambda r, changed: calls.append(len(changed)) or 0  # the index path: must not be taken
    sim = SimpleNamespace(ledger=ledger)
    work = SystemOnlyWork()
    some = SimpleNamespace(clients=np.array([3, 5]))
    assert work.aggregate(sim, 0, some, None, None) == 1_000_000
    assert work.aggregate(sim, 1, SimpleNamespace(clients=np.zeros(0, np.int64)), None, None) == 0
    assert calls == [] and ledger.hist[1] == 1_000_000 and ledger.hist.sum() == 1_000_000
    assert ledger.lacking(np.array([-1, 0, 1])).tolist() == [1_000_000, 0, 0]  # round 1 aggregated nothing
