"""`turnout report`: settings side by side, mean ± std over seeds, best entry in bold, one-line errors."""

import json

import pytest

from turnout.cli import main
from turnout.report import metric_table, write_report


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
    out = write_report([a], tmp_path / "docs" / "fedgs.md", ["best_loss"], "FedGS", "bash scripts/reproduce.sh fedgs",
                       elapsed_s=120)
    text = out.read_text()
    assert "bash scripts/reproduce.sh fedgs" in text and "turnout 9.9" in text and "seeds 0, 1, 2" in text
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
    from turnout.report import _selection_counts
    counts = _selection_counts(a)
    assert counts["uniform"].tolist() == [0.5, 1.5, 2.5, 3.5] and counts["fedgs"].tolist() == [5.0] * 4
    out = write_report([a], tmp_path / "docs" / "fedgs.md", ["best_loss"], "FedGS", curve=None, counts=["YMF"])
    assert "![](fedgs/counts_YMF.png)" in out.read_text()
    assert (tmp_path / "docs" / "fedgs" / "counts_YMF.png").stat().st_size > 1000
    assert main(["report", str(a), "--out", str(tmp_path / "y.md"), "--counts", "IDL"]) == 2
    assert not (tmp_path / "y.md").exists()
