"""The Python API: turnout.run / turnout.load give the run folder's tables as DataFrames, finished or not."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import turnout
from turnout.core.errors import ConfigError
from turnout.sim.composition import expand

ROOT = Path(__file__).resolve().parents[1]
EXP = {"name": "api", "seeds": [0, 1], "rounds": 4, "data": {"name": "synthetic", "num_clients": 20},
       "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 4, "lr": 0.05},
       "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 2},
       "output": {"progress": False, "plots": False},
       "variants": [{"name": "K=4"}, {"name": "K=8", "set": {"selector.clients_per_round": 8}}]}


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "turnout", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=600)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return turnout.run(copy.deepcopy(EXP), out=tmp_path_factory.mktemp("api") / "run", quiet=True)


def test_importing_turnout_loads_neither_torch_nor_pandas():
    code = ("import sys, turnout; heavy = [m for m in ('torch', 'pandas', 'numpy') if m in sys.modules]; "
            "print(heavy, turnout.__version__, callable(turnout.run), 'pandas' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[]", turnout.__version__, "True", "False"]  # the API itself imports pandas lazily


@pytest.mark.parametrize("preset,expect", [(None, "1"), ("0", "0")])
def test_importing_turnout_asks_torch_for_huge_pages_unless_the_user_said_otherwise(preset, expect):
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if preset is not None:
        env["THP_MEM_ALLOC_ENABLE"] = preset
    code = "import os, turnout; print(os.environ['THP_MEM_ALLOC_ENABLE'])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expect


def test_dataframes_are_the_run_folders_csv_tables(finished):
    folder = finished.folder
    assert folder.is_dir() and not folder.name.endswith(".partial")
    for name, frame in (("rounds", finished.rounds), ("clients", finished.clients),
                        ("comparison", finished.comparison)):
        csv = pd.read_csv(folder / f"{name}.csv", dtype={"seed": str} if name == "comparison" else None)
        assert list(frame.columns) == list(csv.columns), name
        pd.testing.assert_frame_equal(frame, csv, check_dtype=False)
    rounds = finished.rounds
    assert len(rounds) == 2 * 2 * 4 and {"cum_bytes_down", "cum_wasted_s"} <= set(rounds.columns)
    for _, unit in rounds.groupby(["variant", "seed"]):
        np.testing.assert_array_equal(unit["cum_bytes_down"], unit["bytes_down"].cumsum())
    k8 = rounds[rounds["variant"] == "K=8"]
    assert (k8["n_selected"] == 8).all() and (rounds[rounds["variant"] == "K=4"]["n_selected"] == 4).all()
    assert len(finished.clients) == 2 * 2 * 20
    assert list(finished.comparison["seed"]) == ["0", "1", "mean", "std"] * 2


def test_summary_units_and_config_describe_every_unit(finished):
    s = finished.summary
    assert list(zip(s["variant"], s["seed"])) == [("K=4", 0), ("K=4", 1), ("K=8", 0), ("K=8", 1)]
    per_seed = finished.comparison[~finished.comparison["seed"].isin(["mean", "std"])]
    np.testing.assert_allclose(s["final_accuracy"], per_seed["final_accuracy"].astype(float))
    assert finished.units["complete"].all() and finished.complete and finished.incomplete == []
    assert list(finished.units["rounds_done"]) == [4] * 4
    assert finished.config["variants"]["K=8"]["selector"]["clients_per_round"] == 8
    assert "4 of 4 units finished" in repr(finished)


def test_a_path_a_dict_with_overrides_and_resolved_variants_give_the_same_run(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(EXP))
    by_path = turnout.run(path, overrides=["rounds=3", "eval.every=3"], out=tmp_path / "a", quiet=True)
    by_dict = turnout.run(copy.deepcopy(EXP), overrides={"rounds": 3, "eval.every": 3}, out=tmp_path / "b", quiet=True)
    typed = expand(copy.deepcopy(EXP), {"rounds": 3, "eval.every": 3})
    by_variants = turnout.run(typed, out=tmp_path / "c", quiet=True)
    assert len(by_path.rounds) == 2 * 2 * 3
    pd.testing.assert_frame_equal(by_path.rounds, by_dict.rounds)
    pd.testing.assert_frame_equal(by_path.rounds, by_variants.rounds)
    pd.testing.assert_frame_equal(by_path.clients, by_variants.clients)
    assert (tmp_path / "c" / "rounds.csv").read_bytes() == (tmp_path / "a" / "rounds.csv").read_bytes()


def test_load_reads_an_interrupted_folder_then_the_resumed_one(tmp_path):
    raw = {**copy.deepcopy(EXP), "variants": [], "rounds": 5}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    r = cli("run", path, "--out", out, "--quiet", env={"TURNOUT_CRASH_AT": "round@8"})  # seed 1's third round
    assert r.returncode != 0
    partial = turnout.load(out)  # DIR.partial is found from DIR
    assert partial.folder.name == "run.partial" and not partial.complete
    assert partial.incomplete == [("base", 1)]
    assert list(partial.units["rounds_done"]) == [5, 3]
    rounds = partial.rounds
    assert len(rounds) == 8 and list(rounds[rounds["seed"] == 1]["round"]) == [0, 1, 2]
    assert set(partial.clients["seed"]) == {0} and len(partial.clients) == 20
    assert list(partial.comparison["seed"]) == ["0", "mean", "std"]
    assert list(partial.summary["seed"]) == [0]
    assert cli("resume", out, "--quiet").returncode == 0
    done = turnout.load(out)
    assert done.complete and len(done.rounds) == 10
    pd.testing.assert_frame_equal(done.rounds[done.rounds["seed"] == 1].head(3).reset_index(drop=True),
                                  rounds[rounds["seed"] == 1].reset_index(drop=True))


def test_bad_input_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=r"config = '.*missing.yaml': file not found"):
        turnout.run(tmp_path / "missing.yaml", out=tmp_path / "x")
    with pytest.raises(ConfigError, match=r"experiment = 42: give a YAML file path, an experiment dict"):
        turnout.run(42, out=tmp_path / "x")
    with pytest.raises(ConfigError, match=r"selector.clients_per_rnd = 9: unknown key"):
        turnout.run(copy.deepcopy(EXP), overrides={"selector.clients_per_rnd": 9}, out=tmp_path / "x")
    with pytest.raises(ConfigError, match=r"jobs = 0: must be >= 1"):
        turnout.run(copy.deepcopy(EXP), jobs=0, out=tmp_path / "x")
    with pytest.raises(ConfigError, match=r"run_dir = .*: is not a turnout run folder"):
        turnout.load(tmp_path)
    two = [*expand(copy.deepcopy(EXP)), *expand({**copy.deepcopy(EXP), "name": "other"})[:1]]
    with pytest.raises(ConfigError, match=r"must come from one experiment"):
        turnout.run(two, out=tmp_path / "x")
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()


def test_the_api_example_runs_and_draws_its_curve(tmp_path):
    r = subprocess.run([sys.executable, "examples/api.py", "--out", str(tmp_path / "ex")], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    png = tmp_path / "ex" / "accuracy_vs_mb.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "4 of 4 units finished" in r.stdout and "final_accuracy" in r.stdout


def test_variants_runs_only_the_named_ones_with_the_numbers_of_the_whole_run(finished, tmp_path):
    only = turnout.run(copy.deepcopy(EXP), out=tmp_path / "k8", quiet=True, variants=["K=8"])
    assert list(only.units["variant"]) == ["K=8", "K=8"]
    whole = finished.rounds[finished.rounds["variant"] == "K=8"].reset_index(drop=True)
    pd.testing.assert_frame_equal(only.rounds.reset_index(drop=True), whole)
    with pytest.raises(ConfigError, match="--variant"):
        turnout.run(copy.deepcopy(EXP), out=tmp_path / "bad", quiet=True, variants=["K=5"])
    assert not (tmp_path / "bad").exists()
