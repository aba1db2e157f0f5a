"""Run folders: determinism, shared populations across variants, comparison tables, plots."""

import json

import numpy as np
import pytest
import yaml

from turnout.app.cli import main

BASE = """
name: det
seeds: [SEEDS]
rounds: 4
data: {name: synthetic, num_clients: 10, alpha: 0.5, beta: 0.5}
model: {name: logreg}
train: {batch_size: 10, local_steps: 3, lr: 0.05}
selector: {name: uniform, clients_per_round: 3}
eval: {every: 2, target_accuracy: 0.05, per_client: true}
output: {progress: false, plots: PLOTS}
"""


def write_cfg(tmp_path, seeds="0", plots="false", extra=""):
    p = tmp_path / f"cfg-{seeds.replace(',', '_').replace(' ', '')}.yaml"
    p.write_text(BASE.replace("SEEDS", seeds).replace("PLOTS", plots) + extra)
    return p


def run(cfg, out, *sets):
    args = ["run", str(cfg), "--out", str(out), "--quiet"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return out


def test_same_seed_gives_byte_identical_rounds_csv(tmp_path):
    cfg = write_cfg(tmp_path)
    a = run(cfg, tmp_path / "a")
    b = run(cfg, tmp_path / "b")
    assert (a / "rounds.csv").read_bytes() == (b / "rounds.csv").read_bytes()
    assert (a / "clients.csv").read_bytes() == (b / "clients.csv").read_bytes()
    c = run(cfg, tmp_path / "c", "seeds=[1]")
    assert (a / "rounds.csv").read_bytes() != (c / "rounds.csv").read_bytes()


def test_run_folder_contents(tmp_path):
    cfg = write_cfg(tmp_path, plots="true")
    out = run(cfg, tmp_path / "out")
    names = {p.name for p in out.iterdir()}
    assert {"config.yaml", "rounds.csv", "clients.csv", "comparison.csv", "summary.json",
            "accuracy_vs_round.png", "accuracy_vs_bytes_down.png", "accuracy_vs_sim_time.png"} <= names
    assert not (tmp_path / "out.partial").exists()
    header = (out / "rounds.csv").read_text().splitlines()[0].split(",")
    for col in ("round", "sim_time_s", "round_duration_s", "accuracy", "loss", "bytes_up", "bytes_down",
                "n_available", "n_selected", "n_aggregated", "n_stale", "resource_s", "wasted_s"):
        assert col in header
    clients = (out / "clients.csv").read_text().splitlines()
    assert len(clients) == 1 + 10
    for col in ("client", "n_train", "times_selected", "times_aggregated", "bytes_up", "bytes_down", "last_round",
                "test_accuracy"):
        assert col in clients[0].split(",")
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["turnout"]["torch"].startswith("2.") and resolved["seeds"] == [0]
    base = resolved["variants"]["base"]
    assert base["selector"] == {"name": "uniform", "clients_per_round": 3, "weighting": "n_samples"}
    assert base["train"]["momentum"] == 0.0  # defaults are written out
    summary = json.loads((out / "summary.json").read_text())
    run0 = summary["runs"][0]
    assert run0["rounds_to_target"] == 2  # first evaluation (after round 2) beats a 5 % target
    assert run0["bytes_down"] == sum(int(line.split(",")[header.index("bytes_down")])
                                     for line in (out / "rounds.csv").read_text().splitlines()[1:])


def test_variants_share_population_and_comparison_has_mean_std(tmp_path):
    extra = """
variants:
  - {name: K3, set: {selector.clients_per_round: 3}}
  - {name: K6, set: {selector.clients_per_round: 6}}
"""
    cfg = write_cfg(tmp_path, seeds="0, 1", extra=extra)
    out = run(cfg, tmp_path / "cmp")
    import csv

    rows = list(csv.DictReader(open(out / "comparison.csv")))
    assert [(r["variant"], r["seed"]) for r in rows] == [
        ("K3", "0"), ("K3", "1"), ("K3", "mean"), ("K3", "std"),
        ("K6", "0"), ("K6", "1"), ("K6", "mean"), ("K6", "std")]
    k3 = [float(r["final_accuracy"]) for r in rows if r["variant"] == "K3" and r["seed"] in "01"]
    mean = next(float(r["final_accuracy"]) for r in rows if r["variant"] == "K3" and r["seed"] == "mean")
    std = next(float(r["final_accuracy"]) for r in rows if r["variant"] == "K3" and r["seed"] == "std")
    assert mean == pytest.approx(np.mean(k3)) and std == pytest.approx(np.std(k3))
    # same population per seed: identical n_train per client in both variants
    cl = list(csv.DictReader(open(out / "clients.csv")))
    for seed in ("0", "1"):
        a = [r["n_train"] for r in cl if r["variant"] == "K3" and r["seed"] == seed]
        b = [r["n_train"] for r in cl if r["variant"] == "K6" and r["seed"] == seed]
        assert a == b and len(a) == 10
    # a variant's numbers do not depend on which other variants ran with it
    alone = run(write_cfg(tmp_path, seeds="0, 1"), tmp_path / "alone", "selector.clients_per_round=6")
    def rounds(folder, variant):
        return [line.split(",", 2)[2] for line in (folder / "rounds.csv").read_text().splitlines()[1:]
                if line.startswith(variant + ",")]

    assert rounds(out, "K6") == rounds(alone, "base")


def test_list_shows_every_seam(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    for seam in ("data", "model", "algorithm", "selector", "availability", "devices", "round_mode", "compressor",
                 "executor", "recorder", "data.partition"):
        assert f"\n{seam}  (" in "\n" + text
    for name in ("synthetic", "digits", "fashion_mnist", "shakespeare", "leaf_json", "logreg", "cnn_fedavg",
                 "char_lstm", "fedavg", "uniform", "always", "homogeneous", "wait_all", "none", "sequential",
                 "csv", "dirichlet"):
        assert f"  {name} " in text


def test_list_seam_shows_component_options(capsys):
    assert main(["list", "compressor.gluefl"]) == 0
    text = capsys.readouterr().out
    assert "  gluefl " in text and "  stc " not in text
    for option in ("regenerate_every = 10", "error_compensation = 'rescaled'", "shared_ratio = 0.16"):
        assert option in text  # GlueFL's ablation switches with their defaults
    assert main(["list", "selector"]) == 0
    text = capsys.readouterr().out
    assert "  sticky " in text and "sticky_size = None" in text and "  uniform " in text
    assert main(["list", "compressor.nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and "gluefl" in err[0]


def test_the_bytes_axis_reads_in_decimal_units():
    """A bytes axis says MB or GB, as the tables print them, instead of matplotlib's bare 1e7 offset."""
    from types import SimpleNamespace

    import matplotlib.axes

    from turnout.recorders import plots

    assert plots.byte_unit(3.66e6) == (1e6, "MB") and plots.byte_unit(2.9e10) == (1e9, "GB")
    assert plots.byte_unit(512) == (1.0, "B") and plots.byte_unit(0) == (1.0, "B")
    rows = [{"round": r, "cum_bytes_down": 4.0e7 * (r + 1), "sim_time_s": 10.0 * r, "accuracy": 0.1 * r}
            for r in range(5)]
    seen = {}
    real = matplotlib.axes.Axes.set_xlabel

    def spy(self, label, *a, **k):
        seen.setdefault("labels", []).append(label)
        seen.setdefault("xmax", []).append(max(line.get_xdata().max() for line in self.get_lines()))
        return real(self, label, *a, **k)

    matplotlib.axes.Axes.set_xlabel = spy
    try:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            plots.plot_accuracy([SimpleNamespace(variant="v", rounds=rows)], Path(tmp), "t")
    finally:
        matplotlib.axes.Axes.set_xlabel = real
    i = seen["labels"].index("cumulative bytes downloaded (MB)")
    assert seen["xmax"][i] == 200.0  # 2e8 bytes drawn as 200 MB
