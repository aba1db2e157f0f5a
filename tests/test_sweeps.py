"""Sweeps: the same tables whatever runs the units (this process, worker processes, Ray), worker deaths survived."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

#: three small experiments with the mechanisms whose state matters: FedAvg on the quickstart task, REFL
#: (deadline, late reports in flight, stale-aware aggregation) and GlueFL (sticky group, shared mask, residuals)
QUICK = {"name": "quick", "seeds": [0, 1], "rounds": 8,
         "data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "num_clients": 30, "variant": "fedprox"},
         "model": {"name": "logreg"}, "train": {"batch_size": 50, "local_steps": 5, "lr": 0.2},
         "algorithm": {"name": "fedavg", "server_momentum": 0.5},
         "selector": {"name": "uniform", "clients_per_round": 10}, "eval": {"every": 4},
         "output": {"progress": False, "plots": False}, "runtime": {"checkpoint_every_rounds": 2},
         "variants": [{"name": "K=5", "set": {"selector.clients_per_round": 5}}, {"name": "K=10"}]}
REFL = {**QUICK, "name": "refl", "devices": {"name": "flash"},
        "round_mode": {"name": "deadline", "deadline_s": 0.1},
        "selector": {"name": "refl_ips", "clients_per_round": 5, "apt": "paper"},
        "algorithm": {"name": "stale_aware", "rule": "refl"},
        "variants": [{"name": "REFL"}, {"name": "equal", "set": {"algorithm.rule": "equal"}}]}
GLUEFL = {**QUICK, "name": "gluefl",
          "selector": {"name": "sticky", "clients_per_round": 5, "sticky_size": 15, "sticky_per_round": 4},
          "compressor": {"name": "gluefl", "ratio": 0.2, "shared_ratio": 0.1, "regenerate_every": 3},
          "variants": [{"name": "GlueFL"}]}
TABLES = ("rounds.csv", "clients.csv")


def turnout(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "turnout", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cfg")
    out = []
    for raw in (QUICK, REFL, GLUEFL):
        path = tmp / f"{raw['name']}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        out.append(path)
    return out


@pytest.fixture(scope="module")
def reference(configs, tmp_path_factory):
    """The three experiments run one unit after the other in one process (--jobs 1)."""
    out = tmp_path_factory.mktemp("ref") / "ref"
    r = turnout("run", *configs, "--out", out, "--quiet")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["gluefl", "quick", "refl"]
    return out


def assert_same(a: Path, b: Path):
    for name in ("quick", "refl", "gluefl"):
        for table in TABLES:
            assert (a / name / table).read_bytes() == (b / name / table).read_bytes(), (name, table)


def test_two_worker_processes_give_byte_identical_tables(configs, reference, tmp_path):
    out = tmp_path / "jobs2"
    r = turnout("run", *configs, "--out", out, "--jobs", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    assert_same(out, reference)
    assert sum(row["n_stale"] for row in _rows(out / "refl")) > 0  # late reports really were in flight


@pytest.mark.slow  # worker death stays covered by the keeps-dying case in the default suite
def test_a_worker_killed_mid_unit_is_retried_from_its_checkpoint(configs, reference, tmp_path):
    out = tmp_path / "killed"
    marker = tmp_path / "crashed-once"
    r = turnout("run", *configs, "--out", out, "--jobs", "2", "--quiet",
                env={"TURNOUT_CRASH_AT": "round@5", "TURNOUT_CRASH_ONCE": str(marker)})
    assert r.returncode == 0, r.stderr
    assert marker.exists()  # a worker really was SIGKILLed
    assert_same(out, reference)


def test_a_unit_whose_worker_keeps_dying_is_reported_and_the_rest_is_kept(tmp_path):
    cfg = tmp_path / "quick.yaml"
    cfg.write_text(yaml.safe_dump({**QUICK, "seeds": [0]}, sort_keys=False))  # two units, each dying twice
    out = tmp_path / "run"
    r = turnout("run", cfg, "--out", out, "--jobs", "2", "--retries", "1", "--quiet",
                env={"TURNOUT_CRASH_AT": "round@3"})  # every worker dies at its third round: nothing can finish
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "unit(s) failed" in lines[0] and "turnout resume" in lines[0]
    assert "(last: killed by SIGKILL)" in lines[0]  # what happened to the worker, not a guess
    assert out.with_name("run.partial").is_dir()


@pytest.mark.slow  # ~22 s; tests/test_ray_cluster.py (slow) loses a whole node mid-sweep
def test_ray_backend_gives_byte_identical_tables_and_survives_a_lost_worker(configs, reference, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    marker = tmp_path / "crashed-once"
    r = turnout("run", *configs, "--out", out, "--backend", "ray", "--quiet",
                env={"TURNOUT_CRASH_AT": "round@5", "TURNOUT_CRASH_ONCE": str(marker)})
    assert r.returncode == 0, r.stderr
    assert marker.exists()
    assert_same(out, reference)


def test_without_ray_the_ray_backend_is_one_line_saying_how_to_install_it(configs, tmp_path):
    code = ("import sys; sys.modules['ray'] = None\n"
            "from turnout.app.cli import main\n"
            f"sys.exit(main(['run', {str(configs[0])!r}, '--backend', 'ray', '--out', {str(tmp_path / 'x')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip() == ("turnout: error: --backend = 'ray': needs Ray, which is not installed: "
                                "pip install 'turnout[ray]'")
    assert not (tmp_path / "x").exists()


def test_variant_and_seed_filters_run_only_those_units(configs, reference, tmp_path):
    out = tmp_path / "one"
    r = turnout("run", configs[0], "--out", out, "--variant", "K=10", "--seed", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    rows = _rows(out)
    assert {(row["variant"], row["seed"]) for row in rows} == {("K=10", 1)}
    ref = [row for row in _rows(reference / "quick") if row["variant"] == "K=10" and row["seed"] == 1]
    assert rows == ref  # a unit's numbers do not depend on which other units run beside it
    bad = turnout("run", configs[0], "--out", tmp_path / "bad", "--variant", "K=7")
    assert bad.returncode == 2 and "--variant = 'K=7': no such variant; choose from: K=5, K=10" in bad.stderr


def _rows(folder: Path) -> list[dict]:
    import csv

    with open(folder / "rounds.csv", newline="") as f:
        out = []
        for row in csv.DictReader(f):
            out.append({k: (int(v) if k in ("seed", "n_stale") else v) for k, v in row.items()})
        return out


def test_workers_take_the_longest_units_first_by_estimated_work():
    """LPT order: the quickstart's K = 20 units estimate 4× its K = 5 units; equal units keep sweep order."""
    from turnout.runs.experiment import prepare
    from turnout.runs.sweep import UnitJob, estimated_work, longest_first
    from turnout.sim.composition import expand

    variants = expand(yaml.safe_load((ROOT / "experiments" / "quickstart.yaml").read_text()),
                      {"eval.centralized_baseline": False})
    plan = prepare(variants)
    work = {v.variant: estimated_work(v, plan.dataset_for(v, 0)) for v in variants}
    assert work == {"K=5": 300 * 5 * 20 * 50.0, "K=10": 300 * 10 * 20 * 50.0, "K=20": 300 * 20 * 20 * 50.0}
    epochs = expand({**QUICK, "train": {"batch_size": 50, "local_epochs": 2, "lr": 0.2}})[1]
    data = prepare([epochs]).dataset_for(epochs, 0)
    assert estimated_work(epochs, data) == pytest.approx(8 * 10 * 2 * len(data.y_train) / data.num_clients)
    jobs = [UnitJob((0, i), {}, name, 0, "", 1, name, work=w)
            for i, (name, w) in enumerate([("a", 1.0), ("b", 3.0), ("c", 1.0), ("d", 2.0)])]
    assert [j.variant for j in longest_first(jobs)] == ["b", "d", "a", "c"]


def test_a_worker_rebuilds_only_its_units_dataset_and_keeps_recent_ones(monkeypatch):
    """A worker's dataset is the owner's bit for bit; it builds only its seed's, and keeps datasets within a budget."""
    import numpy as np

    from turnout.runs import sweep
    from turnout.runs.experiment import prepare
    from turnout.sim.composition import expand

    experiment = {"raw": QUICK, "overrides": {}}
    owner = prepare(expand(QUICK))
    builds = []
    cls = owner.variants[0]["data"].cls
    real_build = cls.build.__func__
    monkeypatch.setattr(cls, "build", classmethod(lambda c, cfg, seed: builds.append(seed) or real_build(c, cfg, seed)))
    monkeypatch.setattr(sweep, "_DATASETS", sweep.OrderedDict())
    monkeypatch.setattr(sweep, "_VARIANTS", {})
    job = lambda variant, seed: sweep.UnitJob((0, 0), experiment, variant, seed, "", 1, "")  # noqa: E731
    for variant, seed in [("K=5", 1), ("K=10", 1), ("K=5", 0), ("K=10", 1)]:
        exp, data = sweep.rebuild(job(variant, seed))
        assert exp.variant == variant
        mine = owner.dataset_for(exp, seed)
        assert np.array_equal(data.x_train, mine.x_train) and np.array_equal(data.y_test, mine.y_test)
    assert builds == [1, 0]  # each seed's dataset once, and only the seed asked for
    monkeypatch.setattr(sweep, "DATASET_CACHE_BYTES", 0)  # over budget: only the newest is kept
    sweep.rebuild(job("K=5", 2))
    assert list(sweep._DATASETS) == [(next(iter(sweep._DATASETS))[0], 2)] and builds == [1, 0, 2]
