"""`turnout new NAME`: a starter folder whose experiment validates and whose own tests pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from turnout.app.cli import main
from turnout.app.starter import FILES
from turnout.sim.composition import load_experiment

ROOT = Path(__file__).resolve().parents[1]


def test_new_writes_a_starter_that_check_accepts_with_its_plugin(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["new", "mylab"]) == 0
    assert sorted(p.name for p in (tmp_path / "mylab").iterdir()) == sorted(FILES)
    text = (tmp_path / "mylab" / "experiment.yaml").read_text()
    assert "name: mylab\n" in text and "__NAME__" not in text
    assert main(["check", "mylab/experiment.yaml", "--plugin", "mylab/components.py"]) == 0
    out = capsys.readouterr().out
    assert "registers algorithm.my_rule, selector.my_selector" in out
    variants = load_experiment(tmp_path / "mylab" / "experiment.yaml")
    assert [(v.variant, v.components["selector"].name, v.components["algorithm"].name) for v in variants] == [
        ("mine", "my_selector", "my_rule"), ("mine+yogi", "my_selector", "my_rule"), ("FedAvg", "uniform", "fedavg")]
    yogi = variants[1].components["algorithm"].cfg.step_config()
    assert (yogi.name, yogi.lr) == ("yogi", 0.05)  # the rule's step, set in the experiment file alone


def test_new_refuses_a_folder_that_is_not_empty_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert main(["new", "taken"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a folder that is not empty" in err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]  # nothing written
    (tmp_path / "empty").mkdir()
    assert main(["new", "empty"]) == 0  # an empty folder is used
    assert main(["new", "bad name"]) == 2 and "letters, digits" in capsys.readouterr().err


def test_the_starters_own_tests_pass(tmp_path):
    """The test file the starter ships runs its components and the experiment (pytest in a fresh process)."""
    assert main(["new", str(tmp_path / "lab")]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "lab"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout
