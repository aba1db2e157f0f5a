"""A run resumes with another executor — the way out when the Ray cluster it trained on is gone — and only
the executor may change: ``turnout resume DIR --set executor.KEY=VALUE``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"name": "small", "seeds": [0], "rounds": 6,
         "data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "num_clients": 20, "variant": "fedprox"},
         "model": {"name": "logreg"}, "train": {"batch_size": 20, "local_steps": 3, "lr": 0.2},
         "algorithm": {"name": "scaffold"}, "selector": {"name": "uniform", "clients_per_round": 6},
         "eval": {"every": 2}, "output": {"progress": False, "plots": False},
         "runtime": {"checkpoint_every_rounds": 2}}
TABLES = ("rounds.csv", "clients.csv")


def turnout(*args, env=None):
    return subprocess.run([sys.executable, "-m", "turnout", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env={k: v for k, v in {**os.environ, **(env or {})}.items()
                                         if not k.startswith("TURNOUT_") or k in (env or {})}, timeout=600)


def crashed_run(tmp_path: Path, reference: bool = True) -> tuple[Path | None, Path]:
    """(the uninterrupted run, or None without ``reference``; a run of the same config killed at its fourth round)."""
    cfg = tmp_path / "small.yaml"
    cfg.write_text(yaml.safe_dump(SMALL, sort_keys=False))
    if reference:
        r = turnout("run", cfg, "--out", tmp_path / "ref", "--quiet")
        assert r.returncode == 0, r.stderr
    r = turnout("run", cfg, "--out", tmp_path / "run", "--quiet", env={"TURNOUT_CRASH_AT": "round@4"})
    assert r.returncode < 0  # killed
    return (tmp_path / "ref" if reference else None), tmp_path / "run.partial"


def test_a_run_resumes_with_another_bitwise_executor_and_the_folder_records_it(tmp_path):
    ref, partial = crashed_run(tmp_path)
    r = turnout("resume", partial, "--set", "executor.name=parallel", "--set", "executor.workers=2", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr  # parallel is bitwise sequential: nothing to warn about
    done = tmp_path / "run"
    for table in TABLES:
        assert (done / table).read_bytes() == (ref / table).read_bytes(), table
    config = yaml.safe_load((done / "config.yaml").read_text())
    assert config["variants"]["base"]["executor"] == {"name": "parallel", "workers": 2}
    [change] = config["executor_history"]
    assert change["was"] == {"base": {"name": "sequential"}}


@pytest.mark.slow  # a crashed run just to see one refusal line; resume refusals stay covered in test_durable_runs
def test_only_the_executor_may_change_on_resume(tmp_path):
    _, partial = crashed_run(tmp_path, reference=False)
    before = (partial / "config.yaml").read_bytes()
    r = turnout("resume", partial, "--set", "rounds=8", "--quiet")
    assert r.returncode == 2
    assert r.stderr.strip() == ("turnout: error: --set = 'rounds': a resumed run keeps its stored config; only "
                                "executor.* may change (how clients are trained, e.g. executor.name=sequential)")
    assert (partial / "config.yaml").read_bytes() == before
    r = turnout("resume", partial, "--set", "executor.name=vectorized", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "agree with the others within float tolerance, not bitwise" in r.stderr  # a warning, not a refusal
