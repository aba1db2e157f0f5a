"""What each executor refuses at validation, how vectorized sizes its chunks, and what auto picks."""

import copy
import json

import pytest

from turnout.app.cli import main
from turnout.core.errors import ConfigError
from turnout.executors.auto import SMALL_DENSE_PARAMS, choose
from turnout.executors.vectorized import VectorizedConfig, VectorizedExecutor
from turnout.models.flat import FlatModel
from turnout.sim.catalogue import registries
from turnout.sim.composition import expand

TINY_IMAGES = {"name": "digits", "num_clients": 8}


def cfg(model, executor, data=None):
    return {"name": "x", "rounds": 1, "data": data or TINY_IMAGES, "model": model, "executor": executor,
            "selector": {"name": "uniform", "clients_per_round": 2}, "output": {"progress": False, "plots": False}}


@pytest.mark.parametrize("model", ["shufflenet_v2", "mobilenet_v2"])
def test_vectorized_refuses_batchnorm_models_naming_executor_and_model(model):
    with pytest.raises(ConfigError) as err:
        expand(cfg({"name": model}, {"name": "vectorized"}))
    assert err.value.key == "executor.name" and err.value.value == "vectorized"
    assert f"cannot keep {model}'s per-client BatchNorm running statistics exactly" in str(err.value)
    assert "use one of: auto, parallel, ray, sequential" in str(err.value)
    for ok in ("sequential", "parallel", "ray", "auto"):
        expand(cfg({"name": model}, {"name": ok}))


def test_vectorized_refuses_the_fused_lstm_and_accepts_the_unrolled_one():
    shakespeare = {"name": "shakespeare", "max_clients": 4}
    with pytest.raises(ConfigError) as err:
        expand(cfg({"name": "char_lstm"}, {"name": "vectorized"}, shakespeare))
    assert err.value.key == "model.impl" and "set model.impl: unrolled" in str(err.value)
    expand(cfg({"name": "char_lstm", "impl": "unrolled"}, {"name": "vectorized"}, shakespeare))
    expand(cfg({"name": "char_lstm"}, {"name": "parallel"}, shakespeare))


def test_refusal_is_one_cli_line(tmp_path, capsys):
    path = tmp_path / "bn.yaml"
    path.write_text(json.dumps(cfg({"name": "mobilenet_v2"}, {"name": "vectorized"})))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["turnout: error: executor.name = 'vectorized': cannot keep mobilenet_v2's per-client BatchNorm "
                   "running statistics exactly; use one of: auto, parallel, ray, sequential"]
    assert not (tmp_path / "out").exists()


def test_executors_have_no_device_option_of_their_own():
    """runtime.device is the one setting for where training runs, whichever executor runs it."""
    for executor in ("vectorized", "auto"):
        with pytest.raises(ConfigError) as err:
            expand(cfg({"name": "logreg"}, {"name": executor, "device": "cuda"}))
        assert err.value.key == "executor.device"


def test_every_executor_declares_its_capabilities():
    for name, cls in registries()["executor"]:
        assert isinstance(cls.trains_running_stats, bool) and isinstance(cls.needs_vmap, bool), name
    assert registries()["executor"].get("vectorized").needs_vmap


def test_chunk_size_follows_the_memory_budget(build_simulation):
    sim = build_simulation(cfg({"name": "cnn_fedsum_mnist"}, {"name": "vectorized"}))
    model, data = sim.model, sim.data
    small = VectorizedExecutor(VectorizedConfig(memory_mb=1e-3)).chunk_size(model, data, 10, 32)
    big = VectorizedExecutor(VectorizedConfig(memory_mb=1024)).chunk_size(model, data, 10, 32)
    half = VectorizedExecutor(VectorizedConfig(memory_mb=512)).chunk_size(model, data, 10, 32)
    assert small == 1 and big > 1 and abs(big - 2 * half) <= 1
    # activations per sample measured from the model: conv1 10x8x8 + relu + pool 10x4x4, conv2 20x4x4 + relu
    # + pool 20x2x2, fc 50 + relu, fc 10
    ex = VectorizedExecutor(VectorizedConfig())
    assert ex._activation_floats(model, data) == 640 * 2 + 160 + 320 * 2 + 80 + 50 * 2 + 10


def built(name, options=None, shape=(1, 28, 28), classes=10):
    comp = registries()["model"].get(name)
    return FlatModel(comp.build(comp.Config(**(options or {})), shape, classes))


def test_auto_rule():
    logreg = built("logreg", shape=(60,))
    mlp = built("mlp", {"hidden": [200]})
    small_mlp = built("mlp", {"hidden": [16]})
    cnn = built("cnn_fedsum_mnist")
    bn = built("shufflenet_v2", {"width": 0.5}, shape=(3, 8, 8))
    lstm = built("char_lstm", {"hidden": 8}, shape=(10,), classes=20)
    assert small_mlp.dim < SMALL_DENSE_PARAMS < mlp.dim
    assert choose(logreg, 100, 2, "cpu")[0] == "vectorized"
    assert choose(small_mlp, 10, 2, "cpu")[0] == "vectorized"
    assert choose(logreg, 1, 2, "cpu")[0] == "sequential"
    assert choose(mlp, 10, 2, "cpu")[0] == "parallel"
    assert choose(mlp, 10, 1, "cpu")[0] == "sequential"
    assert choose(cnn, 10, 16, "cpu")[0] == "parallel"
    assert choose(cnn, 10, 2, "cuda")[0] == "vectorized"
    assert choose(mlp, 10, 2, "cuda")[0] == "vectorized"
    assert choose(bn, 10, 2, "cuda")[0] == "sequential"  # BatchNorm: never batched; CPU workers not on a GPU
    assert choose(lstm, 10, 2, "cuda")[0] == "sequential"  # fused nn.LSTM: no vmap rule
    assert choose(lstm, 10, 2, "cpu")[0] == "parallel"
    assert "610 parameters" in choose(logreg, 100, 2, "cpu")[1]


def test_auto_choice_is_in_summary_json(tmp_path):
    path = tmp_path / "auto.yaml"
    raw = {"name": "auto", "rounds": 2, "data": {"name": "synthetic", "num_clients": 10}, "model": {"name": "logreg"},
           "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05}, "selector": {"name": "uniform",
                                                                                 "clients_per_round": 4},
           "executor": {"name": "auto"}, "output": {"progress": False, "plots": False}}
    path.write_text(json.dumps(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    run = json.loads((tmp_path / "out" / "summary.json").read_text())["runs"][0]
    assert run["auto_executor"] == "vectorized"
    assert run["auto_executor_rounds"] == {"vectorized": 2}
    assert "dense model with 610 parameters" in run["auto_executor_reason"]


def test_fixed_executors_add_nothing_to_the_summary(simulate):
    raw = {"name": "s", "rounds": 1, "data": {"name": "synthetic", "num_clients": 6}, "model": {"name": "logreg"},
           "selector": {"name": "uniform", "clients_per_round": 2}, "output": {"progress": False, "plots": False}}
    for name in ("sequential", "vectorized"):
        r = copy.deepcopy(raw)
        r["executor"] = {"name": name}
        assert not any(k.startswith("auto_") for k in simulate(r)[1].summary)
