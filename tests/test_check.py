"""`turnout check` validates without running, and a `--set` that reaches no variant is a one-line warning."""

import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from turnout.app.cli import main
from turnout.core.errors import ConfigWarning
from turnout.sim.composition import expand, load_experiment

ROOT = Path(__file__).resolve().parents[1]


def experiment(tmp_path, tiny, **changes) -> Path:
    tiny.update(seeds=[0, 1, 2], variants=[{"name": "K4"}, {"name": "K6", "set": {"selector.clients_per_round": 6}}],
                **changes)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tiny))
    return path


def cli(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_check_prints_resolved_variants_and_runs_nothing(tmp_path, tiny, capsys, monkeypatch):
    from turnout.data.synthetic import SyntheticDataset

    def no_building(cfg, seed):
        raise AssertionError("check must not build datasets without --data")

    monkeypatch.setattr(SyntheticDataset, "build", classmethod(lambda cls, cfg, seed: no_building(cfg, seed)))
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "check", str(experiment(tmp_path, tiny)), "--set", "train.lr=0.1")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'exp.yaml'}: valid (2 variants × 3 seeds; nothing was run). Checked: ")
    assert "not built: the datasets" in lines[0]
    k4 = lines.index("K4: 3 rounds, seeds [0, 1, 2]")
    k6 = lines.index("K6: 3 rounds, seeds [0, 1, 2]")
    assert lines[k4 + 1].split() == ["data", "synthetic", "num_clients=20"]
    assert lines[k4 + 4].split() == ["selector", "uniform", "clients_per_round=4"]
    assert lines[k6 + 4].split() == ["selector", "uniform", "clients_per_round=6"]
    for k in (k4, k6):  # the --set reached both variants; batch_size=10 is the default, so not shown
        assert lines[k + 11].split() == ["train", "local_steps=4", "lr=0.1"]
    assert lines[k6 + 12:] == ["  output                             plots=false progress=false"]  # eval: defaults
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]  # no run folder, nothing written


def test_check_refuses_a_bad_config_with_one_line(tmp_path, tiny, capsys):
    rc, out, err = cli(capsys, "check", str(experiment(tmp_path, tiny)), "--set", "selector.clients_per_rnd=3")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("turnout: error: selector.clients_per_rnd = 3: unknown key; allowed keys: ")


@pytest.mark.parametrize("sets, line", [
    (["selector.name=md"], "selector.name = 'md': chooses a whole cohort of 10 at once, but asynchronous rounds refill "
                           "the slots freed by arrivals; use one of: fedgs, oort, power_of_choice, refl_ips, uniform"),
    (["selector={name: refl_ips, clients_per_round: 4, apt: paper}"],
     "selector.apt"),
    (["algorithm.name=scaffold"], "algorithm.name = 'scaffold': inverts each report with the lr and local steps of "
                                  "the round's own cohort (option II), but asynchronous rounds aggregate reports "
                                  "started in earlier rounds; use one of: "),
    (["round_mode.buffer=5"], "round_mode.buffer = 5: must be <= selector.clients_per_round (4), the clients in "
                              "flight at once: a larger buffer never fills"),
])
def test_check_refuses_what_cannot_run_asynchronously_with_one_line(sets, line, tmp_path, tiny, capsys):
    tiny.update(round_mode={"name": "async", "buffer": 2}, algorithm={"name": "fedbuff"})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tiny))
    argv = ["check", str(path)]
    for s in sets:
        argv += ["--set", s]
    rc, out, err = cli(capsys, *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert line in err


def test_check_with_data_builds_and_catches_what_needs_the_data(tmp_path, tiny, capsys):
    path = experiment(tmp_path, tiny)
    assert cli(capsys, "check", str(path), "--set", "selector.clients_per_round=30")[0] == 0  # static: looks fine
    rc, out, err = cli(capsys, "check", str(path), "--data", "--set", "selector.clients_per_round=30",
                       "--set", "seeds=[0]")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "variants[K4].selector.clients_per_round = 30" in err and "number of clients (20)" in err
    rc, out, err = cli(capsys, "check", str(path), "--data", "--set", "seeds=[0]")
    assert rc == 0 and "every dataset built and every (variant, seed) simulation constructed" in out


def test_set_that_reaches_no_variant_warns_naming_the_key(tiny):
    tiny["variants"] = [{"name": "K4", "set": {"selector.clients_per_round": 4}},
                        {"name": "K6", "set": {"selector": {"name": "md", "clients_per_round": 6}}}]
    with pytest.warns(ConfigWarning, match=r"--set selector.clients_per_round reaches no variant"):
        got = expand(tiny, {"selector.clients_per_round": 9})
    assert [v["selector"].cfg.clients_per_round for v in got] == [4, 6]  # the run goes on, variants win
    with pytest.warns(ConfigWarning, match=r"--set selector.weighting reaches no variant"):
        tiny["variants"][0]["set"] = {"selector.weighting": "equal"}
        expand(tiny, {"selector.weighting": "n_samples"})  # K4 sets it; md has no such option
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expand(tiny, {"selector.clients_per_round": 9, "rounds": 2})  # reaches K4 now: no warning


def test_readme_commands_set_keys_that_reach_the_quickstart_variants():
    commands = ("turnout run experiments/quickstart.yaml", "turnout check experiments/quickstart.yaml")
    lines = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(commands)]
    sets = [shlex.split(line.split("#")[0]) for line in lines]
    sets = [words[i + 1] for words in sets for i, w in enumerate(words) if w == "--set"]
    assert "rounds=50" in sets and "seeds=[0,1,2]" in sets
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for s in sets:
            load_experiment(ROOT / "experiments" / "quickstart.yaml", [s])


def test_command_line_warning_is_one_line_and_the_command_goes_on(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "turnout", "check", str(ROOT / "experiments" / "quickstart.yaml"),
                           "--set", "selector.clients_per_round=5"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        "turnout: warning: --set selector.clients_per_round reaches no variant: every variant sets ")
    assert "K=5: 300 rounds" in proc.stdout
