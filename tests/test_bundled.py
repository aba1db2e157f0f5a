"""Bundled experiments: the quickstart and the paper settings ship in the package and run by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from turnout.app import bundled
from turnout.app.cli import main
from turnout.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_every_checkout_experiment_is_bundled_and_the_checkout_path_is_the_same_file():
    checkout = sorted(p.relative_to(ROOT / "experiments").with_suffix("").as_posix()
                      for p in (ROOT / "experiments").rglob("*.yaml"))
    assert bundled.names() == checkout and len(checkout) >= 15  # the quickstart and every paper setting
    assert (ROOT / "experiments" / "quickstart.yaml").resolve() == (bundled.root() / "quickstart.yaml").resolve()
    assert bundled.root() == ROOT / "turnout" / "experiments"


def test_names_resolve_to_the_bundled_files_and_an_existing_path_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the checkout: no experiments/ folder here
    for spec in ("quickstart", "quickstart.yaml", "experiments/quickstart.yaml"):
        assert bundled.resolve(spec) == bundled.root() / "quickstart.yaml"
    assert bundled.resolve("gluefl/main") == bundled.root() / "gluefl" / "main.yaml"
    (tmp_path / "quickstart").write_text("rounds: 1\n")  # a user's own file named like a bundled experiment
    assert bundled.resolve("quickstart") == Path("quickstart")
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "experiment.yaml").write_text("rounds: 1\n")  # a folder `turnout new` wrote
    assert bundled.resolve("lab") == Path("lab") / "experiment.yaml"
    assert bundled.resolve("missing.yaml") == Path("missing.yaml")  # left to the reader's "file not found"


def test_an_unknown_name_is_one_line_with_the_close_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"close names: quickstart \("):
        bundled.resolve("quickstrt")
    assert main(["run", "gluefl"]) == 2  # a family's name lists its members
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gluefl/main" in err and "gluefl/k10" in err and "turnout list experiments" in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_list_experiments_prints_one_line_each_with_its_description(capsys):
    assert main(["list", "experiments"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == bundled.names()
    quick = next(line for line in lines if line.startswith("quickstart "))
    assert "FedAvg on FedProx's Synthetic(0.5, 0.5)" in quick
    assert all(len(line.split(None, 1)) == 2 for line in lines)  # every file has a description


def test_a_bundled_name_runs_from_a_folder_outside_the_checkout_with_set(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "turnout", "run", "quickstart", "--set", "rounds=4",
                           "--set", "eval.centralized_baseline=false", "--variant", "K=5", "--out", "run",
                           "--quiet"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rounds = (tmp_path / "run" / "rounds.csv").read_text().splitlines()
    assert len(rounds) == 1 + 4  # header + 4 rounds of the one selected variant
    assert "rounds: 4" in (tmp_path / "run" / "config.yaml").read_text()
