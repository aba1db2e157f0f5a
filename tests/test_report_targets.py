"""A page's target: GlueFL's "highest accuracy reached by all approaches", averaged over 5 rounds, per setting
and seed, with every *_to_target metric recounted from hand-made rounds tables (numbers worked out below)."""

import json
import math

import numpy as np
import pytest
import yaml

from turnout.app.cli import main
from turnout.app.report import write_report
from turnout.app.report.folders import load_runs, load_targets, round_rows
from turnout.app.report.tables import Footnotes, metric_table, paired_table
from turnout.app.report.targets import SeedTarget, retarget
from turnout.core.metrics import reached_by_all, smoothed_accuracy, to_target

#: accuracy evaluated every 2 rounds (rounds 0, 2, 4, 6 of 8): variant → seed → the four evaluations
ACC = {"a": {0: [0.50, 0.66, 0.72, 0.74], 1: [0.45, 0.60, 0.70, 0.71]},
       "b": {0: [0.40, 0.55, 0.62, 0.66], 1: [0.62, 0.70, 0.68, 0.50]}}
#: per round r: sim_time_s = SIM[v]·(r+1), cum_bytes_down = DOWN[v]·(r+1), cum_download_s = 2(r+1), up = 500(r+1)
SIM, DOWN = {"a": 10.0, "b": 12.0}, {"a": 1000, "b": 800}


def _rows(v, seed, acc):
    for r in range(8):
        yield {"variant": v, "seed": seed, "round": r, "accuracy": acc[r // 2] if r % 2 == 0 else "",
               "sim_time_s": SIM[v] * (r + 1), "cum_download_s": 2.0 * (r + 1), "cum_bytes_down": DOWN[v] * (r + 1),
               "cum_bytes_up": 500 * (r + 1)}


def glue_run(folder, acc=ACC, extra_runs=(), extra_rows=()):
    """A finished run folder as `turnout run` leaves it: rounds.csv, summary.json at the fixed target 0.70
    (b never reaches it in seed 0), config.yaml."""
    folder.mkdir(parents=True)
    rows = [row for v, seeds in acc.items() for s, a in seeds.items() for row in _rows(v, s, a)] + list(extra_rows)
    cols = list(rows[0])
    (folder / "rounds.csv").write_text(",".join(cols) + "\n" + "".join(
        ",".join(str(r[c]) for c in cols) + "\n" for r in rows))
    runs = []
    for v, seeds in acc.items():
        for s, a in seeds.items():
            hit = next((2 * i for i, x in enumerate(a) if x >= 0.70), None)  # the fixed target, as summarize does
            fixed = {} if hit is None else {"rounds_to_target": hit + 1, "bytes_down_to_target": DOWN[v] * (hit + 1)}
            runs.append({"variant": v, "seed": s, "final_accuracy": a[-1], "rounds_to_target": None,
                         "sim_time_to_target_s": None, "download_time_to_target_s": None,
                         "bytes_down_to_target": None, "bytes_up_to_target": None, **fixed})
    (folder / "summary.json").write_text(json.dumps({"versions": {}, "runs": runs + list(extra_runs)}))
    variants = list(acc) + [r["variant"] for r in extra_runs]
    (folder / "config.yaml").write_text(yaml.safe_dump(
        {"name": folder.name, "seeds": [0, 1], "variants": {v: {"eval": {"target_accuracy": 0.70}} for v in variants}}))
    return folder


def by(runs, metric):
    return {(r["variant"], r["seed"]): r[metric] for r in runs}


def test_smoothing_averages_the_evaluations_of_the_last_five_rounds():
    nan = math.nan
    # every 2 rounds: round 6 averages rounds 2, 4, 6 (0.66, 0.72, 0.74) = 0.706667; round 4: 0.50, 0.66, 0.72
    got = smoothed_accuracy(np.array([0.50, nan, 0.66, nan, 0.72, nan, 0.74, nan]))
    assert np.isnan(got[[1, 3, 5, 7]]).all()
    assert got[[0, 2, 4, 6]] == pytest.approx([0.50, 0.58, 0.626667, 0.706667], abs=1e-6)
    # every round: round 5 averages rounds 1..5 (0.2 .. 0.6) = 0.4, round 0 only itself
    assert smoothed_accuracy(np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]))[[0, 5]] == pytest.approx([0.1, 0.4])
    # every 5 rounds (GlueFL's page): one evaluation in each window, the accuracy itself, bit for bit
    acc = np.array([0.3, nan, nan, nan, nan, 0.61, nan, nan, nan, nan, 0.7])
    assert np.array_equal(smoothed_accuracy(acc), acc, equal_nan=True)


def test_common_target_is_the_lowest_best_and_to_target_reads_csv_rows():
    assert reached_by_all({"a": 0.706667, "b": 0.61, "c": 0.65}) == (0.61, "b")
    assert reached_by_all({}) is None
    rows = list(_rows("a", 0, ACC["a"][0]))
    csv_rows = [{k: str(v) for k, v in r.items()} for r in rows]  # rounds.csv cells are strings
    acc = smoothed_accuracy(np.array([np.nan if r["accuracy"] == "" else r["accuracy"] for r in rows], dtype=float))
    want = {"rounds_to_target": 5, "sim_time_to_target_s": 50.0, "download_time_to_target_s": 10.0,
            "bytes_down_to_target": 5000, "bytes_up_to_target": 2500}  # round 4's row
    assert to_target(csv_rows, acc, 0.61) == to_target(rows, acc, 0.61) == want
    assert to_target(rows, acc, 0.71) == {}  # best averaged accuracy 0.706667: never reached


def test_targets_per_seed_and_every_metric_recounted(tmp_path):
    folder = glue_run(tmp_path / "S")
    summary, targets = retarget([folder], load_runs(folder))
    # seed 0: best averaged a 0.706667 (round 6), b (0.55 + 0.62 + 0.66) / 3 = 0.61 → 0.61, set by b;
    # seed 1: a (0.60 + 0.70 + 0.71) / 3 = 0.67, b (0.62 + 0.70 + 0.68) / 3 = 0.666667 (round 4) → b's
    assert [(t.seed, t.set_by) for t in targets] == [(0, "b"), (1, "b")]
    assert [t.target for t in targets] == pytest.approx([0.61, 0.666667], abs=1e-6)
    # a reaches 0.61 at round 4 (0.626667), b at round 6; seed 1: a at round 6 (0.67), b at round 4
    assert by(summary["runs"], "rounds_to_target") == {("a", 0): 5, ("b", 0): 7, ("a", 1): 7, ("b", 1): 5}
    assert by(summary["runs"], "sim_time_to_target_s") == {("a", 0): 50.0, ("b", 0): 84.0, ("a", 1): 70.0,
                                                           ("b", 1): 60.0}
    assert by(summary["runs"], "download_time_to_target_s") == {("a", 0): 10.0, ("b", 0): 14.0, ("a", 1): 14.0,
                                                                ("b", 1): 10.0}
    assert by(summary["runs"], "bytes_down_to_target") == {("a", 0): 5000, ("b", 0): 5600, ("a", 1): 7000,
                                                           ("b", 1): 4000}
    assert by(summary["runs"], "bytes_up_to_target") == {("a", 0): 2500, ("b", 0): 3500, ("a", 1): 3500,
                                                         ("b", 1): 2500}
    assert by(summary["runs"], "final_accuracy") == by(load_runs(folder)["runs"], "final_accuracy")  # untouched


def test_a_variant_that_misses_the_fixed_target_reaches_the_common_one(tmp_path):
    folder = glue_run(tmp_path / "S")
    fixed = {"S": load_runs(folder)}
    notes = Footnotes()
    table = metric_table(fixed, "rounds_to_target", notes=notes, targets={"S": load_targets(folder)})
    assert "(1/2)" in table and notes.reasons == ["b did not reach the target accuracy 0.7 with seed 0 in S"]
    common = {"S": retarget([folder], fixed["S"])[0]}
    notes = Footnotes()
    assert "| a | **6.000 ± 1.000** |" in metric_table(common, "rounds_to_target", notes=notes)
    assert "| b | **6.000 ± 1.000** |" in metric_table(common, "rounds_to_target", notes=notes) and not notes.reasons
    # paired per seed: b − a = 600 in seed 0, −3000 in seed 1 → mean −1200, s = 2545.6, half-width
    # t(0.975, 1) · s / √2 = 12.706 · 1800 = 22871.2
    paired = paired_table(common, "bytes_down_to_target", "a", notes)
    assert "| b | -1200 [-24071, +21671] (n=2) |" in paired and not notes.reasons


def test_a_diverged_run_sets_no_target_and_keeps_no_metric(tmp_path):
    junk = [{"variant": "c", "seed": 0, "round": r, "accuracy": 0.10, "sim_time_s": 1.0, "cum_download_s": 1.0,
             "cum_bytes_down": 1, "cum_bytes_up": 1} for r in range(8)]
    folder = glue_run(tmp_path / "S", extra_rows=junk, extra_runs=[
        {"variant": "c", "seed": 0, "diverged_at_round": 7, "final_accuracy": None, "rounds_to_target": None}])
    summary, targets = retarget([folder], load_runs(folder))
    assert targets[0] == SeedTarget(0, pytest.approx(0.61), "b")  # not c's 0.10
    assert math.isnan(by(summary["runs"], "rounds_to_target")[("c", 0)])
    assert by(summary["runs"], "rounds_to_target")[("a", 0)] == 5


def test_page_and_command_say_which_target_each_setting_and_seed_used(tmp_path, capsys):
    s = glue_run(tmp_path / "S")
    out = write_report([s], tmp_path / "p.md", ["rounds_to_target"], "T", curve=None, target="reached_by_all")
    text = out.read_text()
    assert "| seed | S |\n|---|---|\n| 0 | 0.6100 (b) |\n| 1 | 0.6667 (b) |" in text
    assert "own eval.target_accuracy (0.7," in text and "| b | **6.000 ± 1.000** |" in text
    assert "| b | +0.0 [-25.4, +25.4] (n=2) |" in text  # rounds b − a: +2, −2
    plain = write_report([s], tmp_path / "q.md", ["rounds_to_target"], "T", curve=None).read_text()
    assert "Target accuracy per setting" not in plain and "| b | **3.000 ± 0.000 (1/2)**¹ |" in plain
    assert main(["report", str(s), "--out", str(tmp_path / "r.md"), "--metric", "rounds_to_target",
                 "--curve", "", "--target", "reached_by_all"]) == 0
    assert "| 1 | 0.6667 (b) |" in (tmp_path / "r.md").read_text()
    capsys.readouterr()
    assert main(["report", str(s), "--out", str(tmp_path / "x.md"), "--target", "highest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["turnout: error: --target = 'highest': choose one of: config, reached_by_all"]
    assert not (tmp_path / "x.md").exists()


def test_recount_from_a_real_run_folder_matches_its_summary(two_variant_run):
    """The rounds table read back (CSV strings) and counted by to_target at the run's own target gives the
    summary.json numbers bit for bit: the report recounts the way the run counted."""
    run = two_variant_run([0, 1])
    summary = load_runs(run)
    rows = {}
    for row in round_rows(run):
        rows.setdefault((row["variant"], int(row["seed"])), []).append(row)
    keys = ("rounds_to_target", "sim_time_to_target_s", "download_time_to_target_s", "bytes_down_to_target",
            "bytes_up_to_target")
    reached = 0
    for r in summary["runs"]:
        unit = rows[(r["variant"], r["seed"])]
        got = to_target(unit, np.array([float(x["accuracy"]) for x in unit]), 0.15)
        assert got == {k: r[k] for k in keys if r[k] is not None}
        reached += bool(got)
    assert reached  # at least one unit reached 0.15, so the comparison compared numbers
    # window 1: the common target is the lowest of the units' best raw accuracies, per seed
    recounted, targets = retarget([run], summary, window=1)
    for t in targets:
        best = {r["variant"]: max(float(x["accuracy"]) for x in rows[(r["variant"], t.seed)])
                for r in summary["runs"] if r["seed"] == t.seed}
        assert (t.target, t.set_by) == (min(best.values()), min(best, key=best.get))
    for r in recounted["runs"]:
        acc = [float(x["accuracy"]) for x in rows[(r["variant"], r["seed"])]]
        target = next(t.target for t in targets if t.seed == r["seed"])
        assert r["rounds_to_target"] == next(i for i, a in enumerate(acc) if a >= target) + 1
