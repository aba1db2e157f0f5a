"""runtime.device: where local training runs; an unavailable device is one line; CUDA agrees with CPU."""

import numpy as np
import pytest
import torch

from turnout.core.device import resolve_device
from turnout.core.errors import ConfigError

RAW = {"name": "dev", "rounds": 3, "data": {"name": "synthetic", "num_clients": 12}, "model": {"name": "mlp"},
       "train": {"batch_size": 10, "local_steps": 3, "lr": 0.05, "momentum": 0.5},
       "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 1}, "output": {"progress": False}}


def test_auto_is_the_best_available_and_cpu_is_cpu():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available() and getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        expected = "mps"
    assert resolve_device("auto").type == expected and resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_one_line_naming_the_fix():
    with pytest.raises(ConfigError) as e:
        resolve_device("cuda:0")
    assert e.value.key == "runtime.device" and "use cpu or auto" in str(e.value)


def test_the_config_refuses_an_unknown_device(simulate):
    with pytest.raises(ConfigError) as e:
        simulate({**RAW, "runtime": {"device": "tpu"}})
    assert e.value.key == "runtime.device"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_on_cuda_agrees_with_the_cpu(simulate):
    _, cpu = simulate(RAW)
    _, gpu = simulate({**RAW, "runtime": {"device": "cuda"}})
    # same minibatches (keyed streams), same model; float32 kernels reassociate sums on the GPU
    torch.testing.assert_close(gpu.final_params, cpu.final_params, rtol=1e-4, atol=1e-5)
    assert [r["n_selected"] for r in gpu.rounds] == [r["n_selected"] for r in cpu.rounds]
    np.testing.assert_allclose([r["loss"] for r in gpu.rounds], [r["loss"] for r in cpu.rounds], rtol=1e-4)
