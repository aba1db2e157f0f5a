"""synthetic_images: CIFAR-shaped uint8 images from the seed that models read as [0, 1] and can learn."""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest
import torch

from turnout.config.components import validate_component
from turnout.core import rng as rngmod
from turnout.core.errors import ConfigError
from turnout.data.registry import DATASETS
from turnout.data.synthetic_images import (
    CHUNK_COPIES,
    CHUNK_ROWS,
    SyntheticImagesDataset,
    noise_table,
    upsample,
    upsampling_taps,
)

S = SyntheticImagesDataset


def config(**opts):
    return validate_component(DATASETS, {"name": "synthetic_images", **opts}, "dataset")[1]


def build(seed: int = 0, **opts):
    return S.build(config(**opts), seed)


def digest(d) -> str:
    h = hashlib.sha256()
    for a in (d.x_train, d.y_train, d.x_test, d.y_test, d.x_server_test, d.y_server_test):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def default():
    t0 = time.perf_counter()
    d = build(0)
    return d, time.perf_counter() - t0


def test_defaults_are_cifar_shaped_uint8_read_as_unit_floats(default):
    d, _ = default
    assert DATASETS.get("synthetic_images") is S
    assert d.num_clients == 1000 and d.n_train.tolist() == [50] * 1000 and d.n_test.sum() == 0
    assert d.x_train.shape == (50_000, 3, 32, 32) and d.x_train.dtype == np.uint8
    assert d.x_server_test.shape == (2000, 3, 32, 32) and d.y_server_test.dtype == np.int64
    assert d.input_shape == (3, 32, 32) and d.num_classes == 10
    # every class present in about equal numbers (IID labels), and the pixels use the whole range
    counts = np.bincount(d.y_train, minlength=10)
    assert counts.min() > 4500 and counts.max() < 5500
    assert d.x_train.min() == 0 and d.x_train.max() == 255 and 120 < d.x_train.mean() < 136
    x = torch.from_numpy(d.x_server_test[:8])
    (scaled,) = d.input_scaling(None, (x,))
    assert scaled.dtype == torch.float32 and 0.0 <= float(scaled.min()) and float(scaled.max()) <= 1.0
    torch.testing.assert_close(scaled, x.float() / 255, rtol=0, atol=0)


def test_same_seed_same_bytes_other_seed_other_bytes():
    small = {"num_clients": 30, "samples_per_client": 20, "server_test": 50, "client_test_fraction": 0.2}
    a, b = build(3, **small), build(3, **small)
    assert digest(a) == digest(b)
    assert digest(build(4, **small)) != digest(a)
    # data_seed fixes the data whatever the run seed
    assert digest(build(9, data_seed=3, **small)) == digest(a)
    # labels and pixels both move with the seed
    c = build(4, **small)
    assert (c.y_train != a.y_train).mean() > 0.5 and (c.x_train != a.x_train).mean() > 0.5


def test_client_test_fraction_splits_every_client_alike():
    d = build(0, num_clients=7, samples_per_client=10, client_test_fraction=0.3, server_test=5)
    assert d.n_train.tolist() == [7] * 7 and d.n_test.tolist() == [3] * 7
    assert len(d.x_test) == 21 and len(d.x_server_test) == 5


def test_classes_per_client_is_honoured():
    d = build(0, num_clients=200, samples_per_client=50, classes_per_client=2, input_shape=[1, 8, 8], server_test=10)
    hist = d.label_histogram()
    assert ((hist > 0).sum(axis=1) == 2).all()  # 50 draws from two classes: both appear (P(miss) = 2^-49)
    assert (hist.sum(axis=0) > 0).all()  # and the population covers every class
    iid = build(0, num_clients=200, samples_per_client=50, input_shape=[1, 8, 8], server_test=10).label_histogram()
    assert (iid > 0).sum(axis=1).min() >= 8
    # the server test set stays IID
    assert np.bincount(d.y_server_test, minlength=10).max() < 10


def test_images_carry_their_class_a_nearest_mean_classifier_finds_it():
    d = build(0, num_clients=100, samples_per_client=50, server_test=1000)
    x = d.x_train.reshape(len(d.x_train), -1).astype(np.float32)
    means = np.stack([x[d.y_train == k].mean(axis=0) for k in range(10)])
    xs = d.x_server_test.reshape(len(d.x_server_test), -1).astype(np.float32)
    guess = ((xs[:, None, :] - means[None]) ** 2).sum(axis=-1).argmin(axis=1)
    accuracy = float((guess == d.y_server_test).mean())
    assert 0.8 < accuracy < 0.97  # learnable (chance 0.1), not trivial: 0.90 at the defaults
    # jitter makes classes overlap: a larger one is harder
    hard = build(0, num_clients=100, samples_per_client=50, server_test=1000, jitter=4.0)
    xh = hard.x_train.reshape(len(hard.x_train), -1).astype(np.float32)
    mh = np.stack([xh[hard.y_train == k].mean(axis=0) for k in range(10)])
    gh = ((hard.x_server_test.reshape(1000, -1)[:, None, :].astype(np.float32) - mh[None]) ** 2).sum(-1).argmin(1)
    assert float((gh == hard.y_server_test).mean()) < accuracy - 0.2


def test_federated_logreg_learns_it(simulate):
    raw = {"name": "images", "rounds": 20,
           "data": {"name": "synthetic_images", "num_clients": 20, "samples_per_client": 50, "server_test": 500},
           "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 10, "lr": 0.1},
           "selector": {"name": "uniform", "clients_per_round": 10}, "eval": {"every": 20},
           "output": {"progress": False, "plots": False}}
    _, result = simulate(raw)
    accuracy = [r["accuracy"] for r in result.rounds if r["accuracy"] == r["accuracy"]]
    assert accuracy[-1] > 0.6  # chance is 0.1; 0.80 after 20 rounds on seed 0


def test_noise_table_and_upsampling():
    t = noise_table(64.0)
    assert t.shape == (256,) and abs(float(t.mean())) < 1e-4 and 60 < float(t.std()) < 64
    assert (np.diff(t) > 0).all() and float(t.max()) < 3 * 64
    assert not noise_table(0.0).any()
    taps = upsampling_taps(32, 4)
    flat = upsample(np.full((2, 4), 3.0, np.float32), taps, axis=1)
    assert flat.shape == (2, 32) and (flat == 3.0).all()  # a constant grid stays constant
    ramp = upsample(np.arange(4, dtype=np.float32)[None], taps, axis=1)[0]
    assert ramp[0] == 0.0 and ramp[-1] == 3.0 and (np.diff(ramp) >= 0).all()  # edges clamped, monotone


def test_pixels_do_not_depend_on_a_blas_kernel():
    """Every pixel is an element-wise float32 expression of the grid (no matrix product whose summation
    order a BLAS kernel picks): the render equals the same interpolation written point by point."""
    cfg = SyntheticImagesDataset.Config(num_clients=2, samples_per_client=3, input_shape=[2, 6, 5], resolution=3,
                                        noise=0.0)
    y = np.array([0, 1, 2, 1])
    got = SyntheticImagesDataset.render(cfg, y, 7, "probe")
    jitter = rngmod.stream(7, "probe-jitter").standard_normal((4, 2, 3, 3), dtype=np.float32)
    grid = SyntheticImagesDataset.prototypes(cfg, 7)[y] + np.float32(cfg.jitter) * jitter
    (lo_h, hi_h, f_h), (lo_w, hi_w, f_w) = upsampling_taps(6, 3), upsampling_taps(5, 3)
    want = np.empty((4, 2, 6, 5), np.uint8)
    one = np.float32(1.0)
    for i, ch, r, col in np.ndindex(4, 2, 6, 5):
        g = grid[i, ch]
        top = g[lo_h[r], lo_w[col]] * (one - f_w[col]) + g[lo_h[r], hi_w[col]] * f_w[col]
        bottom = g[hi_h[r], lo_w[col]] * (one - f_w[col]) + g[hi_h[r], hi_w[col]] * f_w[col]
        v = top * (one - f_h[r]) + bottom * f_h[r]
        v = v * np.float32(cfg.contrast) + np.float32(128.0)
        want[i, ch, r, col] = np.uint8(min(max(v, np.float32(0.0)), np.float32(255.0)))
    np.testing.assert_array_equal(got, want)


def test_footprint_covers_what_it_builds():
    cfg = config(num_clients=40, samples_per_client=30, server_test=100)
    fp = S.footprint(cfg)
    d = S.build(cfg, 0)
    held = sum(a.nbytes for a in (d.x_train, d.y_train, d.x_test, d.y_test, d.x_server_test, d.y_server_test))
    scratch = CHUNK_COPIES * CHUNK_ROWS * 3 * 32 * 32 * 4  # one chunk's float32 image and noise
    assert held <= fp.bytes <= held + scratch
    assert (fp.num_clients, fp.input_shape, fp.num_classes, fp.max_client_rows) == (40, (3, 32, 32), 10, 30)


def test_bad_options_are_one_line_errors_naming_the_key():
    with pytest.raises(ConfigError) as e:
        config(classes_per_client=11)
    assert e.value.key == "dataset.classes_per_client" and "num_classes (10)" in str(e.value)
    with pytest.raises(ConfigError) as e:
        config(resolution=40)
    assert e.value.key == "dataset.resolution"
    for bad in ({"noise": -1}, {"input_shape": [3, 32]}, {"samples_per_client": 0}, {"client_test_fraction": 1.0}):
        with pytest.raises(ConfigError) as e:
            config(**bad)
        assert e.value.key == f"dataset.{next(iter(bad))}" and "\n" not in str(e.value)
