"""Short federated runs on the real datasets learn: above chance, through the real engine.

Each test builds an experiment dict, validates it with :func:`turnout.config.loader.expand`, builds
the dataset with :func:`turnout.runs.experiment.prepare` and runs :class:`turnout.sim.engine.Simulation`
— the same path ``turnout run`` takes — then checks the server test accuracy against the chance
level *of that test set* (the majority class share, never below 1/num_classes) and that the test
loss went down. Runs are deterministic for a seed, so the margins below are not flaky.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from turnout.sim.composition import expand
from turnout.sim.engine import RunResult

FIXTURE = Path(__file__).parent / "fixtures" / "leaf" / "synthetic_0.5_0.5_small.json"
FASHION_DIR = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread, as ``runtime.torch_threads`` defaults to: fast for tiny models, fair on a shared box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def train(simulate):
    def train(raw: dict, seed: int = 0):
        """(dataset, result) of one run of the single variant of ``raw``."""
        assert len(expand(raw)) == 1
        sim, res = simulate(raw, seed)
        assert len(res.rounds) == raw["rounds"]
        return sim.data, res

    return train


def evaluated(res: RunResult) -> tuple[np.ndarray, np.ndarray]:
    """Server test accuracy and loss of every evaluated round."""
    acc = np.array([r["accuracy"] for r in res.rounds], dtype=float)
    loss = np.array([r["loss"] for r in res.rounds], dtype=float)
    keep = ~np.isnan(acc)
    assert keep[-1], "the last round is always evaluated"
    assert np.isfinite(loss[keep]).all()
    return acc[keep], loss[keep]


def chance(data) -> float:
    """Accuracy of always predicting the most common server-test label (at least 1/num_classes)."""
    counts = np.bincount(data.y_server_test, minlength=data.num_classes)
    return max(counts.max() / counts.sum(), 1.0 / data.num_classes)


def assert_learned(data, res: RunResult, min_accuracy: float, min_margin: float) -> tuple[np.ndarray, np.ndarray]:
    acc, loss = evaluated(res)
    base = chance(data)
    assert acc[-1] > min_accuracy, f"final accuracy {acc[-1]:.3f} <= {min_accuracy} (per round: {np.round(acc, 3)})"
    assert acc[-1] > base + min_margin, f"final accuracy {acc[-1]:.3f} is not {min_margin} above chance {base:.3f}"
    assert loss[-1] < loss[0], f"test loss did not decrease: {np.round(loss, 3)}"
    # every aggregated round really trained: all selected clients reported a finite training loss
    for row in res.rounds:
        assert row["n_aggregated"] == row["n_selected"] > 0
        assert math.isfinite(row["train_loss"])
    return acc, loss


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model,lr", [({"name": "logreg"}, 0.5), ({"name": "mlp", "hidden": [64]}, 0.1)],
                         ids=["logreg", "mlp"])
def test_digits_dirichlet_20_clients(model, lr, train):
    raw = {
        "name": "digits", "seeds": [0], "rounds": 10,
        "data": {"name": "digits", "num_clients": 20, "partition": {"name": "dirichlet", "alpha": 0.5}},
        "model": model,
        "train": {"batch_size": 20, "local_steps": 10, "lr": lr},
        "selector": {"name": "uniform", "clients_per_round": 10},
        "eval": {"every": 1},
    }
    data, res = train(raw)
    assert data.num_clients == 20 and data.num_classes == 10
    # Dirichlet(0.5) really skews labels: some client lacks at least one class
    assert (data.label_histogram() == 0).any()
    acc, _ = assert_learned(data, res, min_accuracy=0.5, min_margin=0.3)
    assert acc[-1] > acc[0] + 0.1, f"accuracy barely moved: {np.round(acc, 3)}"


@pytest.mark.skipif(not os.path.isdir(FASHION_DIR),
                    reason=f"Fashion-MNIST not installed at {FASHION_DIR} (apt-get install dataset-fashion-mnist)")
def test_fashion_mnist_mlp_50_clients(train):
    raw = {
        "name": "fmnist", "seeds": [0], "rounds": 5,
        "data": {"name": "fashion_mnist", "num_clients": 50, "limit_train": 5000, "limit_test": 1000},
        "model": {"name": "mlp", "hidden": [100]},
        "train": {"batch_size": 20, "local_steps": 10, "lr": 0.1},
        "selector": {"name": "uniform", "clients_per_round": 10},
        "eval": {"every": 1},
    }
    data, res = train(raw)
    assert data.num_clients == 50 and tuple(data.input_shape) == (1, 28, 28)
    assert len(data.y_server_test) == 1000 and data.n_train.sum() + data.n_test.sum() == 5000
    assert_learned(data, res, min_accuracy=0.4, min_margin=0.3)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(FASHION_DIR),
                    reason=f"Fashion-MNIST not installed at {FASHION_DIR} (apt-get install dataset-fashion-mnist)")
def test_fashion_mnist_cnn_fedavg_50_clients(train):
    raw = {
        "name": "fmnist-cnn", "seeds": [0], "rounds": 10,
        "data": {"name": "fashion_mnist", "num_clients": 50, "limit_train": 5000, "limit_test": 1000},
        "model": {"name": "cnn_fedavg"},
        "train": {"batch_size": 20, "local_steps": 5, "lr": 0.1},
        "selector": {"name": "uniform", "clients_per_round": 10},
        "eval": {"every": 2},
    }
    data, res = train(raw)
    assert_learned(data, res, min_accuracy=0.5, min_margin=0.35)


def _need_plays():
    from turnout.data.shakespeare import play_files, plays_dir

    try:
        play_files(plays_dir(None))
    except ValueError as exc:
        pytest.skip(f"Shakespeare plays unavailable: {exc}")


def test_shakespeare_char_lstm_beats_majority_and_unigram(train):
    """A small char LSTM must learn more than the character frequencies within a few rounds.

    The first thing an LSTM learns is the unigram distribution (accuracy = share of the most common
    character, loss = its cross-entropy); passing both means it uses the context.
    """
    _need_plays()
    raw = {
        "name": "shakespeare", "seeds": [0], "rounds": 8,
        "data": {"name": "shakespeare", "seq_len": 20, "max_clients": 10, "max_samples_per_client": 600},
        "model": {"name": "char_lstm", "hidden": 64},
        "train": {"batch_size": 20, "local_steps": 40, "lr": 0.5, "momentum": 0.9},
        "selector": {"name": "uniform", "clients_per_round": 5},
        "eval": {"every": 1},
    }
    data, res = train(raw)
    assert data.num_clients == 10 and data.num_classes == 81 and tuple(data.input_shape) == (20,)
    p = np.bincount(data.y_train, minlength=data.num_classes) / len(data.y_train)
    unigram_loss = float(-np.log(np.maximum(p[data.y_server_test], 1e-12)).mean())
    acc, loss = assert_learned(data, res, min_accuracy=0.1, min_margin=0.05)
    assert acc[-1] > 3 / data.num_classes
    assert loss[-1] < unigram_loss - 0.2, (
        f"final loss {loss[-1]:.3f} not below unigram cross-entropy {unigram_loss:.3f}")


def test_leaf_json_fixture_logreg(train):
    raw = {
        "name": "leaf", "seeds": [0], "rounds": 10,
        "data": {"name": "leaf_json", "train_path": str(FIXTURE), "train_fraction": 0.7},
        "model": {"name": "logreg"},
        "train": {"batch_size": 10, "local_steps": 10, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": 5},
        "eval": {"every": 1},
    }
    data, res = train(raw)
    assert data.num_clients == 5 and list(data.client_names) == [f"f_0000{i}" for i in range(5)]
    assert data.n_train.sum() + data.n_test.sum() == 69
    assert_learned(data, res, min_accuracy=0.5, min_margin=0.15)
