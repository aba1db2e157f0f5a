"""Model zoo: shapes, parameter counts, trainability, determinism, functional_call / vmap."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

import turnout.models.cnn  # noqa: F401  (registers)
import turnout.models.linear  # noqa: F401
import turnout.models.lstm  # noqa: F401
import turnout.models.mobile  # noqa: F401
import turnout.models.resnet  # noqa: F401
from turnout.config.base import StrictModel
from turnout.config.components import validate_component
from turnout.core.errors import ConfigError
from turnout.core.registry import describe
from turnout.models.registry import MODELS

SMALL = ["logreg", "mlp", "cnn_fedavg", "cnn_fedsum_mnist", "cnn_fedsum_svhn", "cnn_fedsum_cifar10", "char_lstm"]
BIG = ["resnet18_gn", "shufflenet_v2", "mobilenet_v2"]
IMAGE_CNNS = ["cnn_fedavg", "cnn_fedsum_mnist", "cnn_fedsum_svhn", "cnn_fedsum_cifar10"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny batches gain nothing from intra-op threads, and on a shared 2-core box oversubscribed
    # threads made this module 5x slower; restore the setting afterwards.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _cases() -> list[tuple[str, tuple[int, ...], int]]:
    cases = [("logreg", (60,), 10), ("mlp", (60,), 10), ("char_lstm", (80,), 81)]
    cases += [(n, s, 10) for n in IMAGE_CNNS for s in ((1, 28, 28), (3, 32, 32))]
    cases += [(n, (3, 32, 32), 10) for n in BIG]
    return cases


CASES = _cases()
CASE_IDS = [f"{n}-{'x'.join(map(str, s))}" for n, s, _ in CASES]


def build(name: str, input_shape: tuple[int, ...], num_classes: int, **options) -> nn.Module:
    cls, cfg = validate_component(MODELS, {"name": name, **options}, "model")
    return cls.build(cfg, input_shape, num_classes)


def batch(name: str, input_shape: tuple[int, ...], num_classes: int, b: int, seed: int = 123):
    g = torch.Generator().manual_seed(seed)
    if name == "char_lstm":
        x = torch.randint(0, num_classes, (b, *input_shape), generator=g, dtype=torch.int64)
    else:
        x = torch.randn(b, *input_shape, generator=g)
    y = torch.randint(0, num_classes, (b,), generator=g)
    return x, y


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_registered_names_and_descriptions():
    assert set(SMALL + BIG) <= set(MODELS.names())
    for name in SMALL + BIG:
        cls = MODELS.get(name)
        assert describe(cls), f"{name} has no one-line description"
        assert issubclass(cls.Config, StrictModel)


@pytest.mark.parametrize("name,shape,nc", CASES, ids=CASE_IDS)
def test_output_shape_and_no_dropout(name, shape, nc):
    torch.manual_seed(0)
    m = build(name, shape, nc)
    x, _ = batch(name, shape, nc, 2)
    out = m(x)
    assert out.shape == (2, nc)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    # Seeded simulator streams cannot reach dropout masks, so no model may contain dropout.
    assert not any(isinstance(mod, nn.modules.dropout._DropoutNd) for mod in m.modules())


# Default-size parameter counts. cnn_fedavg/MNIST is McMahan et al.'s well-known 1,663,370:
# 5*5*1*32+32 = 832; 5*5*32*64+64 = 51,264; 7*7*64*512+512 = 1,606,144; 512*10+10 = 5,130.
# resnet18_gn / shufflenet_v2 / mobilenet_v2 equal the standard BatchNorm ResNet-18 (3x3 stem),
# ShuffleNetV2-1.0x and MobileNetV2-1.0 counts for 10 classes (GroupNorm has BN's 2 params/channel).
EXPECTED_PARAMS = {
    ("logreg", (60,)): 60 * 10 + 10,
    ("mlp", (60,)): (60 * 200 + 200) + (200 * 200 + 200) + (200 * 10 + 10),
    ("cnn_fedavg", (1, 28, 28)): 1_663_370,
    ("cnn_fedsum_mnist", (1, 28, 28)): (9 * 10 + 10) + (9 * 10 * 20 + 20) + (20 * 7 * 7 * 50 + 50) + (50 * 10 + 10),
    ("cnn_fedsum_svhn", (3, 32, 32)): (27 * 32 + 32) + (9 * 32 * 32 + 32) + (32 * 8 * 8 * 128 + 128) + 1290,
    ("cnn_fedsum_cifar10", (3, 32, 32)): 896 + 9248 + (2048 * 256 + 256) + (256 * 64 + 64) + 650,
    ("char_lstm", (80,)): 81 * 8 + (4 * 256 * (8 + 256) + 8 * 256) + (4 * 256 * 512 + 8 * 256) + (256 * 81 + 81),
    ("resnet18_gn", (3, 32, 32)): 11_173_962,
    ("shufflenet_v2", (3, 32, 32)): 1_263_854,
    ("mobilenet_v2", (3, 32, 32)): 2_236_682,
}


@pytest.mark.parametrize("key", list(EXPECTED_PARAMS), ids=[k[0] for k in EXPECTED_PARAMS])
def test_param_counts(key):
    name, shape = key
    assert n_params(build(name, shape, 81 if name == "char_lstm" else 10)) == EXPECTED_PARAMS[key]


def test_logreg_without_bias():
    m = build("logreg", (60,), 10, bias=False)
    assert n_params(m) == 600
    assert torch.equal(m(torch.zeros(3, 60)), torch.zeros(3, 10))


@pytest.mark.parametrize("width,count", [(0.5, 1_366_792), (1.0, 2_278_604), (1.5, 3_503_624), (2.0, 7_393_996)])
def test_shufflenet_widths_match_paper_models(width, count):
    # ImageNet-1000 counts of the paper's four ShuffleNet V2 sizes (Ma et al. 2018, Table 5 layout).
    assert n_params(build("shufflenet_v2", (3, 32, 32), 1000, width=width)) == count


def test_mobilenet_v2_imagenet_count_and_width():
    assert n_params(build("mobilenet_v2", (3, 32, 32), 1000)) == 3_504_872  # the paper's 3.4M model
    small = build("mobilenet_v2", (3, 32, 32), 10, width_mult=0.35)
    assert small(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("name", BIG)
def test_imagenet_stem(name):
    m = build(name, (3, 64, 64), 7, stem="imagenet")
    assert m(torch.randn(2, 3, 64, 64)).shape == (2, 7)


@pytest.mark.parametrize("name", IMAGE_CNNS)
@pytest.mark.parametrize("shape", [(1, 4, 4), (2, 17, 23), (3, 64, 48)])
def test_cnns_adapt_to_input_size(name, shape):
    m = build(name, shape, 5)
    assert m(torch.randn(3, *shape)).shape == (3, 5)


def test_fedsum_cnn_init_follows_fedawe_code():
    torch.manual_seed(0)
    m = build("cnn_fedsum_svhn", (3, 32, 32), 10)
    linears = [mod for mod in m.modules() if isinstance(mod, (nn.Conv2d, nn.Linear))]
    for mod in linears[:-1]:  # convs + hidden Linear: Kaiming-normal, zero bias
        assert torch.count_nonzero(mod.bias) == 0
    assert torch.count_nonzero(linears[-1].bias) > 0  # output layer keeps PyTorch's default init
    fc1 = linears[2].weight  # Kaiming normal, fan_in = 2048, gain sqrt(2): std = sqrt(2/2048)
    assert abs(fc1.std().item() - (2 / 2048) ** 0.5) < 0.002
    torch.manual_seed(0)
    plain = build("cnn_fedsum_svhn", (3, 32, 32), 10, init="torch")
    assert all(torch.count_nonzero(mod.bias) > 0 for mod in plain.modules() if isinstance(mod, nn.Linear))


def _loss(m, x, y):
    return nn.functional.cross_entropy(m(x), y)


def _sgd_step(m: nn.Module, lr: float) -> None:
    # Plain SGD by hand: constructing torch.optim.SGD imports torch._dynamo (~3 s on first use).
    with torch.no_grad():
        for p in m.parameters():
            p -= lr * p.grad
            p.grad = None


SMALL_CASES = [(c, i) for c, i in zip(CASES, CASE_IDS) if c[0] in SMALL]


@pytest.mark.parametrize("name,shape,nc", [c for c, _ in SMALL_CASES], ids=[i for _, i in SMALL_CASES])
def test_sgd_steps_reduce_loss(name, shape, nc):
    torch.manual_seed(1)
    m = build(name, shape, nc)
    x, y = batch(name, shape, nc, 8)
    first = _loss(m, x, y).item()
    for _ in range(5):
        _loss(m, x, y).backward()
        _sgd_step(m, 0.05)
    assert _loss(m, x, y).item() < first


@pytest.mark.parametrize("name", BIG)
def test_big_models_single_step_finite_grads(name):
    torch.manual_seed(1)
    m = build(name, (3, 32, 32), 10)
    x, y = batch(name, (3, 32, 32), 10, 2)
    before = {k: v.detach().clone() for k, v in m.named_parameters()}
    _loss(m, x, y).backward()
    for k, p in m.named_parameters():
        assert p.grad is not None, k
        assert torch.isfinite(p.grad).all(), k
    _sgd_step(m, 0.01)
    assert any(not torch.equal(before[k], p) for k, p in m.named_parameters())


@pytest.mark.parametrize("name,shape,nc", CASES, ids=CASE_IDS)
def test_same_seed_same_init(name, shape, nc):
    torch.manual_seed(7)
    a = build(name, shape, nc).state_dict()
    torch.manual_seed(7)
    b = build(name, shape, nc).state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(8)
    c = build(name, shape, nc).state_dict()
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


@pytest.mark.parametrize("name,shape,nc", CASES, ids=CASE_IDS)
def test_functional_call_matches_forward(name, shape, nc):
    torch.manual_seed(3)
    m = build(name, shape, nc)
    x, _ = batch(name, shape, nc, 2)
    params = {k: v.detach().clone() for k, v in m.named_parameters()}
    for mode in ("train", "eval"):
        m.train(mode == "train")
        ref = m(x)
        out = functional_call(m, params, (x,))
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
    # Perturbed params flow through (no parameter is captured outside the module's parameters).
    m.eval()
    shifted = {k: v + 0.01 for k, v in params.items()}
    assert not torch.equal(functional_call(m, shifted, (x,)), m(x))


@pytest.mark.parametrize("name", ["shufflenet_v2", "mobilenet_v2"])
def test_batchnorm_models_under_func_grad_with_explicit_buffers(name):
    torch.manual_seed(2)
    m = build(name, (3, 32, 32), 10)
    params = {k: v.detach() for k, v in m.named_parameters()}
    buffers = {k: v.detach().clone() for k, v in m.named_buffers()}
    x, y = batch(name, (3, 32, 32), 10, 2)

    def loss(p, b):
        return nn.functional.cross_entropy(functional_call(m, (p, b), (x,)), y)

    grads = torch.func.grad(loss)(params, buffers)
    assert set(grads) == set(params) and all(torch.isfinite(g).all() for g in grads.values())
    tracked = [k for k in buffers if k.endswith("num_batches_tracked")]
    assert tracked and all(buffers[k].item() == 1 for k in tracked)  # updates land in the dict...
    assert all(b.item() == 0 for k, b in m.named_buffers() if k.endswith("num_batches_tracked"))  # ...not the module


def test_char_lstm_unrolled_matches_fused():
    torch.manual_seed(0)
    fused = build("char_lstm", (80,), 81)
    torch.manual_seed(0)
    unrolled = build("char_lstm", (80,), 81, impl="unrolled")
    sf, su = fused.state_dict(), unrolled.state_dict()
    assert list(sf) == list(su) and all(torch.equal(sf[k], su[k]) for k in sf)
    x, _ = batch("char_lstm", (80,), 81, 3)
    torch.testing.assert_close(unrolled(x), fused(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,shape,nc,options", [
    ("logreg", (60,), 10, {}),
    ("mlp", (60,), 10, {"activation": "tanh"}),
    ("cnn_fedsum_mnist", (1, 28, 28), 10, {}),
    ("cnn_fedavg", (1, 12, 12), 10, {}),
    ("char_lstm", (12,), 20, {"impl": "unrolled", "hidden": 16}),
])
def test_vmap_over_stacked_clients(name, shape, nc, options):
    # Executors may train many clients at once with vmap over stacked parameters.
    torch.manual_seed(5)
    models = [build(name, shape, nc, **options) for _ in range(3)]
    params, buffers = stack_module_state(models)
    x, _ = batch(name, shape, nc, 3 * 4)
    x = x.reshape(3, 4, *shape)
    out = vmap(lambda p, b, xi: functional_call(models[0], (p, b), (xi,)))(params, buffers, x)
    ref = torch.stack([m(xi) for m, xi in zip(models, x)])
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("raw", [
    {"name": "logreg", "biass": True},
    {"name": "mlp", "hidden": [200, 0]},
    {"name": "mlp", "hidden": []},
    {"name": "mlp", "activation": "gelu"},
    {"name": "cnn_fedavg", "width": 2},
    {"name": "cnn_fedsum_svhn", "init": "xavier"},
    {"name": "char_lstm", "hidden": 0},
    {"name": "resnet18_gn", "groups": 3},
    {"name": "resnet18_gn", "stem": "tiny"},
    {"name": "shufflenet_v2", "width": 0.75},
    {"name": "mobilenet_v2", "width_mult": 0},
])
def test_bad_options_are_config_errors(raw):
    with pytest.raises(ConfigError):
        validate_component(MODELS, raw, "model")


@pytest.mark.parametrize("name,shape", [("cnn_fedavg", (60,)), ("cnn_fedavg", (1, 3, 3)),
                                        ("resnet18_gn", (32, 32)), ("char_lstm", (1, 28, 28))])
def test_wrong_input_shape_is_clear_error(name, shape):
    with pytest.raises(ValueError, match="input"):
        build(name, shape, 10)

