"""Plugins: components registered from outside turnout are named in YAML, listed, checked, recorded, run in workers."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from turnout.algorithms.base import AlgorithmContext
from turnout.core.errors import ConfigError
from turnout.core.records import Reports
from turnout.core.state import decode_state, encode_state
from turnout.sim import plugins
from turnout.sim.catalogue import registries
from turnout.sim.composition import expand

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugins" / "fair_and_robust.py"
EXP = {"name": "plug", "seeds": [0, 1], "rounds": 6, "data": {"name": "synthetic", "num_clients": 20},
       "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 4, "lr": 0.05},
       "selector": {"name": "round_robin", "clients_per_round": 4},
       "algorithm": {"name": "trimmed_mean", "trim": 0.25}, "eval": {"every": 3},
       "output": {"progress": False, "plots": False},
       "variants": [{"name": "robin"}, {"name": "uniform", "set": {"selector.name": "uniform",
                                                                  "selector.clients_per_round": 4}}]}


def cli(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "turnout", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=600)


@pytest.fixture
def experiment(tmp_path):
    """The experiment file beside a copy of the example plugin, which it names relative to itself."""
    (tmp_path / "plugins").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "plugins" / "fair_and_robust.py")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "plugins": ["plugins/fair_and_robust.py"]}, sort_keys=False))
    return path


def _csv(path: Path) -> list[dict]:
    import csv

    with open(path) as f:
        return list(csv.DictReader(f))


def test_list_shows_plugin_components_with_their_options():
    r = cli("list", "--plugin", "examples/plugins/fair_and_robust.py")
    assert r.returncode == 0, r.stderr
    assert "  round_robin            Round-robin over whoever is online" in r.stdout
    assert "[plugin examples/plugins/fair_and_robust.py]" in r.stdout
    assert "  trimmed_mean           Coordinate-wise trimmed mean" in r.stdout
    r = cli("list", "--plugin", "examples/plugins/fair_and_robust.py", "algorithm.trimmed_mean")
    assert "      trim = 0.1 in [0, 0.5): share of reports dropped at each end, per coordinate" in r.stdout
    assert "round_robin" not in cli("list", "selector").stdout  # nothing leaks into a run without the plugin


def test_a_plugin_named_in_the_file_runs_in_two_workers_and_is_recorded(experiment, tmp_path):
    one, two = tmp_path / "jobs1", tmp_path / "jobs2"
    r = cli("run", experiment, "--out", one, "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli("run", experiment, "--out", two, "--jobs", "2", "--quiet", cwd=ROOT)  # another directory
    assert r.returncode == 0, r.stderr
    for table in ("rounds.csv", "clients.csv"):
        assert (one / table).read_bytes() == (two / table).read_bytes()
    recorded = yaml.safe_load((two / "config.yaml").read_text())["plugins"]
    plugin_file = tmp_path / "plugins" / "fair_and_robust.py"
    assert recorded == [{"spec": str(plugin_file), "module": recorded[0]["module"], "file": str(plugin_file),
                         "sha256": hashlib.sha256(plugin_file.read_bytes()).hexdigest(),
                         "registers": ["algorithm.trimmed_mean", "selector.round_robin"]}]
    assert recorded[0]["module"].startswith("turnout_plugin_fair_and_robust_")
    counts: dict[tuple, list[int]] = {}
    for row in _csv(two / "clients.csv"):
        counts.setdefault((row["variant"], row["seed"]), []).append(int(row["times_selected"]))
    for seed in ("0", "1"):  # 6 rounds × 4 of 20 always-online clients: everyone once, then 4 of them again
        assert sorted(counts[("robin", seed)]) == [1] * 16 + [2] * 4
    assert any(max(c) > 2 or min(c) == 0 for (v, _), c in counts.items() if v == "uniform")


def test_the_plugin_flag_adds_a_plugin_to_run_and_check(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "seeds": [0], "rounds": 3, "variants": []}))
    r = cli("check", path, "--plugin", "examples/plugins/fair_and_robust.py")
    assert r.returncode == 0, r.stderr
    assert f"plugin {EXAMPLE} (sha256 " in r.stdout
    assert "registers algorithm.trimmed_mean, selector.round_robin" in r.stdout
    assert "  selector      round_robin" in r.stdout
    r = cli("run", path, "--plugin", "examples/plugins/fair_and_robust.py", "--out", tmp_path / "run", "--quiet")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["plugins"][0]["file"] == str(EXAMPLE)
    r = cli("run", path, "--out", tmp_path / "without", "--quiet")  # not loaded: round_robin is unknown
    assert r.returncode == 2
    assert r.stderr.startswith("turnout: error: algorithm.name = 'trimmed_mean': unknown algorithm; choose one of:")


#: plugin file → (its text, what the error says after the plugin's path)
BAD = {
    "missing.py": (None, "': file not found; give the path of a .py file"),
    "broken.py": ("import numpy\nx = 1\nraise RuntimeError('cannot reach the lab server')\n",
                  "': failed to import: RuntimeError: cannot reach the lab server (line 3)"),
    "syntax.py": ("def f(:\n    pass\n", "': failed to import: SyntaxError: "),
    "no_config.py": ("from turnout.selectors.base import SELECTORS, Selector\n\n"
                     "@SELECTORS.register('no_config')\nclass NoConfig(Selector):\n    pass\n",
                     "': registers selector 'no_config' without a Config: give the class a pydantic model of its "
                     "options"),
    "clash.py": ("from turnout.config.base import NoOptions\nfrom turnout.selectors.base import SELECTORS\n\n"
                 "@SELECTORS.register('uniform')\nclass Mine:\n    Config = NoOptions\n",
                 "': registers selector 'uniform', which is already registered; give it another name"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_plugin_is_one_line_naming_it_and_nothing_is_written(name, tmp_path):
    text, message = BAD[name]
    if text is not None:
        (tmp_path / name).write_text(text)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "selector": {"name": "uniform"}, "algorithm": {"name": "fedavg"},
                                    "variants": [], "plugins": [name]}))
    r = cli("run", path, "--out", tmp_path / "run")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert lines[0].startswith("turnout: error: plugins[0] = '") and f"{name}{message}" in lines[0], lines[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.partial").exists()


def test_a_bad_module_or_flag_is_named_too(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "variants": [], "plugins": ["no_such_lab.selectors"]}))
    r = cli("check", path)
    assert r.returncode == 2
    assert r.stderr.strip() == ("turnout: error: plugins[0] = 'no_such_lab.selectors': no such module; give an "
                                "importable module (installed, or on PYTHONPATH) or the path of a .py file")
    r = cli("list", "--plugin", "gone/away.py")
    assert r.returncode == 2 and r.stderr.startswith("turnout: error: --plugin = '")
    bad = {**EXP, "plugins": [str(EXAMPLE)], "variants": [{"name": "x", "set": {"plugins": []}}]}
    with pytest.raises(ConfigError, match=r"variants\[x\].set.plugins = \[\]: plugins holds for the whole experiment"):
        expand(bad)


@pytest.mark.slow  # a crash and a resume for one refusal; plugins in workers stay in the default suite
def test_a_resumed_run_refuses_a_plugin_file_that_changed(experiment, tmp_path):
    out = tmp_path / "run"
    r = cli("run", experiment, "--out", out, "--quiet", env={"TURNOUT_CRASH_AT": "round@3"})
    assert r.returncode != 0 and (tmp_path / "run.partial").is_dir()
    plugin = tmp_path / "plugins" / "fair_and_robust.py"
    plugin.write_text(plugin.read_text() + "\n# edited\n")
    r = cli("resume", out)
    assert r.returncode == 2
    assert r.stderr.startswith("turnout: error: plugins[0] = '")
    assert "fair_and_robust.py': changed since the run started (sha256 " in r.stderr
    plugin.write_text(EXAMPLE.read_text())
    assert cli("resume", out, "--quiet").returncode == 0


def _example():
    """The example plugin's classes, loaded into this process."""
    plugins.load([str(EXAMPLE)])
    return registries()["selector"].get("round_robin"), registries()["algorithm"].get("trimmed_mean")


def test_trimmed_mean_drops_the_extremes_of_every_coordinate():
    _, trimmed = _example()
    updates = torch.tensor([[1.0, -2.0], [2.0, 0.0], [3.0, 1.0], [4.0, 2.0], [100.0, -50.0]])
    reports = Reports(clients=np.arange(5), updates=updates, weights=np.ones(5), normalize=True,
                      n_samples=np.full(5, 10), losses=np.zeros(5), staleness=np.zeros(5, np.int64))
    ctx = AlgorithmContext(num_clients=5, dim=2, n_train=np.full(5, 10), seed=0, rounds=1)
    start = torch.tensor([10.0, 10.0])
    rule = trimmed(trimmed.Config(trim=0.2, server_lr=0.5), ctx)  # drops 1 value at each end of each column
    np.testing.assert_allclose(rule.aggregate(0, start, reports), start + 0.5 * torch.tensor([3.0, -1 / 3]))
    plain = trimmed(trimmed.Config(trim=0.0), ctx)  # trim 0 is the plain mean: the outlier drags it
    np.testing.assert_allclose(plain.aggregate(0, start, reports), start + torch.tensor([22.0, -9.8]), rtol=1e-6)
    empty = Reports(np.zeros(0, np.int64), torch.zeros(0, 2), np.zeros(0), True, np.zeros(0), np.zeros(0),
                    np.zeros(0, np.int64))
    assert torch.equal(rule.aggregate(0, start, empty), start)


def test_an_injected_plugin_selector_is_tested_like_a_built_in(build_simulation, tiny):
    robin, _ = _example()
    tiny["rounds"] = 5
    sim = build_simulation(tiny, components={"selector": lambda ctx: robin(robin.Config(clients_per_round=4),
                                                                          ctx.world)})
    sim.run()
    assert sim.population.times_selected.tolist() == [1] * 20  # 5 rounds × 4 of 20: everyone exactly once


def test_the_plugin_selectors_declared_state_makes_a_resumed_run_identical(build_simulation, tiny):
    _example()
    raw = {**copy.deepcopy(tiny), "rounds": 6, "plugins": [str(EXAMPLE)],
           "selector": {"name": "round_robin", "clients_per_round": 3}, "availability": {"name": "ln", "beta": 0.5}}
    whole = build_simulation(raw)
    rows = whole.advance()
    first = build_simulation(raw)
    first.advance(until=3)
    arrays, meta = encode_state(first.state_dict())
    second = build_simulation(raw)
    second.load_state_dict(decode_state(arrays, meta))
    assert json.dumps(second.advance(), default=str) == json.dumps(rows[3:], default=str)  # NaN-safe, exact
    assert np.array_equal(second.selector.last_turn, whole.selector.last_turn)
