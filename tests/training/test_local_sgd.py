"""Local SGD over parameter tensors agrees with torch.optim and across gradient backends."""

import numpy as np
import pytest
import torch
from torch import nn

from turnout.config.train import LRSchedule, TrainConfig
from turnout.models.flat import FlatModel
from turnout.training.local_sgd import LocalObjective, LocalTrainer, batch_indices, evaluate, evaluate_many


def make_problem(seed=0, n=64, d=5, c=3):
    g = np.random.default_rng(seed)
    x = g.normal(size=(n, d)).astype(np.float32)
    y = g.integers(0, c, size=n).astype(np.int64)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(d, 8), nn.Tanh(), nn.Linear(8, c))
    return FlatModel(model), x, y


def test_batch_indices_are_reshuffled_epochs():
    idx = list(batch_indices(10, 4, 6, np.random.default_rng(0)))
    assert [len(b) for b in idx] == [4, 4, 2, 4, 4, 2]
    assert sorted(np.concatenate(idx[:3]).tolist()) == list(range(10))
    assert sorted(np.concatenate(idx[3:]).tolist()) == list(range(10))
    assert list(batch_indices(0, 4, 3, np.random.default_rng(0))) == []


def test_batch_indices_are_the_epochs_of_successive_permutations():
    """Step k uses permutation ⌊k / batches_per_epoch⌋ of the stream, and no permutation is drawn past the last step."""
    n, bs, steps = 10, 4, 7  # 3 batches per epoch: permutations 0, 1, 2 (the third only for its first batch)
    rng = np.random.default_rng(3)
    got = list(batch_indices(n, bs, steps, rng))
    ref = np.random.default_rng(3)
    perms = [ref.permutation(n) for _ in range(3)]
    want = [p[i:i + bs] for p in perms for i in range(0, n, bs)][:steps]
    assert len(got) == steps and all(np.array_equal(a, b) for a, b in zip(got, want))
    assert rng.random() == ref.random()  # both streams drew exactly three permutations


def test_batch_indices_are_lazy_for_huge_step_counts():
    """A client asked for 10^12 steps gets its batches one at a time: taking three costs one permutation."""
    gen = batch_indices(50, 20, 10**12, np.random.default_rng(0))
    first = [next(gen) for _ in range(3)]
    assert [len(b) for b in first] == [20, 20, 10]
    assert sorted(np.concatenate(first).tolist()) == list(range(50))


@pytest.mark.parametrize("momentum,nesterov,wd", [(0.0, False, 0.0), (0.9, False, 1e-3), (0.9, True, 0.0)])
def test_matches_torch_optim_sgd(momentum, nesterov, wd):
    fm, x, y = make_problem()
    cfg = TrainConfig(batch_size=16, local_steps=7, lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=wd)
    start = fm.flat_params()
    res = LocalTrainer(fm, cfg).train(start, {}, x, y, 7, 0.1, np.random.default_rng(1))

    ref = fm.module
    torch.nn.utils.vector_to_parameters(start.clone(), ref.parameters())
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=wd)
    for idx in batch_indices(len(y), 16, 7, np.random.default_rng(1)):
        opt.zero_grad()
        nn.functional.cross_entropy(ref(torch.from_numpy(x[idx])), torch.from_numpy(y[idx])).backward()
        opt.step()
    torch.testing.assert_close(res.params, torch.nn.utils.parameters_to_vector(ref.parameters()).detach(),
                               rtol=1e-5, atol=1e-6)
    assert res.steps == 7 and res.samples == 7 * 16  # 64 rows = 4 full batches per epoch


def test_autograd_and_functional_backends_agree():
    fm, x, y = make_problem(2)
    cfg = TrainConfig(batch_size=8, local_steps=12, lr=0.05, momentum=0.5)
    start = fm.flat_params()
    a = LocalTrainer(fm, cfg, "autograd").train(start, {}, x, y, 12, 0.05, np.random.default_rng(5))
    b = LocalTrainer(fm, cfg, "functional").train(start, {}, x, y, 12, 0.05, np.random.default_rng(5))
    torch.testing.assert_close(a.params, b.params, rtol=1e-6, atol=1e-7)
    assert a.mean_loss == pytest.approx(b.mean_loss, rel=1e-6)


def test_a_reused_trainer_gives_each_client_what_a_fresh_one_gives_and_never_moves_the_model():
    """The autograd backend trains a module copy it keeps across clients: nothing may carry over."""
    g = np.random.default_rng(7)
    x = g.normal(size=(48, 5)).astype(np.float32)
    y = g.integers(0, 3, size=48).astype(np.int64)
    torch.manual_seed(7)
    fm = FlatModel(nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3)))
    model_before = fm.flat_params()
    cfg = TrainConfig(batch_size=8, local_steps=5, lr=0.1, momentum=0.9)
    start, buffers = fm.flat_params(), fm.buffers()

    reused = LocalTrainer(fm, cfg)
    a = reused.train(start, buffers, x[:24], y[:24], 5, 0.1, np.random.default_rng(1))
    a_params, a_buffers = a.params.clone(), {k: v.clone() for k, v in a.buffers.items()}
    b = reused.train(start + 0.01, buffers, x[24:], y[24:], 5, 0.1, np.random.default_rng(2))
    fresh = LocalTrainer(fm, cfg).train(start + 0.01, buffers, x[24:], y[24:], 5, 0.1, np.random.default_rng(2))

    assert torch.equal(b.params, fresh.params) and b.mean_loss == fresh.mean_loss
    assert all(torch.equal(b.buffers[k], fresh.buffers[k]) for k in fresh.buffers)
    assert torch.equal(a.params, a_params)  # the first client's results do not alias the reused module
    assert all(torch.equal(a.buffers[k], a_buffers[k]) for k in a_buffers)
    assert not torch.equal(a.buffers["1.running_mean"], b.buffers["1.running_mean"])  # per-client statistics
    assert torch.equal(fm.flat_params(), model_before)  # the model the trainer was given never moves
    assert all(torch.equal(v, buffers[k]) for k, v in fm.buffers().items())


def test_training_lowers_loss():
    fm, x, y = make_problem(4)
    cfg = TrainConfig(batch_size=64, local_steps=50, lr=0.5)
    start = fm.flat_params()
    tr = LocalTrainer(fm, cfg)
    before = evaluate(fm, start, {}, x, y)[1]
    res = tr.train(start, {}, x, y, 50, 0.5, np.random.default_rng(0))
    assert evaluate(fm, res.params, {}, x, y)[1] < before - 0.05
    assert res.grad_sum is None


def test_frozen_objective_sums_the_gradients_at_the_start_point():
    fm, x, y = make_problem(4)
    tr = LocalTrainer(fm, TrainConfig(batch_size=16, local_steps=5, lr=0.5))
    start = fm.flat_params()
    frozen = tr.train(start, {}, x, y, 5, 0.5, np.random.default_rng(0), objective=LocalObjective(freeze=True))
    torch.testing.assert_close(frozen.params, start)  # the model did not move
    expected = torch.zeros_like(start)
    for idx in batch_indices(len(y), 16, 5, np.random.default_rng(0)):
        g, _ = tr.grad_and_loss(fm.unflatten(start.clone()), {}, torch.from_numpy(x[idx]), torch.from_numpy(y[idx]))
        expected += fm.flatten(g)
    torch.testing.assert_close(frozen.grad_sum, expected, rtol=1e-5, atol=1e-6)


def test_offset_and_proximal_objectives_change_the_step_as_stated():
    fm, x, y = make_problem(4)
    tr = LocalTrainer(fm, TrainConfig(batch_size=16, local_steps=1, lr=0.1))
    start = fm.flat_params()
    idx = next(batch_indices(len(y), 16, 1, np.random.default_rng(0)))
    g, _ = tr.grad_and_loss(fm.unflatten(start.clone()), {}, torch.from_numpy(x[idx]), torch.from_numpy(y[idx]))
    g = fm.flatten(g)
    offset = torch.linspace(-1, 1, fm.dim)
    one = tr.train(start, {}, x, y, 1, 0.1, np.random.default_rng(0),
                   objective=LocalObjective(offset=offset, scale=0.5))
    torch.testing.assert_close(one.params, start - 0.1 * (0.5 * g + offset), rtol=1e-5, atol=1e-6)
    # at the start point the proximal term μ(w − w_start) is zero: one step equals plain SGD's
    prox = tr.train(start, {}, x, y, 1, 0.1, np.random.default_rng(0), objective=LocalObjective(prox_mu=3.0))
    torch.testing.assert_close(prox.params, start - 0.1 * g, rtol=1e-5, atol=1e-6)


def test_evaluate_many_matches_per_segment_evaluate():
    fm, x, y = make_problem(6, n=30)
    flat = fm.flat_params()
    offsets = np.array([0, 10, 10, 25, 30])
    acc, loss = evaluate_many(fm, flat, {}, x, y, offsets, batch_size=7)
    for i in (0, 2, 3):
        a, lo = evaluate(fm, flat, {}, x[offsets[i]:offsets[i + 1]], y[offsets[i]:offsets[i + 1]])
        assert acc[i] == pytest.approx(a) and loss[i] == pytest.approx(lo, rel=1e-5)
    assert np.isnan(acc[1])


def test_lr_schedules():
    assert LRSchedule(name="step", gamma=0.5, step_size=10).lr(1.0, 25, 100) == 0.25
    assert LRSchedule(name="exponential", gamma=0.9).lr(2.0, 2, 100) == pytest.approx(2.0 * 0.81)
    cos = LRSchedule(name="cosine", min_lr=0.1)
    assert cos.lr(1.0, 0, 11) == pytest.approx(1.0) and cos.lr(1.0, 10, 11) == pytest.approx(0.1)
    assert TrainConfig(local_epochs=2, batch_size=10).steps_for(np.array([5, 25])).tolist() == [1, 5]
    assert TrainConfig().steps_for(np.array([5, 25])).tolist() == [10, 10]
