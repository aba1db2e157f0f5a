"""Durable runs: crashes at any moment lose no finished work, resume is exact, run folders are exclusive."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("rounds.csv", "clients.csv")

#: one experiment whose variants cover the stateful mechanisms a checkpoint must carry
DURABLE = {
    "name": "durable", "seeds": [0, 1], "rounds": 6,
    "data": {"name": "synthetic", "num_clients": 20},
    "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "selector": {"name": "uniform", "clients_per_round": 4}, "devices": {"name": "flash"},
    "eval": {"every": 2}, "output": {"progress": False, "plots": False},
    "runtime": {"checkpoint_every_rounds": 2},
    "variants": [
        {"name": "FedAvg"},
        {"name": "SCAFFOLD spilled", "set": {"algorithm.name": "scaffold", "runtime.state_budget_mb": 0.005}},
        {"name": "GlueFL", "set": {"selector": {"name": "sticky", "clients_per_round": 4, "sticky_size": 8,
                                                "sticky_per_round": 3},
                                   "compressor": {"name": "gluefl", "ratio": 0.2, "shared_ratio": 0.1,
                                                  "regenerate_every": 4}}},
        {"name": "REFL deadline", "set": {"selector": {"name": "refl_ips", "clients_per_round": 4, "apt": "paper"},
                                          "algorithm": {"name": "stale_aware", "rule": "refl"},
                                          "round_mode": {"name": "deadline", "deadline_s": 0.1}}},
        {"name": "Oort", "set": {"selector.name": "oort", "round_mode": {"name": "over_commit", "oc": 1.5}}},
        {"name": "FedGS", "set": {"selector": {"name": "fedgs", "clients_per_round": 4, "graph": "update_cosine"},
                                  "availability": {"name": "ln", "beta": 0.5}}},
        {"name": "Adaptive-OU", "set": {"algorithm": {"name": "adaptive_ou", "strategy": "ou"}}},
        # asynchronous rounds: reports and the model versions they started from stay in flight across checkpoints
        {"name": "FedBuff", "set": {"algorithm": {"name": "fedbuff"}, "round_mode": {"name": "async", "buffer": 2}}},
        {"name": "FedAsync", "set": {"algorithm": {"name": "fedasync"}, "round_mode": {"name": "async"}}},
    ],
}


def turnout(*args, env=None, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "turnout", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd or ROOT, timeout=timeout)


def write(tmp_path, raw, name="exp.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def without_wall_clock(doc):
    if isinstance(doc, dict):
        return {k: without_wall_clock(v) for k, v in doc.items() if k != "wall_s"}
    if isinstance(doc, list):
        return [without_wall_clock(v) for v in doc]
    return doc


def comparison_without_wall_clock(folder: Path) -> list[dict]:
    with open(folder / "comparison.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(f)]


def assert_same_results(a: Path, b: Path):
    """Byte-identical tables; summary and comparison equal except their wall-clock seconds."""
    for name in TABLES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert comparison_without_wall_clock(a) == comparison_without_wall_clock(b)
    sa, sb = (json.loads((p / "summary.json").read_text()) for p in (a, b))
    assert without_wall_clock(sa) == without_wall_clock(sb)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every crashed-and-resumed run must equal."""
    tmp = tmp_path_factory.mktemp("ref")
    cfg = write(tmp, DURABLE)
    r = turnout("run", cfg, "--out", tmp / "ref", "--quiet")
    assert r.returncode == 0, r.stderr
    return cfg, tmp / "ref"


#: the crash points of the default suite; two more run with ``-m slow`` (their stages are covered here too: a write
#: of checkpoint arrays by ``checkpoint-swap``, a crash in a later unit by ``between-units``)
CRASH_POINTS = ["round@3", "checkpoint-swap@3", "unit-done@2", "between-units@4",
                pytest.param("checkpoint-arrays@2", marks=pytest.mark.slow), pytest.param("round@40",
                                                                                       marks=pytest.mark.slow)]


@pytest.mark.parametrize("crash", CRASH_POINTS)
def test_sigkill_at_any_moment_then_resume_gives_identical_tables(crash, reference, tmp_path):
    cfg, ref = reference
    out = tmp_path / "run"
    r = turnout("run", cfg, "--out", out, "--quiet", env={"TURNOUT_CRASH_AT": crash})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    partial = out.with_name("run.partial")
    assert partial.is_dir() and not out.exists()
    units = sorted((partial / "units").glob("*/seed-*"))
    assert units and any((u / "rounds.jsonl").stat().st_size for u in units)  # finished rounds are on disk
    r = turnout("resume", out, "--quiet")
    assert r.returncode == 0, r.stderr
    assert out.is_dir() and not partial.exists()
    assert_same_results(out, ref)


def test_sigterm_checkpoints_prints_the_resume_command_and_resumes_exactly(tmp_path):
    # Only the signal triggers a checkpoint. 30 rounds a unit: the signal, sent when the first row of a unit is on
    # disk, lands while that unit runs (with DURABLE's 6 rounds a unit could finish first, now and then).
    raw = {**DURABLE, "rounds": 30, "runtime": {"checkpoint_every_s": 3600}}
    slow = write(tmp_path, raw)
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "turnout", "run", str(slow), "--out", str(out), "--quiet"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rows = out.with_name("run.partial") / "units"
    deadline = time.time() + 120
    while time.time() < deadline and not any(f.stat().st_size for f in rows.glob("v02-*/seed-0/rounds.jsonl")):
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    last = err.strip().splitlines()[-1]
    assert "checkpointed at round" in last and f"resume with: turnout resume {out}" in last
    assert any(rows.glob("*/seed-*/checkpoint/state.json"))
    r = turnout("resume", out, "--quiet")
    assert r.returncode == 0, r.stderr
    ref = tmp_path / "ref"
    r = turnout("run", slow, "--out", ref, "--quiet")  # the same experiment, uninterrupted
    assert r.returncode == 0, r.stderr
    assert_same_results(out, ref)


def test_a_second_run_on_the_same_folder_exits_2_naming_the_holder(tmp_path):
    cfg = write(tmp_path, {**DURABLE, "variants": DURABLE["variants"][:2]})
    out = tmp_path / "run"
    held = tmp_path / "held"  # the first run waits at its third round, holding the folder, until it is killed
    first = subprocess.Popen([sys.executable, "-m", "turnout", "run", str(cfg), "--out", str(out), "--quiet"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TURNOUT_HOLD_AT": "round@3", "TURNOUT_HOLD_FILE": str(held)})
    deadline = time.time() + 120
    while time.time() < deadline and not held.exists() and first.poll() is None:
        time.sleep(0.05)
    assert held.exists(), first.communicate()
    second = turnout("run", cfg, "--out", out, "--quiet")
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {first.pid}" in lines[0] and "Traceback" not in second.stderr
    first.kill()
    first.communicate(timeout=60)
    r = turnout("resume", out, "--quiet")  # the refused second run left the folder as the first had it
    assert r.returncode == 0, r.stderr
    assert (out / "summary.json").is_file()


def test_two_runs_started_together_without_out_get_two_folders(tmp_path):
    cfg = write(tmp_path, {**DURABLE, "seeds": [0], "rounds": 2, "variants": DURABLE["variants"][:1]})
    procs = [subprocess.Popen([sys.executable, "-m", "turnout", "run", str(cfg), "--quiet"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all(f.name.startswith("durable-") for f in folders)
    for f in folders:
        assert (f / "rounds.csv").is_file() and (f / "config.yaml").is_file()
    assert (folders[0] / "rounds.csv").read_bytes() == (folders[1] / "rounds.csv").read_bytes()


def test_a_leftover_partial_is_kept_and_named(tmp_path):
    cfg = write(tmp_path, {**DURABLE, "seeds": [0], "variants": DURABLE["variants"][:2]})
    out = tmp_path / "run"
    r = turnout("run", cfg, "--out", out, "--quiet", env={"TURNOUT_CRASH_AT": "round@8"})
    assert r.returncode == -signal.SIGKILL
    before = sorted(str(p) for p in out.with_name("run.partial").rglob("*"))
    again = turnout("run", cfg, "--out", out, "--quiet")
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1
    assert "unfinished run" in again.stderr and f"turnout resume {out}" in again.stderr
    assert sorted(str(p) for p in out.with_name("run.partial").rglob("*")) == before  # nothing deleted


def test_resume_with_a_different_config_names_the_first_differing_key(tmp_path):
    raw = {**DURABLE, "seeds": [0], "variants": DURABLE["variants"][:2]}
    cfg = write(tmp_path, raw)
    out = tmp_path / "run"
    assert turnout("run", cfg, "--out", out, "--quiet", env={"TURNOUT_CRASH_AT": "round@4"}).returncode < 0
    r = turnout("run", cfg, "--resume", out, "--set", "train.lr=0.1", "--quiet")
    assert r.returncode == 2
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("turnout: error: FedAvg.train.lr = 0.1")
    assert turnout("run", cfg, "--resume", out, "--quiet").returncode == 0  # the original config resumes


@pytest.mark.parametrize("case", ["file", "parent_file", "symlink", "too_long", "not_empty", "unwritable"])
def test_impossible_out_is_one_line_before_any_work(case, tmp_path):
    cfg = write(tmp_path, {**DURABLE, "seeds": [0], "variants": DURABLE["variants"][:1]})
    if case == "file":
        out = tmp_path / "f"
        out.write_text("x")
    elif case == "parent_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "run"
    elif case == "symlink":
        (tmp_path / "real").mkdir()
        out = tmp_path / "link"
        out.symlink_to(tmp_path / "real")
    elif case == "too_long":
        out = tmp_path / ("x" * 300)
    elif case == "not_empty":
        out = tmp_path / "full"
        out.mkdir()
        (out / "a").write_text("x")
    else:
        if os.geteuid() == 0:  # root writes anywhere a permission bit forbids; a read-only filesystem stops it
            out = Path("/proc/turnout-run")
        else:
            ro = tmp_path / "ro"
            ro.mkdir()
            ro.chmod(0o500)
            out = ro / "run"
    before = sorted(p.name for p in tmp_path.iterdir())
    r = turnout("run", cfg, "--out", out, "--quiet")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("turnout: error: --out")
    assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_report_reads_an_unfinished_run_and_marks_incomplete_units(tmp_path):
    cfg = write(tmp_path, {**DURABLE, "variants": DURABLE["variants"][:2]})
    out = tmp_path / "run"
    assert turnout("run", cfg, "--out", out, "--quiet", env={"TURNOUT_CRASH_AT": "between-units@2"}).returncode < 0
    page = tmp_path / "page.md"
    r = turnout("report", out.with_name("run.partial"), "--out", page, "--metric", "final_accuracy")
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert "incomplete" in text and "SCAFFOLD spilled" in text and "FedAvg" in text
