"""The memory pre-flight: estimates from configs alone, refusal naming the key that drives the size."""

from __future__ import annotations

import copy

import pytest

from turnout.core.errors import ConfigError
from turnout.runs import preflight
from turnout.runs.experiment import prepare
from turnout.sim.composition import expand
from turnout.sim.engine import build_model

GiB = 1 << 30
BASE = {"name": "pre", "rounds": 2, "seeds": [0], "data": {"name": "synthetic", "num_clients": 30},
        "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": 5}}


def variants(**changes) -> list:
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return expand(raw)


def total(vs) -> int:
    return sum(t.bytes for t in preflight.estimate(vs))


def test_small_experiment_fits_and_is_estimated_in_megabytes():
    vs = variants()
    preflight.check_resources(vs, available=1 * GiB)
    assert 1 << 20 < total(vs) < 1 << 30  # 30 synthetic clients with defaults: ~20 MB of data and buffers


def test_model_parameters_from_the_meta_device_match_the_built_model():
    vs = variants(model={"name": "mlp", "hidden": [32, 16]})
    data = prepare(vs).dataset_for(vs[0], 0)
    built = build_model(vs[0], data, 0).dim
    assert preflight.model_parameters(vs[0], data.input_shape, data.num_classes) == built == 61 * 32 + 33 * 16 + 17 * 10


def test_the_data_estimate_grows_with_clients_and_seeds():
    one = preflight.estimate(variants())[0]
    more = preflight.estimate(variants(data={"name": "synthetic", "num_clients": 300}, seeds=[0, 1]))[0]
    assert one.label == "the data" and one.key == "data.num_clients"
    assert more.bytes == pytest.approx(20 * one.bytes, rel=0.01)  # 10× the clients, 2 seeds held at once


def test_refusal_names_the_dominating_key_and_both_sizes():
    vs = variants(data={"name": "synthetic", "num_clients": 30, "dim": 200_000})  # a 200,000² covariance
    with pytest.raises(ConfigError) as exc:
        preflight.check_resources(vs, available=64 * GiB)
    message = str(exc.value)
    assert message.startswith("data.dim = 200000: the run needs about 1.2 TiB of memory (the data 1.2 TiB")
    assert "more than the 64.0 GiB available" in message


def test_refusal_in_a_variant_names_the_variant():
    vs = variants(variants=[{"name": "small", "set": {}},
                            {"name": "huge", "set": {"model": {"name": "mlp", "hidden": [1_000_000, 1_000_000]}}}])
    with pytest.raises(ConfigError) as exc:
        preflight.check_resources(vs, available=64 * GiB)
    assert str(exc.value).startswith("variants[huge].model.name = 'mlp': the run needs about")


def test_client_state_counts_up_to_its_budget():
    vs = variants(data={"name": "synthetic", "num_clients": 100_000, "dim": 10}, runtime={"state_budget_mb": 1.0})
    state = next(t for t in preflight.estimate(vs) if t.key == "runtime.state_budget_mb")
    assert state.bytes == 1 << 20  # 100,000 clients × 110 floats would be 44 MB; the budget caps RAM at 1 MiB


def test_components_declare_their_own_memory():
    fedgs = variants(selector={"name": "fedgs", "clients_per_round": 5})
    term = next(t for t in preflight.estimate(fedgs) if t.label == "the selector")
    assert term.bytes == 4 * 8 * 30 * 30  # the oracle 3DG: N × N distances and temporaries, no warm-up round
    trace = variants(availability={"name": "trace", "num_traces": 1000})
    term = next(t for t in preflight.estimate(trace) if t.label == "the availability")
    assert term.bytes == 1000 * 6 * 100 + 16 * 30
    asynchronous = variants(round_mode={"name": "async", "buffer": 2}, algorithm={"name": "fedasync"})
    term = next(t for t in preflight.estimate(asynchronous) if t.label == "the round_mode")
    dim = 60 * 10 + 10  # logreg on the synthetic task's 60 features and 10 classes
    assert term.bytes == 2 * 4 * dim * 5  # C = 5 reports in flight and at most as many model versions held


def test_prepare_refuses_before_building_any_dataset():
    vs = variants(data={"name": "synthetic", "num_clients": 30, "dim": 1_000_000})  # 32 TB of covariance factors
    with pytest.raises(ConfigError, match="data.dim = 1000000: the run needs about"):
        prepare(vs)


def test_available_bytes_reads_this_machine():
    avail = preflight.available_bytes()
    total_ram = preflight._proc_value("/proc/meminfo", "MemTotal")
    if total_ram is None:
        pytest.skip("no /proc/meminfo")
    assert avail is not None and 0 < avail <= total_ram


def test_proc_values_are_parsed_in_kilobytes(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       32768 kB\nMemAvailable:    2048 kB\n")
    assert preflight._proc_value(str(f), "MemAvailable") == 2048 * 1024
    assert preflight._proc_value(str(f), "Missing") is None
    assert preflight._proc_value(str(tmp_path / "absent"), "MemTotal") is None


@pytest.mark.parametrize("n,text", [(512, "512 B"), (1536, "1.5 KiB"), (3 * GiB, "3.0 GiB"),
                                    (1.3 * (1 << 50), "1.3 PiB")])
def test_format_bytes(n, text):
    assert preflight.format_bytes(n) == text
