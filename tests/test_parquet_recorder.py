"""The parquet recorder writes the CSV recorder's values as typed columns; without pyarrow it is a config error."""

import csv
import sys

import numpy as np
import pytest
import yaml

from turnout.app.cli import main

#: 2 variants × 1 seed × 3 rounds of 4-of-20 synthetic clients, evaluated at rounds 0 and 2
EXPERIMENT = {"name": "pq", "rounds": 3, "seeds": [0], "data": {"name": "synthetic", "num_clients": 20},
              "train": {"batch_size": 10, "local_steps": 4, "lr": 0.05},
              "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 2, "target_accuracy": 0.2},
              "output": {"progress": False, "plots": False},
              "variants": [{"name": "K4"}, {"name": "K6", "set": {"selector.clients_per_round": 6}}]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same experiment recorded as CSV and as Parquet: recorder → run folder."""
    pytest.importorskip("pyarrow.parquet")
    tmp = tmp_path_factory.mktemp("recorders")
    out = {}
    for recorder in ("csv", "parquet"):
        cfg = tmp / f"{recorder}.yaml"
        cfg.write_text(yaml.safe_dump({**EXPERIMENT, "recorder": {"name": recorder}}))
        assert main(["run", str(cfg), "--out", str(tmp / recorder), "--quiet"]) == 0
        out[recorder] = tmp / recorder
    return out


def test_parquet_tables_hold_the_csv_tables_values(runs):
    import pyarrow.parquet as pq

    csv_run, pq_run = runs["csv"], runs["parquet"]
    for name in ("rounds", "clients", "comparison"):
        table = pq.read_table(pq_run / f"{name}.parquet")
        with open(csv_run / f"{name}.csv", newline="") as fh:
            expected = list(csv.DictReader(fh))
        got = table.to_pylist()
        assert table.column_names == list(expected[0]) and len(got) == len(expected) > 0
        for want, have in zip(expected, got):
            for key, text in want.items():
                value = have[key]
                if key == "wall_s":
                    continue  # wall-clock seconds differ between the two runs
                if text == "":
                    assert value is None, (name, key)  # NaN (e.g. accuracy between evaluations) is null
                elif isinstance(value, str):
                    assert value == text, (name, key)
                else:
                    assert value == float(text), (name, key, text, value)  # CSV floats round-trip exactly
    rounds = pq.read_table(pq_run / "rounds.parquet")
    assert str(rounds.schema.field("round").type) == "int64" and str(rounds.schema.field("accuracy").type) == "double"
    assert rounds.column("accuracy").null_count == 2  # rounds 0 and 2 of 3 evaluated: one gap per run
    seeds = pq.read_table(pq_run / "comparison.parquet").column("seed").to_pylist()
    assert seeds == ["0", "mean", "std"] * 2  # a column mixing numbers and words is text


def test_report_reads_a_parquet_run_folder_like_a_csv_one(runs, tmp_path):
    from turnout.app.report.curves import curves, selection_counts

    csv_run, pq_run = runs["csv"], runs["parquet"]
    a, b = curves(csv_run, "accuracy"), curves(pq_run, "accuracy")
    assert a.keys() == b.keys() == {"K4", "K6"}
    for v in a:
        for x, y in zip(a[v], b[v]):
            np.testing.assert_array_equal(x, y)
    for v, counts in selection_counts(csv_run).items():
        np.testing.assert_array_equal(counts, selection_counts(pq_run)[v])
    assert main(["report", str(pq_run), "--out", str(tmp_path / "page.md"), "--curve", "accuracy"]) == 0


def test_missing_pyarrow_is_a_one_line_config_error_naming_the_extra(tmp_path, tiny, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    tiny["recorder"] = {"name": "parquet"}
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump(tiny))
    assert main(["run", str(cfg), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ("turnout: error: recorder.name = 'parquet': needs pyarrow, which "
                                                   "is not installed: pip install 'turnout[parquet]'\n")
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.partial").exists()
