"""Stacked (vmap) local SGD agrees with the per-client trainer, client by client.

Tolerance: float32 reassociation only. A batched matmul may add a client's products in another
order than the per-client kernel, so end points may differ by a few units in the last place per
step; after the handful of steps here the measured maximum is 6e-8 absolute (MLP and CNN, on
parameters of magnitude ~0.5), so ``rtol=1e-5, atol=1e-6`` leaves room for other kernels without
hiding a wrong gradient: dropping the proximal term moves parameters by 1e-3 here, counting
padding rows in the loss by 3e-2 to 3e-1.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from turnout.config.train import TrainConfig
from turnout.models.flat import FlatModel
from turnout.training.local_sgd import LocalObjective, LocalTrainer, batch_indices
from turnout.training.stacked_sgd import StackedObjective, StackedTrainer, padded_rows

RTOL, ATOL = 1e-5, 1e-6
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


def mlp(seed=0, d=6, c=4):
    torch.manual_seed(seed)
    return FlatModel(nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, c)))


def tiny_cnn(seed=0):
    torch.manual_seed(seed)
    return FlatModel(nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                   nn.Linear(3 * 4 * 4, 4)))


def population(sizes, shape=(6,), c=4, seed=0):
    """Clients' rows laid out one after another, as in a FederatedDataset."""
    g = np.random.default_rng(seed)
    n = int(sum(sizes))
    x = g.normal(size=(n, *shape)).astype(np.float32)
    y = g.integers(0, c, size=n).astype(np.int64)
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return x, y, first


def run_both(fm, cfg, sizes, steps, objectives, x, y, first, lr=0.1, device="cpu"):
    """(sequential results per client, stacked result) from the same start and batch streams."""
    start = fm.flat_params()
    seq = LocalTrainer(fm, cfg)
    ref = []
    for i, (n, k) in enumerate(zip(sizes, steps)):
        a = first[i]
        ref.append(seq.train(start, {}, x[a:a + n], y[a:a + n], k, lr, np.random.default_rng(100 + i),
                             objective=objectives[i]))
    batches = [batch_indices(n, cfg.batch_size, k, np.random.default_rng(100 + i))
               for i, (n, k) in enumerate(zip(sizes, steps))]
    rows, counts = padded_rows(batches, first, cfg.batch_size)
    k = len(sizes)
    obj = StackedObjective.stack(objectives, fm.dim, torch.float32, device)
    res = StackedTrainer(fm, cfg).train(start.expand(k, -1).clone().to(device), {},
                                        torch.from_numpy(x[rows]).to(device), torch.from_numpy(y[rows]).to(device),
                                        torch.from_numpy(counts).to(device), lr, obj)
    return ref, res


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("train", [
    {},
    {"momentum": 0.9},
    {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-2},
    {"grad_clip": 0.5},
    {"momentum": 0.5, "weight_decay": 1e-3, "grad_clip": 1.0},
])
def test_stacked_matches_per_client_training(train, device):
    # sizes: short last batches (13 = 5+5+3), fewer rows than a batch (3), no data (0); steps differ
    sizes, steps = [13, 3, 20, 0, 9], [7, 2, 4, 3, 5]
    x, y, first = population(sizes)
    fm = mlp()
    cfg = TrainConfig(batch_size=5, local_steps=4, lr=0.1, **train)
    offset = torch.linspace(-0.05, 0.05, fm.dim)
    objectives = [None, LocalObjective(prox_mu=0.3), LocalObjective(offset=offset, scale=0.7),
                  LocalObjective(offset=offset), LocalObjective(prox_mu=0.1, offset=-offset, scale=1.3)]
    ref, res = run_both(fm, cfg, sizes, steps, objectives, x, y, first, device=device)
    for i, r in enumerate(ref):
        torch.testing.assert_close(res.params[i].cpu(), r.params, rtol=RTOL, atol=ATOL)
        assert res.samples[i] == r.samples
        assert res.mean_loss[i] == pytest.approx(r.mean_loss, rel=1e-6, abs=1e-7)
    assert res.samples.tolist() == [5 + 5 + 3 + 5 + 5 + 3 + 5, 3 + 3, 20, 0, 5 + 4 + 5 + 4 + 5]
    torch.testing.assert_close(res.params[3].cpu(), fm.flat_params())  # no data: the client does not move


@pytest.mark.parametrize("device", DEVICES)
def test_frozen_clients_sum_gradients_and_others_train(device):
    sizes, steps = [11, 7, 16, 0], [3, 5, 4, 2]
    x, y, first = population(sizes, seed=3)
    fm = mlp(3)
    cfg = TrainConfig(batch_size=4, local_steps=4, lr=0.2)
    objectives = [LocalObjective(freeze=True), None, LocalObjective(freeze=True), LocalObjective(freeze=True)]
    ref, res = run_both(fm, cfg, sizes, steps, objectives, x, y, first, lr=0.2, device=device)
    assert float(ref[3].grad_sum.abs().sum()) == 0.0 == float(res.grad_sum[3].abs().sum())  # no data: nothing summed
    for i in (0, 2, 3):
        torch.testing.assert_close(res.params[i].cpu(), fm.flat_params())  # frozen: exactly the start
        torch.testing.assert_close(res.grad_sum[i].cpu(), ref[i].grad_sum, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(res.params[1].cpu(), ref[1].params, rtol=RTOL, atol=ATOL)
    assert float(res.grad_sum[1].abs().sum()) == 0.0
    assert float((res.params[1].cpu() - fm.flat_params()).abs().max()) > 1e-3  # it did train


def test_conv_model_matches():
    sizes, steps = [10, 6], [3, 4]
    x, y, first = population(sizes, shape=(1, 8, 8), seed=5)
    fm = tiny_cnn()
    cfg = TrainConfig(batch_size=4, local_steps=3, lr=0.1, momentum=0.9)
    ref, res = run_both(fm, cfg, sizes, steps, [None, LocalObjective(prox_mu=0.5)], x, y, first)
    for i, r in enumerate(ref):
        torch.testing.assert_close(res.params[i], r.params, rtol=RTOL, atol=ATOL)


def test_short_batch_loss_is_the_mean_over_real_rows_and_a_finished_client_stays_put():
    sizes = [3, 8]
    x, y, first = population(sizes, seed=7)
    fm = mlp(7)
    cfg = TrainConfig(batch_size=5, local_steps=1, lr=0.5, momentum=0.9)
    # client 0: one step on 3 real rows of a 5-row padded batch; client 1: four steps
    ref, res = run_both(fm, cfg, sizes, [1, 4], [None, None], x, y, first, lr=0.5)
    idx = next(batch_indices(3, 5, 1, np.random.default_rng(100)))
    with torch.no_grad():
        expected = F.cross_entropy(fm.module(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
    assert res.mean_loss[0] == pytest.approx(float(expected), rel=1e-6)
    torch.testing.assert_close(res.params[0], ref[0].params, rtol=RTOL, atol=ATOL)  # moved once, then stopped
    assert res.samples.tolist() == [3, 5 + 3 + 5 + 3]


def test_padded_rows_layout():
    rows, counts = padded_rows([[np.array([2, 0]), np.array([1])], [np.array([0])], []], np.array([10, 20, 30]), 2)
    assert rows.shape == (2, 3, 2) and counts.tolist() == [[2, 1, 0], [1, 0, 0]]
    assert rows[0, 0].tolist() == [12, 10] and rows[1, 0].tolist() == [11, 10]  # padding repeats the first row
    assert rows[0, 1].tolist() == [20, 20] and rows[0, 2].tolist() == [0, 0]  # no data: row 0, masked


def test_stack_objectives():
    offset = torch.ones(4)
    s = StackedObjective.stack([None, LocalObjective(offset=offset, scale=2.0), LocalObjective()], 4, torch.float32)
    assert s.offset.tolist() == [[0] * 4, [1] * 4, [0] * 4]
    assert s.scale.tolist() == [1.0, 2.0, 1.0]
    assert s.prox_mu is None and s.freeze is None
    assert StackedObjective.stack([None, None], 4, torch.float32) == StackedObjective()
