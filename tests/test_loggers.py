"""Live loggers, each written offline and read back: per-round metrics as they happen, config as parameters.

One tracker run per unit named ``variant/seed``, step = round; the values are the run's own
``rounds.csv`` rows. TensorBoard event files are read with TensorBoard's reader, MLflow runs from a
``file:`` store with ``MlflowClient``, W&B offline runs from their ``.wandb`` record files.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import turnout
from turnout.core.errors import ConfigError
from turnout.sim.composition import expand

ROOT = Path(__file__).resolve().parents[1]
EXP = {"name": "logged", "seeds": [0, 1], "rounds": 4, "data": {"name": "synthetic", "num_clients": 20},
       "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
       "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 2},
       "output": {"progress": False, "plots": False}}


def run_with(tmp_path, loggers, **extra):
    return turnout.run({**copy.deepcopy(EXP), "loggers": loggers, **extra}, out=tmp_path / "run", quiet=True)


def unit_rows(results, seed):
    return results.rounds[results.rounds["seed"] == seed].set_index("round")


def test_tensorboard_event_files_hold_every_round_and_the_config(tmp_path):
    pytest.importorskip("tensorboardX")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    results = run_with(tmp_path, ["tensorboard"])
    for seed in (0, 1):
        events = EventAccumulator(str(results.folder / "tensorboard" / "base" / str(seed)))
        events.Reload()
        rows = unit_rows(results, seed)
        for key in ("bytes_down", "sim_time_s", "n_aggregated", "cum_bytes_down", "tau"):
            logged = events.Scalars(key)
            assert [e.step for e in logged] == [0, 1, 2, 3]
            assert [e.value for e in logged] == pytest.approx(list(rows[key].astype(float)), rel=1e-6)
        assert [e.step for e in events.Scalars("accuracy")] == [1, 3]  # evaluated every 2 rounds
        assert [e.value for e in events.Scalars("accuracy")] == pytest.approx(list(rows["accuracy"].dropna()))
        start = plugin_data_pb2.HParamsPluginData.FromString(
            events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info.hparams
        assert start["selector.clients_per_round"].number_value == 4
        assert start["data.name"].string_value == "synthetic" and start["seed"].number_value == seed


def test_mlflow_file_store_has_one_finished_run_per_unit_with_params_and_metrics(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    results = run_with(tmp_path, [{"name": "mlflow", "tracking_uri": uri, "experiment": "what-if"}],
                       variants=[{"name": "K=4"}, {"name": "K=8", "set": {"selector.clients_per_round": 8}}])
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("what-if").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["K=4/0", "K=4/1", "K=8/0", "K=8/1"]
    for run in runs:
        variant, seed = run.info.run_name.split("/")
        assert run.info.status == "FINISHED"
        assert run.data.params["selector.clients_per_round"] == variant[2:]
        assert run.data.params["variant"] == variant and run.data.params["seed"] == seed
        rows = results.rounds[(results.rounds["variant"] == variant) & (results.rounds["seed"] == int(seed))]
        history = client.get_metric_history(run.info.run_id, "bytes_up")
        assert [(m.step, m.value) for m in history] == list(zip(range(4), rows["bytes_up"].astype(float)))
        final = client.get_metric_history(run.info.run_id, "summary/final_accuracy")[0].value
        assert final == pytest.approx(rows["accuracy"].dropna().iloc[-1])


def wandb_records(path: Path):
    """The protobuf records of a W&B ``.wandb`` file (a LevelDB-style log: 32 KiB blocks of framed chunks)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            yield record


def test_wandb_offline_runs_hold_every_round_and_the_config(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    results = run_with(tmp_path, [{"name": "wandb", "dir": str(tmp_path / "wb")}])
    files = sorted(glob.glob(str(tmp_path / "wb" / "wandb" / "offline-run-*" / "run-*.wandb")))
    assert len(files) == 2
    seen = set()
    for f in files:
        records = list(wandb_records(Path(f)))
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        config = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in run.config.update}
        variant, seed = run.display_name.split("/")
        assert run.project == "logged" and config["seed"] == int(seed) and variant == "base"
        assert config["selector"]["clients_per_round"] == 4 and config["data"]["name"] == "synthetic"
        history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
                   for r in records if r.WhichOneof("record_type") == "history"]
        rows = unit_rows(results, int(seed))
        assert [h["_step"] for h in history] == [0, 1, 2, 3]
        assert [h["bytes_down"] for h in history] == list(rows["bytes_down"].astype(float))
        assert [h.get("accuracy") for h in history][1::2] == pytest.approx(list(rows["accuracy"].dropna()))
        seen.add(int(seed))
    assert seen == {0, 1}


#: a logger registered by a plugin: one JSON line per round into a file of the run folder, with its process id
ROWS_LOGGER = '''
import json, os
from typing import Optional
from turnout.config.base import StrictModel
from turnout.loggers.base import LOGGERS, Logger

@LOGGERS.register("rows_file")
class RowsFile(Logger):
    """Every round's metrics as JSON lines in the run folder (a plugin logger)."""

    class Config(StrictModel):
        folder: Optional[str] = None

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        where = run.path(cfg.folder, "rows")
        where.mkdir(parents=True, exist_ok=True)
        self.f = open(where / f"{run.variant}-{run.seed}.jsonl", "a")

    def log(self, step, metrics):
        self.f.write(json.dumps({"step": step, "pid": os.getpid(), **metrics}) + "\\n")

    def close(self, summary):
        self.f.write(json.dumps({"closed": summary is not None}) + "\\n")
        self.f.close()
'''


def test_a_plugin_logger_runs_in_each_worker_that_runs_a_unit(tmp_path):
    (tmp_path / "rows_logger.py").write_text(ROWS_LOGGER)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "plugins": ["rows_logger.py"], "loggers": ["rows_file"]}))
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "turnout", "run", str(path), "--out", str(out), "--jobs", "2", "--quiet"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    rounds = pd.read_csv(out / "rounds.csv")
    pids = set()
    for seed in (0, 1):
        lines = [json.loads(line) for line in (out / "rows" / f"base-{seed}.jsonl").read_text().splitlines()]
        assert lines[-1] == {"closed": True}
        rows = rounds[rounds["seed"] == seed]
        assert [x["step"] for x in lines[:-1]] == [0, 1, 2, 3]
        assert [x["wasted_s"] for x in lines[:-1]] == list(rows["wasted_s"])
        pids |= {x["pid"] for x in lines[:-1]}
    assert len(pids) == 2 and os.getpid() not in pids  # two worker processes, one unit each


def test_a_missing_logger_package_or_bad_option_is_one_line_before_any_work(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "loggers": ["tensorboard", {"name": "mlflow"}]}))
    code = ("import sys; sys.modules['mlflow'] = None\nfrom turnout.app.cli import main\n"
            f"sys.exit(main(['run', {str(path)!r}, '--out', {str(tmp_path / 'x')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip() == ("turnout: error: loggers[1].name = 'mlflow': needs mlflow, which is not installed: "
                                "pip install 'turnout[mlflow]'")
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match=r"^loggers\[0\].flush_secs = -1: must be > 0.0$"):
        expand({**EXP, "loggers": [{"name": "tensorboard", "flush_secs": -1}]})
    with pytest.raises(ConfigError, match=r"^loggers\[0\].name = 'neptune': unknown logger; choose one of: mlflow, "
                                          r"tensorboard, wandb"):
        expand({**EXP, "loggers": ["neptune"]})


def test_a_resumed_unit_continues_its_mlflow_run(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for this process's reader; the runs opt in themselves
    uri = (tmp_path / "mlruns").as_uri()
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "seeds": [0], "rounds": 6, "runtime": {"checkpoint_every_rounds": 2},
                                    "loggers": [{"name": "mlflow", "tracking_uri": uri}]}))
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"}
    cmd = [sys.executable, "-m", "turnout"]
    crashed = subprocess.run([*cmd, "run", str(path), "--out", str(out), "--quiet"], capture_output=True, text=True,
                             cwd=ROOT, env={**env, "TURNOUT_CRASH_AT": "round@6"})
    assert crashed.returncode != 0
    assert subprocess.run([*cmd, "resume", str(out), "--quiet"], cwd=ROOT, env=env,
                          capture_output=True).returncode == 0
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("logged").experiment_id])
    assert [r.info.run_name for r in runs] == ["base/0"] and runs[0].info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "bytes_down")]
    assert sorted(set(steps)) == [0, 1, 2, 3, 4, 5]  # round 4 (after the checkpoint, before the crash) twice
    assert steps.count(4) == 2 and steps.count(3) == 1


def test_check_shows_each_variants_loggers_and_list_their_options(tmp_path, capsys):
    from turnout.app.cli import main

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**EXP, "loggers": [{"name": "tensorboard", "log_dir": "tb"}]}))
    assert main(["check", str(path)]) == 0
    assert "  logger        tensorboard          log_dir=tb" in capsys.readouterr().out
    assert main(["list", "loggers.mlflow"]) == 0
    text = capsys.readouterr().out
    assert "  mlflow                 MLflow tracking: every round's metrics" in text
    assert "      tracking_uri = None: MLflow tracking URI" in text and "wandb" not in text
