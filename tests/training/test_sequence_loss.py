"""char_lstm's per-position (sequence) loss: hand-checked scores, the model's output, training and evaluation.

``predict: every`` scores a window ``x`` whose next character is ``y`` at every position against ``x`` shifted
by one with ``y`` last (turnout.models.scoring); ``predict: last`` (the default) is LEAF's model, scored by the
same ``F.cross_entropy`` call as before.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import turnout.models.lstm  # noqa: F401  (registers)
from turnout.config.components import validate_component
from turnout.config.train import TrainConfig
from turnout.core.errors import ConfigError
from turnout.models.flat import FlatModel
from turnout.models.registry import MODELS
from turnout.models.scoring import cross_entropy, hits, sequence_targets
from turnout.training.local_sgd import LocalTrainer, batch_indices, evaluate, evaluate_many
from turnout.training.stacked_sgd import StackedTrainer, padded_rows

V = 7  # a tiny alphabet
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


def lstm(seed=0, **opts) -> FlatModel:
    cls, cfg = validate_component(MODELS, {"name": "char_lstm", "embed_dim": 3, "hidden": 5, **opts}, "model")
    torch.manual_seed(seed)
    return FlatModel(cls.build(cfg, (4,), V))


def windows(n=12, seed=0) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    return g.integers(0, V, size=(n, 4)).astype(np.int64), g.integers(0, V, size=n).astype(np.int64)


def test_targets_are_the_window_shifted_by_one_then_the_label():
    x = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert sequence_targets(x, torch.tensor([9, 8])).tolist() == [[2, 3, 9], [5, 6, 8]]


def test_per_position_loss_by_hand():
    # One sample, T = 2, three classes. Position 0 predicts x[1] = 0, position 1 predicts y = 2.
    x, y = torch.tensor([[1, 0]]), torch.tensor([2])
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    # By hand: -log(e^2 / (e^2 + 2)) = log(1 + 2 e^-2) at position 0, log 3 at position 1 (uniform).
    want = (math.log(1 + 2 * math.exp(-2)) + math.log(3)) / 2
    assert cross_entropy(logits, x, y).item() == pytest.approx(want, rel=1e-6)
    assert cross_entropy(logits, x, y, reduction="none").tolist() == pytest.approx([want], rel=1e-6)
    # Per position, as F.cross_entropy computes each on its own.
    each = [F.cross_entropy(logits[:, 0], torch.tensor([0])), F.cross_entropy(logits[:, 1], torch.tensor([2]))]
    assert cross_entropy(logits, x, y).item() == pytest.approx(float(sum(each)) / 2, rel=1e-6)
    # Position 0 is right (argmax 0 = target 0); position 1's argmax is class 0, not 2: half the positions.
    assert hits(logits, x, y).tolist() == [0.5]


def test_batch_loss_is_the_mean_over_every_position_of_every_sample():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 4, V, generator=g)
    x, y = torch.randint(0, V, (5, 4), generator=g), torch.randint(0, V, (5,), generator=g)
    t = sequence_targets(x, y)
    per_position = [[F.cross_entropy(logits[b, p:p + 1], t[b, p:p + 1]).item() for p in range(4)] for b in range(5)]
    assert cross_entropy(logits, x, y).item() == pytest.approx(np.mean(per_position), rel=1e-6)
    assert cross_entropy(logits, x, y, reduction="sum").item() == pytest.approx(np.mean(per_position, 1).sum(),
                                                                               rel=1e-6)
    right = (logits.argmax(2) == t).sum().item()
    assert hits(logits, x, y).sum().item() == pytest.approx(right / 4)


def test_last_character_scores_are_plain_cross_entropy():
    logits, y = torch.randn(6, V), torch.randint(0, V, (6,))
    assert torch.equal(cross_entropy(logits, torch.zeros(6, 4), y), F.cross_entropy(logits, y))
    assert torch.equal(hits(logits, torch.zeros(6, 4), y), logits.argmax(1) == y)


def test_model_predicts_at_every_position_and_its_last_is_the_last_character_model():
    last, every = lstm(), lstm(predict="every")
    assert torch.equal(last.flat_params(), every.flat_params())  # the same parameters, the same init
    x = torch.from_numpy(windows(3)[0])
    out_last, out_every = last.module(x), every.module(x)
    assert out_last.shape == (3, V) and out_every.shape == (3, 4, V)
    torch.testing.assert_close(out_every[:, -1], out_last, rtol=1e-6, atol=1e-7)
    with pytest.raises(ConfigError, match="model.predict"):
        validate_component(MODELS, {"name": "char_lstm", "predict": "all"}, "model")


@pytest.mark.parametrize("backend", ["autograd", "functional"])
def test_one_sgd_step_follows_the_per_position_gradient(backend):
    fm = lstm(predict="every")
    x, y = windows(5)
    start = fm.flat_params()
    cfg = TrainConfig(batch_size=5, local_steps=1, lr=0.5)
    res = LocalTrainer(fm, cfg, grad_backend=backend).train(start, {}, x, y, 1, 0.5, np.random.default_rng(0))
    # By hand: the mean over the 5 × 4 positions of F.cross_entropy, differentiated with autograd.
    params = {k: v.clone().requires_grad_(True) for k, v in fm.unflatten(start).items()}
    logits = torch.func.functional_call(fm.module, params, (torch.from_numpy(x),))
    targets = torch.from_numpy(np.concatenate([x[:, 1:], y[:, None]], axis=1))
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    grads = torch.autograd.grad(loss, list(params.values()))
    want = start - 0.5 * torch.cat([g.reshape(-1) for g in grads])
    torch.testing.assert_close(res.params, want, rtol=1e-5, atol=1e-6)
    assert res.mean_loss == pytest.approx(loss.item(), rel=1e-6)
    # The last-character model's step is another one: the option reaches the loss.
    other = LocalTrainer(lstm(), cfg, grad_backend=backend).train(start, {}, x, y, 1, 0.5, np.random.default_rng(0))
    assert (other.params - res.params).abs().max() > 1e-4


def test_vmapped_training_matches_per_client_training():
    # The vectorized executor's path: char_lstm unrolled under torch.func.vmap, 3 clients of unequal sizes.
    fm = lstm(predict="every", impl="unrolled")
    sizes, steps = [7, 3, 10], [3, 2, 4]
    x, y = windows(sum(sizes), seed=1)
    first = np.array([0, 7, 10])
    cfg = TrainConfig(batch_size=4, local_steps=3, lr=0.3, momentum=0.5)
    start = fm.flat_params()
    seq = LocalTrainer(fm, cfg)
    ref = [seq.train(start, {}, x[a:a + n], y[a:a + n], k, 0.3, np.random.default_rng(10 + i))
           for i, (a, n, k) in enumerate(zip(first, sizes, steps))]
    batches = [batch_indices(n, 4, k, np.random.default_rng(10 + i)) for i, (n, k) in enumerate(zip(sizes, steps))]
    rows, counts = padded_rows(batches, first, 4)
    res = StackedTrainer(fm, cfg).train(start.expand(3, -1).clone(), {}, torch.from_numpy(x[rows]),
                                        torch.from_numpy(y[rows]), torch.from_numpy(counts), 0.3)
    for i in range(3):
        torch.testing.assert_close(res.params[i], ref[i].params, rtol=1e-5, atol=1e-6)
        assert res.mean_loss[i] == pytest.approx(ref[i].mean_loss, rel=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_evaluation_reports_accuracy_and_loss_over_positions(device):
    fm = lstm(predict="every")
    x, y = windows(9, seed=2)
    flat = fm.flat_params()
    with torch.no_grad():
        logits = fm.module(torch.from_numpy(x))
    t = torch.from_numpy(np.concatenate([x[:, 1:], y[:, None]], axis=1))
    want_acc = (logits.argmax(2) == t).sum().item() / (9 * 4)
    want_loss = F.cross_entropy(logits.reshape(-1, V), t.reshape(-1)).item()
    acc, loss = evaluate(fm, flat, {}, x, y, batch_size=4, device=device)  # three batches, the last short
    assert acc == pytest.approx(want_acc, rel=1e-12) and loss == pytest.approx(want_loss, rel=1e-5)
    if device != "cpu":
        return
    accs, losses = evaluate_many(fm, flat, {}, x, y, np.array([0, 4, 9]), batch_size=4)
    per = (logits.argmax(2) == t).double().mean(1).numpy()
    np.testing.assert_allclose(accs, [per[:4].mean(), per[4:].mean()], rtol=1e-12)
    assert (accs * [4, 5]).sum() / 9 == pytest.approx(acc, rel=1e-12)
    assert (losses * [4, 5]).sum() / 9 == pytest.approx(loss, rel=1e-6)
