"""Synthetic(α,β): FedGS seeding reproduces the published sizes, FedProx variant behaves like the real files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from turnout.config.components import validate_component
from turnout.core.errors import ConfigError
from turnout.data import synthetic
from turnout.data.registry import DATASETS

S = synthetic.SyntheticDataset
FEDGS_SIZES = [774, 51, 159, 55, 80, 57, 117, 338, 53, 167, 97, 51, 59, 591, 55, 1088, 245, 83, 2143, 132,
               140, 323, 395, 394, 75, 184, 113, 64, 602, 50]
ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "datasets" / "fedprox-synthetic" / "synthetic_0.5_0.5_test.json"
FIXTURE = ROOT / "tests" / "fixtures" / "leaf" / "synthetic_0.5_0.5_small.json"


def build(seed: int = 0, **opts):
    _, cfg = validate_component(DATASETS, {"name": "synthetic", **opts}, "dataset")
    return S.build(cfg, seed)


def totals(d):
    n = d.n_train + d.n_test
    if d.valid_offsets is not None:
        n = n + np.diff(d.valid_offsets)
    return n


@pytest.fixture(scope="module")
def fedgs():
    return build(0, variant="fedgs")


@pytest.fixture(scope="module")
def fedprox():
    return build(0)


def test_registered():
    assert DATASETS.get("synthetic") is S
    assert S.__doc__.strip().splitlines()[0]


def test_fedgs_sizes_match_the_fedgs_seed0_vector(fedgs):
    assert totals(fedgs).tolist() == FEDGS_SIZES
    assert int(totals(fedgs).sum()) == 8735


def test_fedgs_split_75_15_10(fedgs):
    n = np.array(FEDGS_SIZES)
    assert fedgs.n_train.tolist() == (0.75 * n).astype(int).tolist()
    assert np.diff(fedgs.valid_offsets).tolist() == ((0.9 * n).astype(int) - (0.75 * n).astype(int)).tolist()
    assert fedgs.n_test.tolist() == (n - (0.9 * n).astype(int)).tolist()
    assert len(fedgs.x_valid) == len(fedgs.y_valid) == fedgs.valid_offsets[-1]
    # Server test set is the pooled client test parts.
    np.testing.assert_array_equal(fedgs.x_server_test, fedgs.x_test)
    np.testing.assert_array_equal(fedgs.y_server_test, fedgs.y_test)
    assert fedgs.client_names[0] == "Client00" and len(fedgs.client_names) == 30


def test_fedgs_matches_transcription_of_reference():
    """FedGS's generator (benchmark/synthetic_regression/core.py) written out literally with numpy's legacy
    global RNG: same x, y and optimal models."""
    state = np.random.get_state()
    try:
        np.random.seed(97 + 3)
        skew, nc, d, c = 0.5, 30, 60, 10
        np.random.normal(0, 1, (d, c))
        np.random.normal(0, 1, c)
        us = np.random.normal(0, skew, nc)
        w = [np.random.normal(us[k], 1, (d, c)) for k in range(nc)]
        b = [np.random.normal(us[k], 1, c) for k in range(nc)]
        bb = np.random.normal(0, skew, nc)
        v = [np.random.normal(bb[k], 1, d) for k in range(nc)]
        spu = np.random.lognormal(4, 2, nc).astype(int) + 50
        sigma = np.diag([np.power(j + 1, -1.2) for j in range(d)])
        xs, ys = [], []
        for k in range(nc):
            xk = np.random.multivariate_normal(v[k], sigma, spu[k])
            xs.append(xk)
            ys.append([int(np.argmax(np.dot(xk[i], w[k]) + b[k])) for i in range(spu[k])])
    finally:
        np.random.set_state(state)
    ours = build(3, variant="fedgs")
    k = 7
    a, e = ours.train_offsets[k], ours.train_offsets[k + 1]
    ntr = int(0.75 * spu[k])
    np.testing.assert_allclose(ours.x_train[a:e], xs[k][:ntr].astype(np.float32))
    assert ours.y_train[a:e].tolist() == ys[k][:ntr]
    a, e = ours.test_offsets[k], ours.test_offsets[k + 1]
    assert ours.y_test[a:e].tolist() == ys[k][int(0.9 * spu[k]):]
    opt = ours.extras["optimal"]
    assert opt.shape == (30, 61 * 10)
    np.testing.assert_allclose(opt[k], np.concatenate([w[k], b[k][None]]).ravel().astype(np.float32))


def test_fedgs_data_seed_overrides_run_seed():
    a = build(5, variant="fedgs", data_seed=0, num_clients=30)
    assert totals(a).tolist() == FEDGS_SIZES
    assert totals(build(1, variant="fedgs")).tolist() != FEDGS_SIZES


def test_fedprox_shape_and_split(fedprox):
    d = fedprox
    assert d.num_clients == 30 and d.input_shape == (60,) and d.num_classes == 10
    n = totals(d)
    assert n.min() >= 50
    assert d.n_train.tolist() == (0.9 * n).astype(int).tolist()
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    for y in (d.y_train, d.y_test, d.y_server_test):
        assert y.min() >= 0 and y.max() < 10
    assert d.valid_offsets is None
    assert d.client_names[29] == "f_00029"
    assert d.extras["optimal"].shape == (30, 610)
    np.testing.assert_array_equal(d.y_server_test, d.y_test)


def test_fedprox_labels_follow_the_client_models(fedprox):
    d, opt = fedprox, fedprox.extras["optimal"].reshape(30, 61, 10)
    for k in (0, 13, 29):
        x, y = d.client_train(k)
        pred = np.argmax(x.astype(np.float64) @ opt[k, :60] + opt[k, 60], axis=1)
        assert np.mean(pred == y) > 0.99  # float32 storage may flip a near-tie


def test_fedprox_deterministic_per_seed(fedprox):
    again = build(0)
    np.testing.assert_array_equal(again.x_train, fedprox.x_train)
    np.testing.assert_array_equal(again.y_test, fedprox.y_test)
    other = build(1)
    assert totals(other).tolist() != totals(fedprox).tolist()
    assert totals(build(1, data_seed=0)).tolist() == totals(fedprox).tolist()


def test_iid_differs_from_alpha_beta_zero():
    """α=β=0 still gives every client its own model and feature mean; iid shares both."""
    zero = build(0, alpha=0.0, beta=0.0)
    iid = build(0, alpha=0.0, beta=0.0, iid=True)
    opt_iid = iid.extras["optimal"]
    assert np.allclose(opt_iid, opt_iid[0])  # one global model
    assert not np.allclose(zero.extras["optimal"], zero.extras["optimal"][0])

    def spread_of_means(d):
        means = np.stack([d.client_train(k)[0].mean(axis=0) for k in range(d.num_clients)])
        return float(means[:, 0].std())  # first coordinate has variance 1 in Σ

    assert spread_of_means(zero) > 3 * spread_of_means(iid)

    def label_tv(d):  # mean total-variation distance of client label mix from the population mix
        h = d.label_histogram().astype(float)
        p = h / h.sum(axis=1, keepdims=True)
        return float(0.5 * np.abs(p - h.sum(0) / h.sum()).sum(axis=1).mean())

    assert label_tv(zero) > 2 * label_tv(iid)


def test_alpha_beta_control_skew():
    def model_spread(d):
        opt = d.extras["optimal"]
        return float(opt.mean(axis=1).std())

    assert model_spread(build(0, alpha=2.0, beta=0.0)) > 3 * model_spread(build(0, alpha=0.0, beta=0.0))


def test_fedprox_test_sizes_like_real_files(fedprox):
    """Median per-user test count is in the ballpark of FedProx's committed synthetic_0.5_0.5 test file."""
    path = SHARED if SHARED.exists() else FIXTURE
    real = np.array(json.loads(path.read_text())["num_samples"])
    ours = np.concatenate([build(s).n_test for s in range(5)])
    assert np.median(real) / 3 <= np.median(ours) <= 3 * np.median(real)
    assert ours.min() >= 5  # int(lognormal)+50 ≥ 50 → at least 5 test samples, like the real files


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError) as e:
        build(alpha=-1)
    assert e.value.key == "dataset.alpha"
    with pytest.raises(ConfigError) as e:
        build(variant="leaf")
    assert e.value.key == "dataset.variant"
    with pytest.raises(ConfigError):
        build(num_classes=1)
    with pytest.raises(ConfigError):
        build(unknown=3)


def test_small_custom_shape():
    d = build(0, num_clients=4, dim=5, num_classes=3, min_samples=10, variant="fedgs")
    assert d.x_train.shape[1:] == (5,) and d.num_clients == 4
    assert d.extras["optimal"].shape == (4, 6 * 3)
    assert totals(d).min() >= 10 and d.y_train.max() < 3
