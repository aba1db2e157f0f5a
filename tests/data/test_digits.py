"""The scikit-learn digits dataset: server hold-out, partitioning, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

import turnout.data.partition  # noqa: F401  (registers the partitioners split_pool uses)
from turnout.config.components import validate_component
from turnout.core.errors import ConfigError
from turnout.data.digits import DigitsDataset
from turnout.data.registry import DATASETS


def build(seed: int = 0, **opts):
    cls, cfg = validate_component(DATASETS, {"name": "digits", **opts}, "data")
    assert cls is DigitsDataset
    return cls.build(cfg, seed)


def label_skew(ds) -> float:
    """Mean total-variation distance between each client's label mix and the pooled one."""
    h = ds.label_histogram().astype(float)
    keep = h.sum(1) > 0
    p = h[keep] / h[keep].sum(1, keepdims=True)
    q = h.sum(0) / h.sum()
    return float(0.5 * np.abs(p - q).sum(1).mean())


def test_sizes_add_up_and_server_fraction():
    ds = build(num_clients=10)
    assert len(ds.x_train) + len(ds.x_test) + len(ds.x_server_test) == 1797
    assert len(ds.x_server_test) == round(0.25 * 1797) == 449
    assert ds.num_classes == 10 and ds.input_shape == (1, 8, 8) and ds.num_clients == 10
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    small = build(num_clients=10, server_test_fraction=0.1)
    assert len(small.x_server_test) == 180
    assert len(small.x_train) + len(small.x_test) == 1797 - 180


def test_pixels_scaled_and_rows_are_the_digits():
    ds = build(num_clients=7)
    x_all = np.concatenate([ds.x_train, ds.x_test, ds.x_server_test])
    y_all = np.concatenate([ds.y_train, ds.y_test, ds.y_server_test])
    assert x_all.min() == 0.0 and x_all.max() == 1.0
    images, labels = load_digits(return_X_y=True)
    src = sorted(zip(map(bytes, (images * 1).astype(np.uint8)), labels.tolist()))
    got = sorted(zip(map(bytes, np.rint(x_all.reshape(-1, 64) * 16).astype(np.uint8)), y_all.tolist()))
    assert got == src


def test_dirichlet_partition_increases_label_skew():
    iid = build(num_clients=20)
    skewed = build(num_clients=20, partition={"name": "dirichlet", "alpha": 0.1})
    assert label_skew(skewed) > label_skew(iid) + 0.3
    assert label_skew(iid) < 0.35
    # The server hold-out does not depend on the partition.
    np.testing.assert_array_equal(iid.x_server_test, skewed.x_server_test)
    assert len(skewed.x_train) + len(skewed.x_test) == 1797 - 449


def test_deterministic_per_seed():
    a, b, c = build(seed=5, num_clients=12), build(seed=5, num_clients=12), build(seed=6, num_clients=12)
    for field in ("x_train", "y_train", "train_offsets", "x_test", "x_server_test", "y_server_test"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.y_server_test, c.y_server_test)
    assert not np.array_equal(a.x_train, c.x_train)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_server_fraction_must_be_strictly_between_0_and_1(bad):
    with pytest.raises(ConfigError, match="data.server_test_fraction"):
        build(server_test_fraction=bad)


def test_unknown_key_rejected():
    with pytest.raises(ConfigError, match="data.num_client"):
        build(num_client=3)


def test_data_seed_fixes_one_task_across_run_seeds():
    """``data_seed`` (FedGS's protocol: one generated task, seeds drive sampling and training): the same
    partition, local splits and server test set whatever the run seed; unset, each run seed has its own."""
    opts = {"num_clients": 12, "partition": {"name": "dirichlet", "alpha": 0.3}}
    a, b = build(1, data_seed=0, **opts), build(2, data_seed=0, **opts)
    for key in ("x_train", "y_train", "train_offsets", "x_test", "test_offsets", "x_server_test"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    np.testing.assert_array_equal(a.y_train, build(0, **opts).y_train)  # data_seed 0 = run seed 0's task
    assert not np.array_equal(build(1, **opts).train_offsets, build(2, **opts).train_offsets)
