"""IDX reader and the MNIST / Fashion-MNIST datasets, on tiny IDX files written here."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

import turnout.data.partition  # noqa: F401  (registers the partitioners split_pool uses)
from turnout.config.components import validate_component
from turnout.core.errors import ConfigError, DataError
from turnout.data.idx import FASHION_MNIST_HINT, IDX_DTYPES, MNIST_HINT, FashionMnistDataset, MnistDataset, read_idx
from turnout.data.registry import DATASETS

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
CODE_OF = {np.dtype(v).newbyteorder("="): k for k, v in IDX_DTYPES.items()}


def idx_bytes(arr: np.ndarray) -> bytes:
    """An IDX file's bytes for ``arr`` (type code from its dtype, big-endian)."""
    arr = np.asarray(arr)
    code = CODE_OF[arr.dtype.newbyteorder("=")]
    header = bytes([0, 0, code, arr.ndim]) + np.array(arr.shape, dtype=">u4").tobytes()
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, arr: np.ndarray, gz: bool = False) -> Path:
    data = idx_bytes(arr)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def make_mnist_dir(root: Path, n_train: int = 50, n_test: int = 20, gz_train: bool = True, gz_test: bool = False):
    """Four tiny MNIST-like files: train gzipped, t10k raw by default (both code paths at once)."""
    r = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": r.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": (np.arange(n_train) % 10).astype(np.uint8),
        "t10k-images-idx3-ubyte": r.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": (np.arange(n_test) * 3 % 10).astype(np.uint8),
    }
    root.mkdir(parents=True, exist_ok=True)
    for stem, arr in arrays.items():
        write_idx(root / stem, arr, gz=gz_train if stem.startswith("train") else gz_test)
    return arrays


def build_mnist(path: Path, seed: int = 0, **opts):
    cls, cfg = validate_component(DATASETS, {"name": "mnist", "path": str(path), **opts}, "data")
    assert cls is MnistDataset
    return cls.build(cfg, seed)


# ---------------------------------------------------------------- read_idx


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("dtype", ["u1", "i1", "i2", "i4", "f4", "f8"])
def test_read_idx_roundtrips_every_type_code(tmp_path, gz, dtype):
    r = np.random.default_rng(1)
    arr = (r.standard_normal((3, 4, 5)) * 100).astype(dtype)
    p = write_idx(tmp_path / "a-idx3", arr, gz=gz)
    out = read_idx(p)
    assert out.dtype == np.dtype(dtype).newbyteorder("=")
    assert out.shape == (3, 4, 5)
    np.testing.assert_array_equal(out, arr)
    out[0, 0, 0] = 1  # writable, not a view of the file's bytes


def test_read_idx_checks_expected_magic(tmp_path):
    p = write_idx(tmp_path / "labels", np.arange(7, dtype=np.uint8))
    assert read_idx(p, 0x801).tolist() == list(range(7))
    with pytest.raises(DataError, match=r"labels.*0x00000801, expected 0x00000803"):
        read_idx(p, 0x803)


def test_read_idx_truncated_raw_names_file(tmp_path):
    p = tmp_path / "train-images-idx3-ubyte"
    p.write_bytes(idx_bytes(np.zeros((10, 28, 28), np.uint8))[:-100])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.*truncated.*7840.*7740"):
        read_idx(p)


def test_read_idx_truncated_header_and_gzip(tmp_path):
    p = tmp_path / "short"
    p.write_bytes(b"\x00\x00\x08\x03\x00\x00")  # magic promises 3 dims, only 2 bytes follow
    with pytest.raises(DataError, match="short: truncated"):
        read_idx(p)
    g = tmp_path / "cut.gz"
    noise = np.random.default_rng(0).integers(0, 256, (50, 28, 28), dtype=np.uint8)
    full = gzip.compress(idx_bytes(noise))
    g.write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError, match="cut.gz"):
        read_idx(g)


@pytest.mark.parametrize("head", [b"\x01\x00\x08\x01", b"\x00\x00\x0a\x01", b"\x00\x00\x07\x01", b"PK\x03\x04"])
def test_read_idx_bad_magic(tmp_path, head):
    p = tmp_path / "bad"
    p.write_bytes(head + np.array([4], ">u4").tobytes() + bytes(4))
    with pytest.raises(DataError, match="bad: bad IDX magic"):
        read_idx(p)


def test_read_idx_trailing_bytes_and_missing_file(tmp_path):
    p = tmp_path / "long"
    p.write_bytes(idx_bytes(np.zeros(4, np.uint8)) + b"xx")
    with pytest.raises(DataError, match="long: IDX file has 2 bytes after"):
        read_idx(p)
    with pytest.raises(DataError, match="nope"):
        read_idx(tmp_path / "nope")


# ---------------------------------------------------------------- mnist dataset


def test_mnist_loads_gz_and_raw_files(tmp_path):
    arrays = make_mnist_dir(tmp_path / "m")
    ds = build_mnist(tmp_path / "m", num_clients=5, client_test_fraction=0.2)
    assert ds.name == "mnist" and ds.num_classes == 10 and ds.num_clients == 5
    assert ds.input_shape == (1, 28, 28)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert len(ds.x_train) + len(ds.x_test) == 50
    assert ds.n_test.tolist() == [2] * 5  # 10 rows per client (iid), floor(0.2·10) local test rows
    # Server test = the t10k files, in order, scaled to [0, 1].
    np.testing.assert_array_equal(ds.x_server_test[:, 0],
                                  arrays["t10k-images-idx3-ubyte"].astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(ds.y_server_test, arrays["t10k-labels-idx1-ubyte"])
    # Every training image ends up at exactly one client, with its own label.
    x_all = np.concatenate([ds.x_train, ds.x_test])[:, 0]
    y_all = np.concatenate([ds.y_train, ds.y_test])
    u8 = np.rint(x_all * 255).astype(np.uint8)
    assert np.abs(x_all * 255 - u8).max() < 1e-3
    src = arrays["train-images-idx3-ubyte"].reshape(50, -1)
    row_of = {bytes(r): i for i, r in enumerate(src)}
    idx = [row_of[bytes(r)] for r in u8.reshape(len(u8), -1)]
    assert sorted(idx) == list(range(50))
    np.testing.assert_array_equal(y_all, arrays["train-labels-idx1-ubyte"][idx])
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0


def test_mnist_all_raw_and_all_gz_give_same_data(tmp_path):
    make_mnist_dir(tmp_path / "raw", gz_train=False, gz_test=False)
    make_mnist_dir(tmp_path / "gz", gz_train=True, gz_test=True)
    a, b = build_mnist(tmp_path / "raw", num_clients=3), build_mnist(tmp_path / "gz", num_clients=3)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)


def test_mnist_limits_take_random_subsets(tmp_path):
    arrays = make_mnist_dir(tmp_path / "m")
    ds = build_mnist(tmp_path / "m", num_clients=2, limit_train=30, limit_test=7, seed=3)
    assert len(ds.x_train) + len(ds.x_test) == 30
    assert len(ds.x_server_test) == 7
    test_src = {bytes(r) for r in arrays["t10k-images-idx3-ubyte"].reshape(20, -1)}
    assert all(bytes(r) in test_src for r in np.rint(ds.x_server_test * 255).astype(np.uint8).reshape(7, -1))
    again = build_mnist(tmp_path / "m", num_clients=2, limit_train=30, limit_test=7, seed=3)
    np.testing.assert_array_equal(ds.x_server_test, again.x_server_test)
    other = build_mnist(tmp_path / "m", num_clients=2, limit_train=30, limit_test=7, seed=4)
    assert not np.array_equal(ds.x_server_test, other.x_server_test)
    big = build_mnist(tmp_path / "m", num_clients=2, limit_train=10_000)  # a limit above the size keeps all
    assert len(big.x_train) + len(big.x_test) == 50
    with pytest.raises(ConfigError, match="data.limit_train"):
        build_mnist(tmp_path / "m", limit_train=0)


def test_mnist_missing_dir_or_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_mnist(tmp_path / "absent")
    msg = str(e.value)
    assert msg.startswith("data.path = ") and "does not exist" in msg and MNIST_HINT in msg and "\n" not in msg
    make_mnist_dir(tmp_path / "m")
    (tmp_path / "m" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(ConfigError, match=r"has no t10k-labels-idx1-ubyte \(or t10k-labels-idx1-ubyte.gz\)"):
        build_mnist(tmp_path / "m")
    with pytest.raises(ConfigError, match=r"data.path = .*required key is missing"):
        validate_component(DATASETS, {"name": "mnist"}, "data")


def test_mnist_damaged_files_raise_data_error(tmp_path):
    make_mnist_dir(tmp_path / "m")
    lbl = tmp_path / "m" / "t10k-labels-idx1-ubyte"
    lbl.write_bytes(idx_bytes(np.zeros((20, 28, 28), np.uint8)))  # an images file where labels belong
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte: IDX magic number 0x00000803, expected 0x00000801"):
        build_mnist(tmp_path / "m")
    lbl.write_bytes(idx_bytes(np.zeros(19, np.uint8)))
    with pytest.raises(DataError, match="20 images but .* 19 labels"):
        build_mnist(tmp_path / "m")
    lbl.write_bytes(idx_bytes(np.full(20, 10, np.uint8)))
    with pytest.raises(DataError, match="label 10 is outside 0..9"):
        build_mnist(tmp_path / "m")


def test_fashion_mnist_missing_path_says_how_to_install(tmp_path):
    with pytest.raises(ConfigError) as e:
        validate_component(DATASETS, {"name": "fashion_mnist", "path": str(tmp_path / "x")}, "data")
    assert "apt-get install dataset-fashion-mnist" in str(e.value) and FASHION_MNIST_HINT in str(e.value)
    make_mnist_dir(tmp_path / "f")
    cls, cfg = validate_component(DATASETS, {"name": "fashion_mnist", "path": str(tmp_path / "f"),
                                             "num_clients": 4}, "data")
    assert cls is FashionMnistDataset
    ds = cls.build(cfg, 0)
    assert ds.name == "fashion_mnist" and len(ds.x_server_test) == 20


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="Debian package dataset-fashion-mnist is not installed")
def test_real_fashion_mnist():
    labels = read_idx(FASHION_DIR / "train-labels-idx1-ubyte.gz", 0x801)
    assert labels.shape == (60000,)
    assert np.bincount(labels).tolist() == [6000] * 10
    assert np.bincount(read_idx(FASHION_DIR / "t10k-labels-idx1-ubyte.gz", 0x801)).tolist() == [1000] * 10
    cls, cfg = validate_component(DATASETS, {"name": "fashion_mnist"}, "data")  # default path
    ds = cls.build(cfg, 0)
    assert len(ds.x_train) + len(ds.x_test) == 60000
    assert ds.x_server_test.shape == (10000, 1, 28, 28) and ds.x_train.shape[1:] == (1, 28, 28)
    assert ds.x_train.dtype == np.float32 and float(ds.x_train.max()) == 1.0 and float(ds.x_train.min()) == 0.0
    assert np.bincount(np.concatenate([ds.y_train, ds.y_test])).tolist() == [6000] * 10
    assert ds.num_clients == 100 and ds.n_train.sum() == 54000
