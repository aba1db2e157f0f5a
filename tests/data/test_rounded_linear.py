"""rounded_linear (Adaptive-OU §4.1): Gaussian rows, labels round(xᵀβ) offset to 0, an even 90/10 client split."""

from __future__ import annotations

import numpy as np
import pytest

from turnout.config.components import validate_component
from turnout.core.errors import ConfigError
from turnout.data import rounded_linear
from turnout.data.registry import DATASETS

R = rounded_linear.RoundedLinearDataset


def build(seed: int = 0, **opts):
    _, cfg = validate_component(DATASETS, {"name": "rounded_linear", **opts}, "dataset")
    return R.build(cfg, seed)


@pytest.fixture(scope="module")
def paper():
    return build(0)


def test_registered():
    assert DATASETS.get("rounded_linear") is R
    assert R.__doc__.strip().splitlines()[0]


def test_paper_sizes_shapes_and_even_split(paper):
    assert paper.num_clients == 100 and paper.input_shape == (100,)
    assert paper.x_train.shape == (9000, 100) and paper.x_test.shape == (1000, 100)
    assert paper.x_train.dtype == np.float32 and paper.y_train.dtype == np.int64
    assert paper.n_train.tolist() == [90] * 100 and paper.n_test.tolist() == [10] * 100
    assert np.array_equal(paper.x_server_test, paper.x_test) and np.array_equal(paper.y_server_test, paper.y_test)
    assert paper.extras["beta"].shape == (100,)


def test_class_count_for_fixed_seeds_and_labels_start_at_zero(paper):
    y = np.concatenate([paper.y_train, paper.y_test])
    assert paper.num_classes == 67 and y.min() == 0 and y.max() == 66
    assert build(1).num_classes == 77 and build(2).num_classes == 72
    counts = np.bincount(y, minlength=paper.num_classes)
    assert counts.max() == 454  # the modal label (round(xᵀβ) = 0 ± a few) holds 4.5 % of the 10⁴ rows
    assert counts[0] >= 1 and counts[-1] >= 1  # the extremes are classes of their own, not merged


def test_labels_are_round_x_beta_offset_by_the_minimum(paper):
    x = np.concatenate([paper.x_train, paper.x_test]).astype(np.float64)
    y = np.concatenate([paper.y_train, paper.y_test])
    raw = x @ paper.extras["beta"].astype(np.float64)  # float32 copies: agree with the float64 draw except near .5
    off = y - np.rint(raw)
    assert np.mean(off == off[0]) > 0.999  # one offset for all rows: -min(round(xᵀβ))
    assert np.std(raw) == pytest.approx(np.linalg.norm(paper.extras["beta"]), rel=0.05)  # xᵀβ ~ N(0, ‖β‖²)


def test_hand_checked_labels():
    x = np.array([[1.0, 2.0], [0.26, -0.74], [-3.2, 0.1], [1.0, 0.0], [3.0, 0.2]])
    beta = np.array([0.5, 1.25])
    # 0.5 + 2.5 = 3; 0.13 - 0.925 = -0.795 -> -1; -1.6 + 0.125 = -1.475 -> -1; 0.5 -> 0 (ties to even); 1.75 -> 2
    assert rounded_linear.labels(x, beta).tolist() == [3, -1, -1, 0, 2]


def test_tiny_build_by_hand():
    d = build(3, num_samples=7, dim=2, num_clients=3)
    assert d.n_train.tolist() == [2, 1, 1] and d.n_test.tolist() == [1, 1, 1]  # sizes 3, 2, 2; int(0.9·n) train
    x = np.concatenate([d.x_train[0:2], d.x_test[0:1], d.x_train[2:3], d.x_test[1:2], d.x_train[3:4],
                        d.x_test[2:3]]).astype(np.float64)  # the rows in draw order
    y = np.concatenate([d.y_train[0:2], d.y_test[0:1], d.y_train[2:3], d.y_test[1:2], d.y_train[3:4], d.y_test[2:3]])
    b = d.extras["beta"].astype(np.float64)
    raw = np.array([round(float(r[0] * b[0] + r[1] * b[1])) for r in x])
    assert (y - (raw - raw.min())).tolist() == [0] * 7 and d.num_classes == int(raw.max() - raw.min()) + 1


def test_uneven_sizes_differ_by_at_most_one():
    assert rounded_linear.client_sizes(10_001, 100).tolist() == [101] + [100] * 99
    assert rounded_linear.client_sizes(7, 3).tolist() == [3, 2, 2]


def test_deterministic_per_seed_and_data_seed(paper):
    again = build(0)
    assert np.array_equal(paper.x_train, again.x_train) and np.array_equal(paper.y_train, again.y_train)
    other = build(1)
    assert not np.array_equal(paper.x_train, other.x_train)
    pinned = build(1, data_seed=0)
    assert np.array_equal(pinned.x_test, paper.x_test) and np.array_equal(pinned.y_test, paper.y_test)


def test_footprint_knows_shape_but_not_the_class_count():
    _, cfg = validate_component(DATASETS, {"name": "rounded_linear"}, "dataset")
    fp = R.footprint(cfg)
    assert fp.num_clients == 100 and fp.input_shape == (100,) and fp.num_classes is None
    assert fp.max_client_rows == 100 and fp.bytes == 10_000 * (100 * 16 + 24)


def test_bad_options_are_one_line_config_errors():
    with pytest.raises(ConfigError) as e:
        build(num_samples=150)  # 100 clients need 200 rows: one train and one test row each
    assert e.value.key == "dataset.num_samples" and "2 x num_clients (200)" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        build(dim=0)
    assert e.value.key == "dataset.dim"
    with pytest.raises(ConfigError) as e:
        build(num_classes=10)  # the class count comes from the labels
    assert e.value.key.startswith("dataset.num_classes")
