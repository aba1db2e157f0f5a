"""Partitioners: coverage, the skew each one promises, determinism, speed and bad parameters."""

from __future__ import annotations

import time

import numpy as np
import pytest

from turnout.config.components import validate_component
from turnout.core.errors import ConfigError
from turnout.data import partition  # noqa: F401  (registers the partitioners)
from turnout.data.registry import PARTITIONERS

NAMES = ["iid", "dirichlet", "shards", "lognormal", "zipf"]
LABELS = np.random.default_rng(123).integers(0, 10, 6000)


def assign(name: str, labels=LABELS, num_clients: int = 50, seed: int = 0, **opts) -> np.ndarray:
    cls, cfg = validate_component(PARTITIONERS, {"name": name, **opts}, "partition")
    return cls.assign(cfg, labels, num_clients, np.random.default_rng(seed))


def sizes(out: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(out[out >= 0], minlength=k)


def histogram(out: np.ndarray, labels: np.ndarray, k: int, c: int = 10) -> np.ndarray:
    keep = out >= 0
    return np.bincount(out[keep] * c + labels[keep], minlength=k * c).reshape(k, c)


def mean_entropy(out: np.ndarray, labels: np.ndarray, k: int) -> float:
    h = histogram(out, labels, k).astype(float)
    p = h / np.maximum(h.sum(axis=1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    return float(ent.mean())


@pytest.mark.parametrize("name", NAMES)
def test_valid_assignment_and_determinism(name):
    out = assign(name)
    assert out.dtype == np.int64 and out.shape == LABELS.shape
    assert out.min() >= -1 and out.max() < 50
    # One id per row means no row is given to two clients; these partitioners use every row.
    assert (out >= 0).all()
    assert (sizes(out, 50) > 0).all()
    np.testing.assert_array_equal(out, assign(name))
    assert not np.array_equal(out, assign(name, seed=1))
    assert PARTITIONERS.get(name).__doc__.strip().splitlines()[0]


def test_iid_equal_sizes():
    s = sizes(assign("iid", num_clients=7), 7)
    assert s.max() - s.min() <= 1 and s.sum() == len(LABELS)


def test_dirichlet_small_alpha_skews_labels():
    skewed = mean_entropy(assign("dirichlet", alpha=0.1, min_size=0), LABELS, 50)
    flat = mean_entropy(assign("dirichlet", alpha=100.0), LABELS, 50)
    assert flat > 0.95 * np.log(10)
    assert skewed < 0.5 * flat


def test_dirichlet_min_size_enforced_or_error():
    out = assign("dirichlet", alpha=0.3, min_size=20)
    assert sizes(out, 50).min() >= 20
    with pytest.raises(ConfigError) as e:
        assign("dirichlet", labels=LABELS[:500], alpha=0.01, min_size=9, max_tries=3)
    assert e.value.key == "partition.min_size"


def test_shards_limit_labels_per_client():
    labels = np.repeat(np.arange(10), 100)  # shard size 10 divides every class: shards are pure
    out = assign("shards", labels=labels, num_clients=50, shards_per_client=2)
    per_client = (histogram(out, labels, 50) > 0).sum(axis=1)
    assert per_client.max() <= 2
    assert (sizes(out, 50) == 20).all()
    out3 = assign("shards", labels=labels, num_clients=25, shards_per_client=4)
    assert (histogram(out3, labels, 25) > 0).sum(axis=1).max() <= 4
    # Unequal classes: a shard may straddle a class boundary, but never more than one extra label per shard.
    rnd = assign("shards", num_clients=100, shards_per_client=2)
    assert (histogram(rnd, LABELS, 100) > 0).sum(axis=1).max() <= 4
    assert mean_entropy(rnd, LABELS, 100) < 0.5 * mean_entropy(assign("iid", num_clients=100), LABELS, 100)


def test_lognormal_quantity_skew_labels_iid():
    def cv(x):
        return x.std() / x.mean()

    ln = sizes(assign("lognormal", num_clients=100, sigma=1.0), 100)
    assert cv(ln) > 0.5 and cv(sizes(assign("iid", num_clients=100), 100)) < 0.05
    assert cv(sizes(assign("lognormal", num_clients=100, sigma=2.0), 100)) > cv(ln)
    assert ln.min() >= 1 and ln.sum() == len(LABELS)
    out = assign("lognormal", num_clients=20, sigma=1.0)
    big = np.argsort(sizes(out, 20))[-5:]
    h = histogram(out, LABELS, 20)[big].astype(float)
    assert (h / h.sum(axis=1, keepdims=True)).max() < 0.3  # big clients' label mixes stay near 10 % each


def test_zipf_label_skew():
    out = assign("zipf", num_clients=50, s=1.5)
    h = histogram(out, LABELS, 50).astype(float)
    top = np.sort(h / h.sum(axis=1, keepdims=True), axis=1)[:, ::-1]
    # Zipf(1.5) over 10 classes puts ≈ 50 % on the top class and ≈ 18 % on the second.
    assert 0.35 < np.median(top[:, 0]) < 0.65
    assert np.median(top[:, 0]) > 2 * np.median(top[:, 1]) * 0.9
    s = sizes(out, 50)
    assert s.max() < 2 * s.min()  # sizes stay near-equal
    assert mean_entropy(assign("zipf", num_clients=50, s=3.0), LABELS, 50) < mean_entropy(out, LABELS, 50)
    # Different clients favour different classes.
    assert len(set(np.argmax(h, axis=1).tolist())) >= 8


@pytest.mark.parametrize("name, opts, key", [
    ("dirichlet", {"alpha": 0}, "partition.alpha"),
    ("dirichlet", {"alpha": -1.0}, "partition.alpha"),
    ("dirichlet", {"min_size": -1}, "partition.min_size"),
    ("shards", {"shards_per_client": 0}, "partition.shards_per_client"),
    ("lognormal", {"sigma": 0}, "partition.sigma"),
    ("zipf", {"s": 0}, "partition.s"),
    ("iid", {"alpha": 1}, "partition.alpha"),
])
def test_bad_params_name_the_key(name, opts, key):
    with pytest.raises(ConfigError) as e:
        assign(name, **opts)
    assert e.value.key == key


@pytest.mark.parametrize("name", NAMES)
def test_too_many_clients(name):
    with pytest.raises(ConfigError) as e:
        assign(name, labels=LABELS[:30], num_clients=31)
    assert e.value.key == "num_clients"


def test_shards_need_enough_rows():
    with pytest.raises(ConfigError) as e:
        assign("shards", labels=LABELS[:30], num_clients=20, shards_per_client=2)
    assert e.value.key == "num_clients"


@pytest.mark.parametrize("name, opts", [("iid", {}), ("dirichlet", {"alpha": 0.5}), ("shards", {}),
                                        ("lognormal", {}), ("zipf", {})])
def test_fast_at_scale(name, opts):
    labels = np.random.default_rng(0).integers(0, 10, 60_000)
    t = time.perf_counter()
    out = assign(name, labels=labels, num_clients=1000, **opts)
    assert time.perf_counter() - t < 2.0
    assert (out >= 0).all()
