"""`turnout report`: settings side by side, mean ± std over seeds, paired t intervals, footnoted gaps, errors."""

import json
import math

import numpy as np
import pytest
import yaml
from scipy import stats

from turnout.app.cli import main
from turnout.app.report import write_report
from turnout.app.report.curves import curves
from turnout.app.report.folders import load_targets
from turnout.app.report.tables import Footnotes, PairedDifference, metric_table, paired_difference, paired_table
from turnout.recorders.plots import legend_label


def fake_run(folder, losses):
    """A finished run folder with two variants' best_loss per seed (and their curves)."""
    folder.mkdir(parents=True)
    runs = [{"variant": v, "seed": s, "best_loss": x, "final_accuracy": 1 - x, "wall_s": 2.0}
            for v, xs in losses.items() for s, x in enumerate(xs)]
    (folder / "summary.json").write_text(json.dumps({"versions": {"turnout": "9.9"}, "runs": runs}))
    lines = ["variant,seed,round,loss"] + [f"{r['variant']},{r['seed']},{t},{r['best_loss'] + 1 / (t + 1)}"
                                           for r in runs for t in range(5)]
    (folder / "rounds.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_table_has_mean_std_and_bolds_the_best_of_each_column(tmp_path):
    a = fake_run(tmp_path / "IDL", {"uniform": [0.30, 0.32], "fedgs": [0.28, 0.30]})
    b = fake_run(tmp_path / "MDF", {"uniform": [0.40, 0.44], "fedgs": [0.50, 0.50]})
    table = metric_table({"IDL": json.loads((a / "summary.json").read_text()),
                          "MDF": json.loads((b / "summary.json").read_text())}, "best_loss")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in table.splitlines()[2:]}
    assert rows["uniform"] == ["0.310 ± 0.010", "**0.420 ± 0.020**"]
    assert rows["fedgs"] == ["**0.290 ± 0.010**", "0.500 ± 0.000"]
    acc = metric_table({"IDL": json.loads((a / "summary.json").read_text())}, "final_accuracy")
    assert "**0.710 ± 0.010**" in acc  # higher is better for accuracy


def test_page_names_command_version_seeds_and_plot(tmp_path):
    a = fake_run(tmp_path / "runs" / "IDL", {"uniform": [0.3, 0.3, 0.3]})
    out = write_report([a], tmp_path / "docs" / "fedgs.md", ["best_loss"], "FedGS", "turnout reproduce fedgs",
                       elapsed_s=120)
    text = out.read_text()
    assert "turnout reproduce fedgs" in text and "turnout 9.9" in text and "seeds 0, 1, 2" in text
    assert "wall-clock 2.0 min" in text and "![](fedgs/loss.png)" in text
    assert (tmp_path / "docs" / "fedgs" / "loss.png").stat().st_size > 1000


@pytest.mark.parametrize("argv,words", [
    (["report", "/nonexistent/run", "--out", "x.md"], ["/nonexistent/run", "summary.json"]),
    (["report", "RUN", "--out", "x.md", "--metric", "accuracy_of_doom"], ["--metric", "accuracy_of_doom", "best_loss"]),
])
def test_bad_report_arguments_fail_with_one_line(tmp_path, capsys, argv, words):
    fake_run(tmp_path / "RUN", {"uniform": [0.3]})
    argv = [str(tmp_path / "RUN") if a == "RUN" else a for a in argv]
    argv[argv.index("x.md")] = str(tmp_path / "x.md")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words)
    assert not (tmp_path / "x.md").exists()


def test_bytes_as_percent_of_a_baseline(tmp_path):
    a = tmp_path / "N10"
    a.mkdir()
    runs = [{"variant": "full", "seed": 0, "bytes_up": 1000}, {"variant": "ou", "seed": 0, "bytes_up": 790}]
    table = metric_table({"N10": {"runs": runs}}, "bytes_up", percent_of="full")
    assert "790.0 ± 0.0 (79 %)" in table and "(100 %)" in table


def test_selection_count_plot_from_clients_csv(tmp_path):
    a = fake_run(tmp_path / "runs" / "YMF", {"uniform": [0.3, 0.3], "fedgs": [0.2, 0.2]})
    rows = ["variant,seed,client,times_selected"] + [f"{v},{s},{c},{(c + s) if v == 'uniform' else 5}"
                                                     for v in ("uniform", "fedgs") for s in (0, 1) for c in range(4)]
    (a / "clients.csv").write_text("\n".join(rows) + "\n")
    from turnout.app.report.curves import selection_counts
    counts = selection_counts(a)
    assert counts["uniform"].tolist() == [0.5, 1.5, 2.5, 3.5] and counts["fedgs"].tolist() == [5.0] * 4
    out = write_report([a], tmp_path / "docs" / "fedgs.md", ["best_loss"], "FedGS", curve=None, counts=["YMF"])
    assert "![](fedgs/counts_YMF.png)" in out.read_text()
    assert (tmp_path / "docs" / "fedgs" / "counts_YMF.png").stat().st_size > 1000
    assert main(["report", str(a), "--out", str(tmp_path / "y.md"), "--counts", "IDL"]) == 2
    assert not (tmp_path / "y.md").exists()


# ---- paired differences, footnotes, bands ----------------------------------------------------------
def paired_run(folder, values, target=0.8, metric="final_accuracy"):
    """A run folder with ``values[variant] = [per-seed value or None]`` of ``metric`` and a config.yaml target."""
    folder.mkdir(parents=True)
    runs = [{"variant": v, "seed": s, metric: x} for v, xs in values.items() for s, x in enumerate(xs)]
    (folder / "summary.json").write_text(json.dumps({"runs": runs}))
    (folder / "config.yaml").write_text(yaml.safe_dump(
        {"name": folder.name, "variants": {v: {"eval": {"target_accuracy": target}} for v in values}}))
    return folder


def cells(table):
    return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in table.splitlines()[2:]}


def test_paired_difference_is_the_paired_t_interval_over_seeds():
    base = {0: 0.80, 1: 0.82, 2: 0.78}
    other = {0: 0.83, 1: 0.86, 2: 0.79}  # differences 0.03, 0.04, 0.01
    d = paired_difference(base, other)
    mean = (0.03 + 0.04 + 0.01) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in (0.03, 0.04, 0.01)) / 2)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)  # 4.3027 · 0.015275 / √3 = 0.03795
    assert d.n == 3 and d.mean == pytest.approx(0.026667, abs=1e-6)
    assert (d.low, d.high) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert d.low == pytest.approx(-0.011279, abs=1e-6) and d.high == pytest.approx(0.064612, abs=1e-6)
    assert paired_difference({0: 0.5}, {0: 0.53}) == PairedDifference(1, pytest.approx(0.03), None, None)
    assert paired_difference({0: 0.5}, {1: 0.5}) is None  # no common seed, nothing to pair


def test_paired_table_cells_with_interval_left_out_seeds_and_one_seed(tmp_path):
    s = paired_run(tmp_path / "S", {"fedavg": [0.80, 0.82, 0.78], "fedprox": [0.83, 0.86, 0.79]})
    r = paired_run(tmp_path / "R", {"fedavg": [40, 50, None], "fedprox": [30, 45, 35]}, metric="rounds_to_target")
    one = paired_run(tmp_path / "ONE", {"fedavg": [0.5], "fedprox": [0.53]})
    summaries = {p.name: json.loads((p / "summary.json").read_text()) for p in (s, one)}
    notes = Footnotes()
    assert cells(paired_table(summaries, "final_accuracy", "fedavg", notes))["fedprox"] == [
        "+0.0267 [-0.0113, +0.0646] (n=3)", "+0.0300 (1 seed: no interval)"]
    assert notes.reasons == []
    notes = Footnotes()
    got = cells(paired_table({"R": json.loads((r / "summary.json").read_text())}, "rounds_to_target", "fedavg",
                             notes, {"R": load_targets(r)}))
    half = stats.t.ppf(0.975, 1) * math.sqrt(12.5) / math.sqrt(2)  # differences −10, −5: t(0.975, 1) = 12.706
    assert got["fedprox"] == [f"-7.5 [{-7.5 - half:+.1f}, {-7.5 + half:+.1f}] (n=2)¹"] == ["-7.5 [-39.3, +24.3] (n=2)¹"]
    assert notes.reasons == ["seed 2 left out in R: no rounds_to_target for fedavg (target not reached)"]


def test_every_empty_cell_has_a_footnote_saying_why(tmp_path):
    unset = paired_run(tmp_path / "UNSET", {"a": [None, None], "b": [3, 4]}, target=None, metric="rounds_to_target")
    missed = paired_run(tmp_path / "MISSED", {"a": [None, None], "b": [5, None]}, metric="rounds_to_target")
    summaries = {p.name: json.loads((p / "summary.json").read_text()) for p in (unset, missed)}
    targets = {p.name: load_targets(p) for p in (unset, missed)}
    notes = Footnotes()
    table = cells(metric_table(summaries, "rounds_to_target", notes=notes, targets=targets))
    assert table["a"] == ["—¹", "—²"] and table["b"] == ["**3.500 ± 0.500**", "**5.000 ± 0.000 (1/2)**³"]
    assert notes.reasons == ["no target: eval.target_accuracy is unset for a in UNSET",
                             "a did not reach the target accuracy 0.8 with any of its 2 seeds in MISSED",
                             "b did not reach the target accuracy 0.8 with seed 1 in MISSED"]
    notes = Footnotes()
    assert cells(paired_table(summaries, "rounds_to_target", "a", notes, targets))["b"] == ["—¹", "—²"]
    assert notes.reasons[0].startswith("no target") and notes.reasons[1].startswith("a did not reach")
    notes = Footnotes()
    assert cells(metric_table(summaries, "tau_max", notes=notes, targets=targets))["a"] == ["—¹", "—²"]
    assert notes.reasons == ["tau_max is absent from UNSET's summary.json",
                             "tau_max is absent from MISSED's summary.json"]


def test_page_states_pairing_baseline_and_one_seed(tmp_path):
    a = paired_run(tmp_path / "A", {"x": [0.5], "y": [0.6], "z": [0.4]})
    out = write_report([a], tmp_path / "p.md", ["final_accuracy"], "T", curve=None, baseline="y")
    text = out.read_text()
    assert "## Paired differences from y (per seed, 95 % paired t interval)" in text
    assert "same population — the same data partition, initial model" in text
    assert "one seed each, so no interval can be given" in text and "4.303" in text  # t(0.975, 2)
    assert "| x | -0.1000 (1 seed: no interval) |" in text and "| z | -0.2000 (1 seed: no interval) |" in text
    assert main(["report", str(a), "--out", str(tmp_path / "q.md"), "--baseline", "w"]) == 2
    assert main(["report", str(a), "--out", str(tmp_path / "q.md"), "--paired", "nonsense"]) == 2
    assert not (tmp_path / "q.md").exists()
    no_pairs = write_report([a], tmp_path / "r.md", ["best_loss"], "T", curve=None).read_text()
    assert "Paired differences" not in no_pairs  # best_loss is not paired unless --paired asks
    asked = write_report([a], tmp_path / "s.md", ["best_loss"], "T", curve=None, paired=["final_accuracy"])
    assert "### final_accuracy: variant − x" in asked.read_text()


def test_curve_bands_are_mean_and_std_over_seeds(tmp_path):
    a = fake_run(tmp_path / "IDL", {"uniform": [0.30, 0.32, 0.40], "fedgs": [0.28, 0.30, 0.29]})
    by_variant = curves(a, "loss")
    x, mean, std, n = by_variant["uniform"]
    at_round_1 = [0.30 + 1, 0.32 + 1, 0.40 + 1]  # fake_run's loss is best_loss + 1/(t+1) at round t = 0
    assert x.tolist() == [1, 2, 3, 4, 5] and n == 3
    assert mean[0] == pytest.approx(np.mean(at_round_1)) and std[0] == pytest.approx(np.std(at_round_1))
    assert legend_label("uniform", {3}) == "uniform (3 seeds)" and legend_label("u", {1, 3}) == "u (1–3 seeds)"
    assert main(["report", str(a), "--out", str(tmp_path / "x.md"), "--curve", "accuracyy"]) == 2


def test_report_end_to_end_on_a_two_variant_three_seed_run(tmp_path, two_variant_run):
    run = two_variant_run([0, 1, 2])
    page = tmp_path / "page.md"
    assert main(["report", str(run), "--out", str(page), "--metric", "final_accuracy", "--metric",
                 "rounds_to_target", "--curve", "accuracy"]) == 0
    text = page.read_text()
    runs = json.loads((run / "summary.json").read_text())["runs"]
    acc = {v: {r["seed"]: r["final_accuracy"] for r in runs if r["variant"] == v} for v in ("K4", "K8")}
    d = np.array([acc["K8"][s] - acc["K4"][s] for s in (0, 1, 2)])
    half = stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert f"| K8 | {d.mean():+.4f} [{d.mean() - half:+.4f}, {d.mean() + half:+.4f}] (n=3) |" in text
    assert "### rounds_to_target: variant − K4" in text
    assert (tmp_path / "page" / "accuracy.png").stat().st_size > 1000


def test_curves_against_a_cumulative_column_interpolate_each_seed(tmp_path):
    """Against bytes or client-seconds the seeds' x values differ: each seed is interpolated onto a common grid."""
    folder = tmp_path / "run"
    folder.mkdir()
    runs = [{"variant": "a", "seed": s, "final_accuracy": 0.5, "wall_s": 1.0} for s in (0, 1)]
    (folder / "summary.json").write_text(json.dumps({"versions": {}, "runs": runs}))
    # seed 0 spends 10 B a round, seed 1 20 B; accuracy = round / 10 in both
    lines = ["variant,seed,round,accuracy,cum_bytes_up,cum_bytes_down"]
    lines += [f"a,{s},{t},{t / 10},{(t + 1) * 10 * (s + 1)},{(t + 1) * 10 * (s + 1)}" for s in (0, 1) for t in range(5)]
    (folder / "rounds.csv").write_text("\n".join(lines) + "\n")
    x, mean, std, n = curves(folder, "accuracy", "cum_bytes_up+cum_bytes_down", points=5)["a"]
    assert n == 2 and x[0] == 40 and x[-1] == 100  # the range both seeds cover: [max of minima, min of maxima]
    # at 40 B seed 0 is at round 1 (0.1) and seed 1 at round 0 (0.0); at 100 B: 0.4 and 0.15
    assert mean[0] == pytest.approx(0.05) and std[0] == pytest.approx(0.05)
    assert mean[-1] == pytest.approx((0.4 + 0.15) / 2)
    by_round = curves(folder, "accuracy")["a"]
    assert by_round[0].tolist() == [1, 2, 3, 4, 5] and by_round[2][0] == 0.0
    page = tmp_path / "p.md"
    assert main(["report", str(folder), "--out", str(page), "--metric", "final_accuracy", "--curve", "accuracy",
                 "--curve-x", "round", "--curve-x", "cum_bytes_down", "--provenance", "commit=abc123",
                 "--provenance", "config hash=ff00"]) == 0
    text = page.read_text()
    assert "Made from commit `abc123`; config hash `ff00`." in text
    assert "against cum_bytes_down (MB)" in text and (tmp_path / "p" / "accuracy_vs_cum_bytes_down.png").is_file()
    assert main(["report", str(folder), "--out", str(page), "--curve", "accuracy", "--curve-x", "bytes"]) == 2
    assert main(["report", str(folder), "--out", str(page), "--provenance", "nokey"]) == 2


def test_curves_against_communicated_vectors(tmp_path, simulate, tiny):
    """FedSUM Fig. 1(b) counts communication in model-sized vectors: the report divides the cumulative bytes by
    the run's vector_bytes. Worked by hand: vector_bytes 100 B; variant a sends 1 vector down and 1 up a round
    (200 B), variant b 2 down and 1 up (300 B), so after rounds 1, 2, 3 they have sent 2, 4, 6 and 3, 6, 9
    vectors; loss = 1/round."""
    folder = tmp_path / "run"
    folder.mkdir()
    runs = [{"variant": v, "seed": 0, "final_loss": 1 / 3, "wall_s": 1.0, "vector_bytes": 100} for v in "ab"]
    (folder / "summary.json").write_text(json.dumps({"versions": {}, "runs": runs}))
    down = {"a": 100, "b": 200}
    lines = ["variant,seed,round,loss,cum_bytes_up,cum_bytes_down"]
    lines += [f"{v},0,{t},{1 / (t + 1)},{(t + 1) * 100},{(t + 1) * down[v]}" for v in "ab" for t in range(3)]
    (folder / "rounds.csv").write_text("\n".join(lines) + "\n")
    x, mean, _, _ = curves(folder, "loss", "cum_vectors_up+cum_vectors_down", points=3)["a"]
    assert x.tolist() == [2, 4, 6] and mean.tolist() == pytest.approx([1, 1 / 2, 1 / 3])
    x, mean, _, _ = curves(folder, "loss", "cum_vectors_down", points=3)["b"]
    assert x.tolist() == [2, 4, 6]  # two downlink vectors a round
    x, _, _, _ = curves(folder, "loss", "cum_vectors_up+cum_vectors_down", points=3)["b"]
    assert x.tolist() == [3, 6, 9]
    page = tmp_path / "p.md"
    assert main(["report", str(folder), "--out", str(page), "--metric", "final_loss",
                 "--curve-x", "cum_vectors_up+cum_vectors_down"]) == 0
    assert "against model-sized vectors sent, up + down" in page.read_text()
    # a run folder made before runs recorded vector_bytes cannot be plotted so, and says why
    (folder / "summary.json").write_text(json.dumps({"versions": {}, "runs": [
        {k: x for k, x in r.items() if k != "vector_bytes"} for r in runs]}))
    assert main(["report", str(folder), "--out", str(page), "--curve-x", "cum_vectors_down"]) == 2
    # the engine records vector_bytes: tiny's logistic regression on 60 features and 10 classes has
    # 60·10 + 10 = 610 float32 parameters, 2,440 B; FedAvg sends each of the 4 clients one vector each way
    _, res = simulate(tiny)
    assert res.summary["vector_bytes"] == 2440
    assert res.rounds[0]["bytes_up"] == res.rounds[0]["bytes_down"] == 4 * 2440


def _tiny_experiment(tmp_path, tiny):
    tiny.update(seeds=[0, 1], rounds=3, eval={"every": 1, "target_accuracy": 0.15},
                data={"name": "synthetic", "num_clients": 10},
                variants=[{"name": "K4"}, {"name": "K8", "set": {"selector.clients_per_round": 8}}])
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(tiny))
    return cfg


def _paired_row(text, metric, variant):
    section = text.split(f"### {metric}: variant")[1]
    return next(line for line in section.splitlines() if line.startswith(f"| {variant} |"))


def test_variants_run_one_at_a_time_are_one_comparison(tmp_path, tiny):
    """`turnout run CFG --variant K4 --out A`, then `--variant K8 --out B`: `turnout report A B` pairs K8 with K4
    seed by seed exactly as a run of both variants into one folder does (one column, "A + B")."""
    cfg = _tiny_experiment(tmp_path, tiny)
    a, b, both = tmp_path / "A", tmp_path / "B", tmp_path / "AB"
    assert main(["run", str(cfg), "--variant", "K4", "--out", str(a), "--quiet"]) == 0
    assert main(["run", str(cfg), "--variant", "K8", "--out", str(b)]) == 0  # --quiet or not: the same experiment
    assert main(["run", str(cfg), "--out", str(both), "--quiet"]) == 0
    apart, together = tmp_path / "apart.md", tmp_path / "together.md"
    for folders, page in (([a, b], apart), ([both], together)):
        assert main(["report", *map(str, folders), "--out", str(page), "--metric", "final_accuracy"]) == 0
    text = apart.read_text()
    assert "A + B: run folders of one experiment (the same config but for the variants each ran), compared as one." \
        in text
    runs = json.loads((both / "summary.json").read_text())["runs"]
    acc = {v: {r["seed"]: r["final_accuracy"] for r in runs if r["variant"] == v} for v in ("K4", "K8")}
    d = np.array([acc["K8"][s] - acc["K4"][s] for s in (0, 1)])
    assert d.std(ddof=1) > 0  # a real interval, not a degenerate one
    half = stats.t.ppf(0.975, 1) * d.std(ddof=1) / math.sqrt(2)
    cell = f"{d.mean():+.4f} [{d.mean() - half:+.4f}, {d.mean() + half:+.4f}] (n=2)"
    assert _paired_row(text, "final_accuracy", "K8") == f"| K8 | {cell} |"
    assert _paired_row(together.read_text(), "final_accuracy", "K8") == f"| K8 | {cell} |"
    assert "| method | A + B |" in text and "| K8 | —" not in text and "was not run" not in text


def test_folders_not_of_the_same_experiment_are_said_so(tmp_path, tiny):
    cfg = _tiny_experiment(tmp_path, tiny)
    a, c, a2 = tmp_path / "A", tmp_path / "C", tmp_path / "A2"
    assert main(["run", str(cfg), "--variant", "K4", "--out", str(a), "--quiet"]) == 0
    assert main(["run", str(cfg), "--variant", "K8", "--set", "rounds=4", "--out", str(c), "--quiet"]) == 0
    assert main(["run", str(cfg), "--variant", "K4", "--seed", "1", "--out", str(a2), "--quiet"]) == 0
    old = fake_run(tmp_path / "OLD", {"other": [0.3, 0.3]})  # no experiment.json: made before it was recorded
    page = tmp_path / "p.md"
    assert main(["report", str(a), str(c), str(old), str(a2), "--out", str(page), "--metric", "final_accuracy"]) == 0
    text = page.read_text()
    assert ("C shares no variant with A, but they are not the same experiment (`rounds` set by --set: (unset) in A, "
            "4 in C): their variants are not compared seed by seed, and each folder is its own column.") in text
    assert ("OLD shares no variant with A, but OLD has no experiment.json (made before turnout recorded it), so they "
            "are not known to be the same experiment") in text
    # A2 re-runs a unit A holds (K4 seed 1): two runs of one experiment stay two columns, and share a variant
    assert "| method | A | C | OLD | A2 |" in text and "A2 shares" not in text and "A + A2" not in text
    ours = tmp_path / "D"
    assert main(["run", str(cfg), "--variant", "K8", "--set", "train.lr=0.1", "--out", str(ours), "--quiet"]) == 0
    from turnout.app.report.folders import why_not_one_experiment
    assert why_not_one_experiment(c, ours) == ("they are not the same experiment (`rounds` set by --set: 4 in C, "
                                               "(unset) in D)")
    assert why_not_one_experiment(a, a2) == ""  # --seed picks units, not the experiment
