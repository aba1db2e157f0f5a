"""LEAF JSON loader: the FedProx fixture, own split vs. given test file, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from turnout.config.components import validate_component
from turnout.core.errors import ConfigError, DataError
from turnout.data import leaf
from turnout.data.registry import DATASETS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "leaf" / "synthetic_0.5_0.5_small.json"
L = leaf.LeafJsonDataset


def build(seed: int = 0, **opts):
    _, cfg = validate_component(DATASETS, {"name": "leaf_json", **opts}, "dataset")
    return L.build(cfg, seed)


def write(path: Path, obj) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


def tiny(users, counts, dim=3, label=lambda u, i: i % 3, offset=0.0):
    return {"users": users, "num_samples": counts,
            "user_data": {u: {"x": [[offset + 10 * j + i + 0.5] * dim for i in range(n)],
                              "y": [float(label(u, i)) for i in range(n)]}
                          for j, (u, n) in enumerate(zip(users, counts))}}


def test_fixture_loads():
    raw = json.loads(FIXTURE.read_text())
    d = build(train_path=str(FIXTURE))
    assert d.num_clients == 5
    assert d.client_names.tolist() == ["f_00000", "f_00001", "f_00002", "f_00003", "f_00004"]
    assert (d.n_train + d.n_test).tolist() == raw["num_samples"] == [5, 7, 40, 11, 6]
    # LEAF's rule: max(1, int(0.9 n)) train.
    assert d.n_train.tolist() == [4, 6, 36, 9, 5]
    assert d.train_offsets.tolist() == [0, 4, 10, 46, 55, 60]
    assert d.input_shape == (60,) and d.x_train.dtype == np.float32
    assert d.y_train.dtype == np.int64  # labels are floats (3.0) in the file
    assert d.num_classes == int(max(max(u["y"]) for u in raw["user_data"].values())) + 1
    # Every sample of user 2 lands in user 2's train or test part, with its own label.
    x2 = np.concatenate([d.client_train(2)[0], d.client_test(2)[0]])
    y2 = np.concatenate([d.client_train(2)[1], d.client_test(2)[1]])
    ref = raw["user_data"]["f_00002"]
    key = np.lexsort(x2.T[::-1])
    rkey = np.lexsort(np.array(ref["x"], dtype=np.float32).T[::-1])
    np.testing.assert_array_equal(x2[key], np.array(ref["x"], dtype=np.float32)[rkey])
    np.testing.assert_array_equal(y2[key], np.array(ref["y"]).astype(np.int64)[rkey])
    np.testing.assert_array_equal(d.y_server_test, d.y_test)


def test_split_is_deterministic_per_seed():
    a, b, c = build(0, train_path=str(FIXTURE)), build(0, train_path=str(FIXTURE)), build(1, train_path=str(FIXTURE))
    np.testing.assert_array_equal(a.x_test, b.x_test)
    assert not np.array_equal(a.x_test, c.x_test)


def test_train_fraction_and_num_classes_and_shape(tmp_path):
    p = write(tmp_path / "a.json", tiny(["u0", "u1"], [10, 1], dim=4))
    d = build(train_path=p, train_fraction=0.5, num_classes=7, input_shape=[2, 2])
    assert d.n_train.tolist() == [5, 1] and d.n_test.tolist() == [5, 0]
    assert d.num_classes == 7 and d.input_shape == (2, 2) and d.x_train.shape[1:] == (2, 2)
    assert d.x_server_test.shape[1:] == (2, 2)
    with pytest.raises(DataError, match="input_shape"):
        build(train_path=p, input_shape=[3, 3])
    with pytest.raises(DataError, match="num_classes"):
        build(train_path=p, num_classes=2)


def test_train_and_test_files(tmp_path):
    tr = write(tmp_path / "train.json", tiny(["a", "b", "c"], [4, 2, 3]))
    # Different user order, user "c" missing, extra test-only user "z".
    te = tiny(["b", "z", "a"], [1, 2, 3], offset=1000.0)
    te["hierarchies"] = ["p", "q", "r"]
    te_path = write(tmp_path / "test.json", te)
    d = build(train_path=tr, test_path=te_path)
    assert d.client_names.tolist() == ["a", "b", "c"]
    assert d.n_train.tolist() == [4, 2, 3]
    assert d.n_test.tolist() == [3, 1, 0]
    # Client "a"'s test rows are the test file's "a" rows (x = 1000 + 10*2 + i + 0.5).
    np.testing.assert_allclose(d.client_test(0)[0][:, 0], [1020.5, 1021.5, 1022.5])
    np.testing.assert_allclose(d.client_test(1)[0][:, 0], [1000.5])
    # Server test pools every test sample, test-only users included.
    assert len(d.y_server_test) == 6


def test_missing_file_is_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        build(train_path=str(tmp_path / "nope.json"))
    assert e.value.key == "dataset.train_path"
    assert "file not found" in str(e.value) and "LEAF JSON" in str(e.value)
    with pytest.raises(ConfigError) as e:
        build(train_path=str(FIXTURE), test_path=str(tmp_path / "nope.json"))
    assert e.value.key == "dataset.test_path"
    with pytest.raises(ConfigError) as e:
        build()
    assert e.value.key == "dataset.train_path"


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"users": ["a"], "num_samples": [1]}), "missing key 'user_data'"),
    (json.dumps({"users": ["a", "b"], "num_samples": [1], "user_data": {}}), "num_samples has 1"),
    (json.dumps({"users": ["a"], "num_samples": [2], "user_data": {"a": {"x": [[1.0]], "y": [0]}}}),
     "num_samples says 2"),
    (json.dumps({"users": ["a"], "num_samples": [1], "user_data": {}}), "no x/y for user 'a'"),
    (json.dumps({"users": ["a"], "num_samples": [2], "user_data": {"a": {"x": [[1.0], [1.0, 2.0]], "y": [0, 1]}}}),
     "same length"),
    (json.dumps({"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [[1.0]], "y": [0.5]}}}),
     "whole-number"),
    (json.dumps({"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": ["hello"], "y": ["o"]}}}),
     "shakespeare"),
])
def test_malformed_files_are_one_line_data_errors(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(DataError) as e:
        build(train_path=str(p))
    msg = str(e.value)
    assert needle in msg and str(p) in msg and "\n" not in msg


def test_feature_mismatch_between_files(tmp_path):
    tr = write(tmp_path / "train.json", tiny(["a"], [3], dim=3))
    te = write(tmp_path / "test.json", tiny(["a"], [2], dim=4))
    with pytest.raises(DataError, match="features"):
        build(train_path=tr, test_path=te)
