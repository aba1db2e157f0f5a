"""The bad-input contract of ``turnout run``.

Every user mistake (bad config, missing data, bad ``--set``, bad CLI arguments) must fail before
any work with exit code 2, print exactly ONE line on stderr (no traceback) and nothing on stdout,
name the offending key, the bad value and what is allowed, and leave no run folder behind —
neither ``DIR`` nor ``DIR.partial``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from turnout.app.cli import main

#: The smallest valid experiment: 2 rounds of 3-of-6 clients on synthetic data (runs in well under a second).
BASE = {
    "name": "bad-input", "seeds": [0], "rounds": 2,
    "data": {"name": "synthetic", "num_clients": 6, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "selector": {"name": "uniform", "clients_per_round": 3},
    "output": {"progress": False, "plots": False},
}


def config(**changes) -> dict:
    """A copy of :data:`BASE` with whole top-level entries replaced (``None`` removes one)."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def write(tmp_path: Path, cfg: dict | str, name: str = "exp.yaml") -> Path:
    p = tmp_path / name
    p.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg, sort_keys=False))
    return p


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``main(argv)`` in-process: (exit code, stdout, stderr); argparse's SystemExit becomes its code."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse errors exit from inside parse_args
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def assert_bad_input(rc: int, out: str, err: str, *needles: str, run_dir: Path | None = None) -> str:
    """The contract: exit 2, one stderr line (no traceback), empty stdout, message with every needle, no folder."""
    assert rc == 2, f"exit code {rc}, expected 2; stderr={err!r}"
    assert out == "", f"stdout must be empty on a user error, got {out!r}"
    assert err.endswith("\n") and err.count("\n") == 1, f"expected exactly one stderr line, got {err!r}"
    assert "Traceback" not in err
    line = err.rstrip("\n")
    assert line.startswith("turnout: error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} missing from the error message: {line!r}"
    if run_dir is not None:
        assert not run_dir.exists(), f"run folder {run_dir} was created"
        partial = run_dir.with_name(run_dir.name + ".partial")
        assert not partial.exists(), f"partial run folder {partial} was left behind"
    return line


def run_bad(tmp_path: Path, capsys, cfg: dict | str, *needles: str, extra: tuple[str, ...] = ()) -> str:
    """Write ``cfg``, run it with ``--out tmp/run`` and check the contract; returns the message."""
    path = write(tmp_path, cfg)
    run_dir = tmp_path / "run"
    rc, out, err = cli(["run", str(path), "--out", str(run_dir), "--quiet", *extra], capsys)
    line = assert_bad_input(rc, out, err, *needles, run_dir=run_dir)
    assert sorted(os.listdir(tmp_path)) == ["exp.yaml"], "nothing but the config may exist afterwards"
    return line


# ---------------------------------------------------------------------------------------------
# sanity: the base config itself is valid, so every failure below is due to the one mistake


def test_base_config_runs_and_writes_the_folder(tmp_path, capsys):
    path = write(tmp_path, BASE)
    rc, out, err = cli(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"], capsys)
    assert rc == 0, err
    assert (tmp_path / "run" / "summary.json").is_file()
    assert not (tmp_path / "run.partial").exists()
    assert "run folder:" in out


# ---------------------------------------------------------------------------------------------
# config values: (config, needles that the one-line message must contain)

BAD_CONFIGS = {
    "unknown top-level key": (
        config(foo=1), ["foo = 1", "unknown key", "allowed keys", "selector", "rounds"]),
    "unknown key in a component block": (
        config(selector={"name": "uniform", "clients_per_rnd": 3}),
        ["selector.clients_per_rnd = 3", "unknown key", "allowed keys", "clients_per_round", "weighting"]),
    "wrong type": (
        config(rounds="ten"), ["rounds = 'ten'", "integer"]),
    "fractional rounds": (
        config(rounds=2.5), ["rounds = 2.5", "integer"]),
    "clients_per_round zero": (
        config(selector={"name": "uniform", "clients_per_round": 0}),
        ["selector.clients_per_round = 0", ">= 1"]),
    "negative lr": (
        config(train={"lr": -1}), ["train.lr = -1", "> 0"]),
    "momentum above one": (
        config(train={"momentum": 1.5}), ["train.momentum = 1.5", "< 1"]),
    "negative dirichlet alpha on a pooled dataset": (
        config(data={"name": "digits", "num_clients": 20, "partition": {"name": "dirichlet", "alpha": -1}}),
        ["data.partition.alpha = -1", "> 0"]),
    "unknown key in the partition block": (
        config(data={"name": "digits", "partition": {"name": "dirichlet", "alhpa": 1}}),
        ["data.partition.alhpa = 1", "unknown key", "alpha"]),
    "unknown partitioner": (
        config(data={"name": "digits", "partition": {"name": "bogus"}}),
        ["data.partition.name = 'bogus'", "dirichlet", "iid"]),
    "unknown algorithm": (
        config(algorithm={"name": "fedfoo"}), ["algorithm.name = 'fedfoo'", "unknown algorithm", "fedavg"]),
    "unknown dataset": (
        config(data={"name": "cifar1000"}), ["data.name = 'cifar1000'", "digits", "synthetic"]),
    "component block that is not a mapping": (
        config(selector=5), ["selector = 5"]),
    "component block without a name": (
        config(selector={"clients_per_round": 3}), ["selector.name", "required", "uniform"]),
    "missing mnist directory": (
        config(data={"name": "mnist", "path": "/nonexistent"}),
        ["data.path = '/nonexistent'", "does not exist", "IDX"]),
    "missing leaf json file": (
        config(data={"name": "leaf_json", "train_path": "/nope.json"}),
        ["data.train_path = '/nope.json'", "not found", "LEAF JSON"]),
    "both local_steps and local_epochs": (
        config(train={"local_steps": 2, "local_epochs": 1}), ["train", "local_steps", "local_epochs", "not both"]),
    "nesterov without momentum": (
        config(train={"nesterov": True}), ["train", "nesterov", "momentum"]),
    "bad variant override": (
        config(variants=[{"name": "ok", "set": {}},
                         {"name": "small", "set": {"selector.clients_per_round": -1}}]),
        ["variants[small].selector.clients_per_round = -1", ">= 1"]),
    "unknown key in a variant override": (
        config(variants=[{"name": "v", "set": {"selector.bogus": 1}}]),
        ["variants[v].selector.bogus = 1", "unknown key", "clients_per_round"]),
    "variant defining variants": (
        config(variants=[{"name": "v", "set": {"variants": []}}]), ["variants[v].set", "cannot define variants"]),
    "duplicate variant names": (
        config(variants=[{"name": "a", "set": {}}, {"name": "a", "set": {"rounds": 3}}]),
        ["variants[1].name = 'a'", "distinct", "variants[0]"]),
    "variant name with a slash": (
        config(variants=[{"name": "a/b", "set": {}}]), ["variants.0.name = 'a/b'", "'/'"]),
    "both seed and seeds": (
        config(seed=1), ["seed = 1", "either seed or seeds"]),
    "duplicate seeds": (
        config(seeds=[0, 0]), ["seeds[1] = 0", "distinct"]),
    "empty seeds": (
        config(seeds=[]), ["seeds = []", "at least 1"]),
    "bad experiment name": (
        config(name="a b/c"), ["name = 'a b/c'", "pattern"]),
}


@pytest.mark.parametrize("cfg,needles", list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS))
def test_bad_config_value(tmp_path, capsys, cfg, needles):
    run_bad(tmp_path, capsys, cfg, *needles)


def test_unknown_component_lists_every_allowed_name(tmp_path, capsys):
    from turnout.algorithms import ALGORITHMS

    line = run_bad(tmp_path, capsys, config(algorithm={"name": "fedfoo"}), "algorithm.name")
    for name in ALGORITHMS.names():
        assert name in line.split("fedfoo", 1)[1]


# ---------------------------------------------------------------------------------------------
# --set

BAD_SETS = {
    "no equals sign": (["--set", "foo"], ["--set = 'foo'", "KEY=VALUE"]),
    "empty key": (["--set", "=3"], ["--set = '=3'", "KEY=VALUE"]),
    "empty dotted part": (["--set", "a..b=3"], ["--set = 'a..b=3'", "KEY=VALUE"]),
    "unknown top-level key": (["--set", "bogus=3"], ["bogus = 3", "unknown key", "allowed keys"]),
    "unknown component key": (["--set", "selector.bogus=3"],
                              ["selector.bogus = 3", "unknown key", "clients_per_round"]),
    "through a non-mapping": (["--set", "rounds.x=3"], ["rounds = 2", "not a mapping", "rounds.x"]),
    "out-of-range value": (["--set", "selector.clients_per_round=0"], ["selector.clients_per_round = 0", ">= 1"]),
    "wrong type value": (["--set", "train.lr=fast"], ["train.lr = 'fast'", "number"]),
    "one good one bad": (["--set", "rounds=3", "--set", "train.momentum=2"], ["train.momentum = 2", "< 1"]),
}


@pytest.mark.parametrize("extra,needles", list(BAD_SETS.values()), ids=list(BAD_SETS))
def test_bad_set_override(tmp_path, capsys, extra, needles):
    run_bad(tmp_path, capsys, BASE, *needles, extra=tuple(extra))


# ---------------------------------------------------------------------------------------------
# the config file itself


def test_config_file_not_found(tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    rc, out, err = cli(["run", str(missing), "--out", str(tmp_path / "run")], capsys)
    assert_bad_input(rc, out, err, f"config = '{missing}'", "not found", run_dir=tmp_path / "run")
    assert os.listdir(tmp_path) == []


def test_config_path_is_a_directory(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    rc, out, err = cli(["run", str(tmp_path / "adir"), "--out", str(tmp_path / "run")], capsys)
    assert_bad_input(rc, out, err, "config = ", "adir", run_dir=tmp_path / "run")


def test_yaml_syntax_error_names_line(tmp_path, capsys):
    run_bad(tmp_path, capsys, "name: x\nrounds: [1, 2\nseeds: [0]\n", "config = ", "exp.yaml", "not valid YAML", "line")


def test_yaml_that_is_a_list(tmp_path, capsys):
    run_bad(tmp_path, capsys, "- rounds: 2\n- seeds: [0]\n", "config = ", "exp.yaml", "mapping")


def test_yaml_that_is_a_scalar(tmp_path, capsys):
    run_bad(tmp_path, capsys, "just a string\n", "config = ", "mapping")


def test_config_that_is_not_utf8_text(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_bytes(b"\xff\xfe\x00rounds: 2\n\x80\x81")
    rc, out, err = cli(["run", str(path), "--out", str(tmp_path / "run")], capsys)
    assert_bad_input(rc, out, err, "config = ", "UTF-8", run_dir=tmp_path / "run")


# ---------------------------------------------------------------------------------------------
# the run folder


def test_existing_non_empty_out_dir_is_refused_and_left_untouched(tmp_path, capsys):
    path = write(tmp_path, BASE)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("precious")
    rc, out, err = cli(["run", str(path), "--out", str(taken), "--quiet"], capsys)
    assert_bad_input(rc, out, err, f"--out = '{taken}'", "not empty")
    assert sorted(os.listdir(taken)) == ["keep.txt"] and (taken / "keep.txt").read_text() == "precious"
    assert not (tmp_path / "taken.partial").exists()
    assert sorted(os.listdir(tmp_path)) == ["exp.yaml", "taken"]


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    path = write(tmp_path, BASE)
    (tmp_path / "afile").write_text("x")
    rc, out, err = cli(["run", str(path), "--out", str(tmp_path / "afile"), "--quiet"], capsys)
    assert_bad_input(rc, out, err, "--out = ", "afile")
    assert (tmp_path / "afile").read_text() == "x" and not (tmp_path / "afile.partial").exists()


def test_default_out_dir_is_not_created_on_error(tmp_path, capsys, monkeypatch):
    """Without --out the default folder goes under ./runs; a bad config must not create even ./runs."""
    path = write(tmp_path, config(rounds=0))
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(["run", str(path), "--quiet"], capsys)
    assert_bad_input(rc, out, err, "rounds = 0", ">= 1")
    assert sorted(os.listdir(tmp_path)) == ["exp.yaml"]


# ---------------------------------------------------------------------------------------------
# mistakes only visible once the dataset is built: still exit 2, one line, and no folder


def test_clients_per_round_above_number_of_clients(tmp_path, capsys):
    run_bad(tmp_path, capsys, config(selector={"name": "uniform", "clients_per_round": 50}),
            "selector.clients_per_round = 50", "number of clients (6)")


def test_an_out_under_new_folders_leaves_none_of_them_when_refused(tmp_path, capsys):
    """The run folder's parents are made before the data is built; a refusal then removes the ones it made."""
    path = write(tmp_path, config(selector={"name": "uniform", "clients_per_round": 50}))
    (tmp_path / "kept").mkdir()
    rc, out, err = cli(["run", str(path), "--out", str(tmp_path / "kept" / "a" / "b" / "run"), "--quiet"], capsys)
    assert_bad_input(rc, out, err, "selector.clients_per_round = 50")
    assert sorted(os.listdir(tmp_path)) == ["exp.yaml", "kept"] and not os.listdir(tmp_path / "kept")


def test_clients_per_round_above_number_of_clients_in_a_later_variant(tmp_path, capsys):
    """The too-large cohort is only in the second variant: it must fail before the first one trains."""
    cfg = config(variants=[{"name": "fits", "set": {}},
                           {"name": "big", "set": {"selector.clients_per_round": 50}}])
    run_bad(tmp_path, capsys, cfg, "variants[big].selector.clients_per_round = 50", "number of clients (6)")


def test_more_clients_than_samples_names_the_data_key(tmp_path, capsys):
    cfg = config(data={"name": "digits", "num_clients": 5000})
    run_bad(tmp_path, capsys, cfg, "data.num_clients = 5000", "number of samples")


@pytest.mark.parametrize("model", ["cnn_fedavg", "char_lstm"])
def test_model_that_does_not_fit_the_data(tmp_path, capsys, model):
    """An image CNN / a character LSTM on flat float features is a user mistake, not a crash mid-run."""
    run_bad(tmp_path, capsys, config(model={"name": model}), "model", model)


# ---------------------------------------------------------------------------------------------
# argparse errors: exit 2 and one line too

BAD_ARGV = {
    "unknown subcommand": (["frobnicate"], ["frobnicate", "run", "list"]),
    "no subcommand": ([], ["command"]),
    "unknown flag": (["run", "exp.yaml", "--bogus"], ["--bogus"]),
    "run without a config": (["run"], ["config", "turnout run --help"]),
    "--out without a value": (["run", "exp.yaml", "--out"], ["--out"]),
    "--set without a value": (["run", "exp.yaml", "--set"], ["--set"]),
    "flag on list": (["list", "--verbose"], ["--verbose"]),
}


@pytest.mark.parametrize("argv,needles", list(BAD_ARGV.values()), ids=list(BAD_ARGV))
def test_bad_command_line(tmp_path, capsys, monkeypatch, argv, needles):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(argv, capsys)
    assert_bad_input(rc, out, err, *needles)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# the real entry points, in a fresh process: nothing but the one line reaches the terminal


def _turnout(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # a stray warning would show up as a second line
    return subprocess.run([sys.executable, "-m", "turnout", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _script() -> Path:
    script = Path(sys.executable).parent / "turnout"
    if not script.is_file():
        pytest.skip(f"no console script next to {sys.executable}")
    return script


def test_subprocess_unknown_key_in_a_variant(tmp_path):
    path = write(tmp_path, config(variants=[{"name": "v1", "set": {"selector.clients_per_rnd": 4}}]))
    proc = _turnout("run", str(path), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert_bad_input(proc.returncode, proc.stdout, proc.stderr,
                     "variants[v1].selector.clients_per_rnd = 4", "clients_per_round", run_dir=tmp_path / "run")
    assert sorted(os.listdir(tmp_path)) == ["exp.yaml"]


def test_subprocess_clients_per_round_above_number_of_clients(tmp_path):
    path = write(tmp_path, config(selector={"name": "uniform", "clients_per_round": 7}))
    proc = _turnout("run", str(path), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert_bad_input(proc.returncode, proc.stdout, proc.stderr, "selector.clients_per_round = 7",
                     "number of clients (6)", run_dir=tmp_path / "run")


def test_console_script_missing_dataset_and_bad_flag(tmp_path):
    script = _script()
    path = write(tmp_path, config(data={"name": "leaf_json", "train_path": str(tmp_path / "nope.json")}))
    proc = subprocess.run([str(script), "run", str(path), "--out", str(tmp_path / "run")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert_bad_input(proc.returncode, proc.stdout, proc.stderr, "data.train_path", "nope.json", "not found",
                     run_dir=tmp_path / "run")
    proc = subprocess.run([str(script), "run", str(path), "--frobnicate"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert_bad_input(proc.returncode, proc.stdout, proc.stderr, "--frobnicate")
    assert sorted(os.listdir(tmp_path)) == ["exp.yaml"]


# ---------------------------------------------------------------------------------------------
# hostile or absurd input (the hardening audit): one line, exit 2, nothing written — in a child
# process whose address space is capped at 3 GiB and whose run time is bounded, so a regression
# fails here instead of eating the machine


def _capped_child() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _turnout_capped(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    return subprocess.run([sys.executable, "-m", "turnout", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=180, preexec_fn=_capped_child)


def _billion_laughs() -> str:
    """Anchors a0..a9, each repeating the previous nine times: *a9 stands for 9^9 strings."""
    return 'a0: &a0 ["lol"]\n' + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))


HOSTILE = {
    "nested 1,000 levels in the file": (
        "rounds: 2\ndata: " + "[" * 1000 + "]" * 1000 + "\n", (),
        ["config = ", "nested more than 32 levels", "line 2"]),
    "nested 1,000 levels in --set": (
        BASE, ("--set", "data=" + "[" * 1000 + "]" * 1000), ["--set data = '[[[", "nested more than 32 levels"]),
    "alias bomb as a value": (
        yaml.safe_dump(BASE) + _billion_laughs() + "name: *a9\n", (),
        ["config = ", "expands to more than 1,000,000 values", "line "]),
    "NUL character": ("rounds: 2\nname: a\x00b\n", (), ["config = ", "U+0000", "line 2, column 8"]),
    "escape character": ("rounds: 2\nname: \x1b[31mred\n", (), ["config = ", "U+001B", "line 2, column 7"]),
    "local_steps 2e9 (--set)": (BASE, ("--set", "train.local_steps=2e9"),
                                ["train.local_steps = 2000000000.0", "<= 1000000"]),
    "local_steps 10^30": (config(train={"local_steps": 10**30}), (), [f"train.local_steps = {10**30}"]),
    "data.dim 1e8": (BASE, ("--set", "data.dim=1e8"), ["data.dim = 100000000.0", "<= 1000000"]),
    "data.num_clients 2^31": (BASE, ("--set", "data.num_clients=2147483648"), ["data.num_clients = 2147483648"]),
    "num_traces 1e9": (config(availability={"name": "trace", "num_traces": 10**9}), (),
                       ["availability.num_traces = 1000000000", "<= 100000000"]),
    "state_budget_mb inf": ("rounds: 2\nruntime: {state_budget_mb: .inf}\n", (),
                            ["runtime.state_budget_mb = inf", "finite number"]),
    "fits the bounds but not in memory": (config(data={"name": "synthetic", "num_clients": 6, "dim": 200_000}), (),
                                          ["data.dim = 200000", "the run needs about 1.2 TiB of memory", "available"]),
    "seeds alias modulo 2^32": (config(seeds=[0, 2**32]), (), ["seeds.1 = 4294967296", "<= 4294967295"]),
}


@pytest.mark.parametrize("cfg,extra,needles", list(HOSTILE.values()), ids=list(HOSTILE))
def test_subprocess_hostile_input_is_one_line_within_bounded_memory(tmp_path, cfg, extra, needles):
    path = tmp_path / "exp.yaml"
    path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    proc = _turnout_capped("run", str(path), "--out", str(tmp_path / "run"), *extra, cwd=tmp_path)
    assert_bad_input(proc.returncode, proc.stdout, proc.stderr, *needles, run_dir=tmp_path / "run")
    assert sorted(os.listdir(tmp_path)) == ["exp.yaml"]


HARDENING = {
    "empty file": ("", ["config = ", "is empty", "rounds: 50"]),
    "comment-only file": ("# todo: write the experiment\n", ["config = ", "is empty", "data: {name: synthetic"]),
    "rounds: true": (config(rounds=True), ["rounds = True", "not true/false"]),
    "rounds: yes": ("rounds: yes\n", ["rounds = True", "not true/false"]),
    "unknown key in eval": (config(eval={"evry": 2}), ["eval.evry = 2", "allowed keys: batch_size", "target_accuracy"]),
    "unknown key in output": (config(output={"plot": False}), ["output.plot = False", "allowed keys: plots, progress"]),
    "unknown key in runtime": (config(runtime={"threads": 2}),
                               ["runtime.threads = 2", "state_budget_mb, torch_threads"]),
    "unknown key in lr_schedule": (config(train={"lr_schedule": {"name": "step", "gama": 0.5}}),
                                   ["train.lr_schedule.gama = 0.5", "allowed keys: gamma, min_lr"]),
    "inf weight_decay": (config(train={"weight_decay": float("inf")}), ["train.weight_decay = inf", "finite"]),
    "inf local_epochs": (config(train={"local_epochs": float("inf")}), ["train.local_epochs = inf", "finite"]),
    "inf compute_s_per_sample": (config(devices={"name": "homogeneous", "compute_s_per_sample": float("inf")}),
                                 ["devices.compute_s_per_sample = inf", "finite"]),
    "inf synthetic alpha": (config(data={"name": "synthetic", "alpha": float("inf")}), ["data.alpha = inf", "finite"]),
    "inf flash s_per_sample": (config(devices={"name": "flash", "s_per_sample": float("inf")}),
                               ["devices.s_per_sample = inf", "finite"]),
    "inf deadline_s": (config(round_mode={"name": "deadline", "deadline_s": float("inf")}),
                       ["round_mode.deadline_s = inf", "finite"]),
    "server_lr 1e308": (config(algorithm={"name": "fedavg", "server_lr": 1e308}),
                        ["algorithm.server_lr = 1e+308", "<= 1000"]),
    "negative seed": (config(seeds=[-1]), ["seeds.0 = -1", ">= 0"]),
    "executor memory_mb 1e308": (config(executor={"name": "vectorized", "memory_mb": 1e308}),
                                 ["executor.memory_mb = 1e+308", "<= 16777216"]),
    "auto executor memory_mb 1e308": (config(executor={"name": "auto", "memory_mb": 1e308}),
                                      ["executor.memory_mb = 1e+308", "<= 16777216"]),
}


@pytest.mark.parametrize("cfg,needles", list(HARDENING.values()), ids=list(HARDENING))
def test_hardened_config_value(tmp_path, capsys, cfg, needles):
    run_bad(tmp_path, capsys, cfg, *needles)


def test_set_on_a_default_block_runs(tmp_path, capsys):
    """`--set devices.down_kBps=100` with no devices block applies on top of the default homogeneous devices."""
    path = write(tmp_path, config(devices=None))
    rc, out, err = cli(["run", str(path), "--out", str(tmp_path / "run"), "--quiet", "--set", "devices.down_kBps=100"],
                       capsys)
    assert rc == 0, err
    resolved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["variants"]["base"]["devices"]
    assert resolved["name"] == "homogeneous" and resolved["down_kBps"] == 100


@pytest.mark.parametrize("args", [["list"], ["list", "experiments"], ["run", "--help"], ["--help"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(args):
    """`turnout list | head -1`: the pipe closes before turnout writes; no message, no traceback file, 0 or 141."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "turnout", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the first line
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) in (0, 141)
    assert err == "", err
