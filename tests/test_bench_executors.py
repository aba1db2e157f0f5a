"""The prepared GPU run: bench/executors.py's CPU reference is the documented table and its targets are judged from
the rows; bench/pfl_cifar.yaml is a valid experiment at the scale it says."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from turnout.sim.composition import load_experiment

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_executors", ROOT / "bench" / "executors.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # a dataclass looks its module up while the module is executed
spec.loader.exec_module(bench)


def row(model, workload, name, device, s_round):
    return {"model": model, "workload": workload, "name": name, "device": device, "s_round": s_round}


def test_cpu_reference_holds_the_documented_cpu_sequential_figures():
    ref = bench.cpu_reference()
    table = (ROOT / "docs" / "performance.md").read_text()
    documented = {(m, w): float(s) for m, w, s in
                  re.findall(r"^(logreg|mlp|cnn)\s+(W|W100)\s+sequential\s+([0-9.]+)", table, flags=re.M)[:6]}
    assert len(documented) == 6
    assert {(m, w): s for m, ws in ref["sequential_s_round"].items() for w, s in ws.items()} == documented
    assert ref["machine"] in table  # the machine line the table was measured on


def test_gpu_targets_are_judged_from_the_measured_figures():
    rows = [row("cnn_fedavg", "W100", "sequential", "cuda", 0.60),
            row("cnn_fedavg", "W100", "vectorized", "cuda", 0.12),
            row("resnet18_gn", "W100", "sequential", "cuda", 3.1),
            row("resnet18_gn", "W100", "vectorized", "cuda", 2.2),
            row("cnn_fedavg", "W1000", "vectorized", "cuda", 1.8)]
    lines = bench.gpu_targets(rows, "cuda")
    assert lines == [
        "target cnn_fedavg W100 vectorized (cuda) <= 0.15 s/round: 0.1200 s (met)",
        "target cnn_fedavg W100 vectorized >= 3x faster than sequential on the same device (cuda): 5.0x (met)",
        "target resnet18_gn W100 <= 2.5 s/round with the best executor (cuda): 2.2000 s (vectorized; met)",
        "target cnn_fedavg with 1,000 clients per round (W1000) <= 1.5 s/round (cuda): 1.8000 s (vectorized; NOT met)",
    ]
    rows[0]["s_round"] = 0.30  # sequential only 2.5x slower than vectorized
    assert "2.5x (NOT met)" in bench.gpu_targets(rows, "cuda")[1]


def test_a_cpu_smoke_run_gives_no_verdict():
    rows = [row("cnn_fedavg", "W100", "sequential", "cpu", 40.0), row("cnn_fedavg", "W100", "vectorized", "cpu", 0.1)]
    lines = bench.gpu_targets(rows, "cpu")
    assert len(lines) == 2 and all(line.endswith("(measured on the CPU: a smoke test, no verdict)") for line in lines)
    assert bench.gpu_targets(rows, "cuda") == []  # rows of another device are not judged


@pytest.mark.parametrize("argv,words", [
    (["--models", "cnn_fedavg"], ["cnn_fedavg is a GPU row", "--gpu-rows"]),
    (["--models", "nope"], ["unknown model 'nope'", "resnet18_gn"]),
    (["--workloads", "W7"], ["unknown workload 'W7'", "W1000"]),
])
def test_bad_arguments_stop_with_one_line(argv, words):
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)


def test_pfl_cifar_experiment_is_the_scale_it_mirrors():
    (v,) = load_experiment(ROOT / "bench" / "pfl_cifar.yaml")
    assert (v.config.rounds, v.config.seeds, v.config.eval.every, v.config.runtime.device) == (1500, [0], 10, "cuda")
    assert v.config.train["local_steps"] == 5 and v.config.train["batch_size"] == 10 and not v.config.output.plots
    data = v["data"]
    assert (data.name, data.cfg.num_clients, data.cfg.samples_per_client) == ("synthetic_images", 1000, 50)
    assert tuple(v["data"].cfg.input_shape) == (3, 32, 32) and v["model"].name == "cnn_fedavg"
    assert v["selector"].cfg.clients_per_round == 50 and v["algorithm"].name == "fedavg"
    assert v["executor"].name == "vectorized" and v["executor"].cfg.compile
