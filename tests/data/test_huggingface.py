"""Hugging Face datasets built on the fly (images, text, labels, writer ids), saved to disk and as parquet, loaded
through experiment files: shapes, labels, the natural partition, Dirichlet, training through the CLI. Offline."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml

datasets = pytest.importorskip("datasets")

from turnout.app.cli import main  # noqa: E402
from turnout.config.components import validate_component  # noqa: E402
from turnout.core.errors import ConfigError  # noqa: E402
from turnout.data.registry import DATASETS  # noqa: E402
from turnout.data.shakespeare import LEAF_VOCAB  # noqa: E402
from turnout.runs.experiment import prepare  # noqa: E402
from turnout.sim.composition import expand, load_experiment  # noqa: E402

#: 12 writers holding 5, 6, ..., 16 samples: 126 rows.
WRITERS = np.repeat([f"f{i:04d}" for i in range(12)], np.arange(5, 17))
N = len(WRITERS)


def _pixels(label: int, i: int) -> np.ndarray:
    """A 28×28 image whose pixels encode its label and row (so a test can tell rows apart after loading)."""
    px = np.full((28, 28), label * 20, dtype=np.uint8)
    px[0, :2] = (i // 256, i % 256)
    return px


def _dataset(n: int = N, writers=WRITERS, seed: int = 0):
    from PIL import Image

    labels = np.random.default_rng(seed).integers(0, 10, n)
    feats = datasets.Features({"image": datasets.Image(), "text": datasets.Value("string"),
                               "next": datasets.Value("string"),
                               "label": datasets.ClassLabel(names=[f"c{k}" for k in range(10)]),
                               "writer_id": datasets.Value("string")})
    return datasets.Dataset.from_dict({
        "image": [Image.fromarray(_pixels(int(y), i)) for i, y in enumerate(labels)],
        "text": [f"to be or not {i}" for i in range(n)], "next": [str(i % 10) for i in range(n)],
        "label": labels.tolist(), "writer_id": list(writers[:n])}, features=feats), labels


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict:
    """The same rows saved three ways: save_to_disk (a DatasetDict with a test split) and parquet files."""
    root = tmp_path_factory.mktemp("hf")
    train, labels = _dataset()
    test, test_labels = _dataset(30, np.repeat(["t"], 30), seed=1)
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(root / "dict"))
    train.save_to_disk(str(root / "single"))
    (root / "pq" / "data").mkdir(parents=True)
    train.to_parquet(str(root / "pq" / "data" / "train-00000-of-00001.parquet"))
    test.to_parquet(str(root / "pq" / "data" / "test-00000-of-00001.parquet"))
    return {"root": root, "labels": labels, "test_labels": test_labels}


def build(model: str = "cnn_fedsum_mnist", **data):
    variants = expand({"name": "hf", "rounds": 1, "data": {"name": "huggingface", **data}, "model": {"name": model}},
                      None)
    plan = prepare(variants)
    return plan.dataset_for(variants[0], 0)


@pytest.mark.parametrize("where", ["dict", "pq"])
def test_natural_partition_is_one_client_per_writer_with_the_writers_counts(stored, where):
    d = build(path=str(stored["root"] / where), test_split="test", client_id="writer_id", client_test_fraction=0.2)
    assert d.num_clients == 12
    np.testing.assert_array_equal(d.client_names, [f"f{i:04d}" for i in range(12)])
    np.testing.assert_array_equal(d.n_train + d.n_test, np.arange(5, 17))
    np.testing.assert_array_equal(d.n_test, np.floor(np.arange(5, 17) * 0.2).astype(int))
    assert d.x_train.dtype == np.uint8 and d.x_train.shape[1:] == (1, 28, 28) and d.input_shape == (1, 28, 28)
    assert d.num_classes == 10 and d.y_train.dtype == np.int64
    # Every row kept its own label and landed with its own writer: the pixels carry both.
    for k in range(d.num_clients):
        x, y = d.client_train(k)
        rows = x[:, 0, 0, 0].astype(int) * 256 + x[:, 0, 0, 1]
        np.testing.assert_array_equal(y, stored["labels"][rows])
        np.testing.assert_array_equal(WRITERS[rows], d.client_names[k])
        np.testing.assert_array_equal(x[:, 0, 5, 5], y * 20)
    assert len(d.y_server_test) == 30
    np.testing.assert_array_equal(d.y_server_test, stored["test_labels"])
    assert d.input_scaling is not None and d.input_scaling.scale == 255.0


def test_saved_dataset_and_parquet_give_the_same_arrays(stored):
    common = dict(test_split="test", partition={"name": "dirichlet", "alpha": 0.5}, num_clients=6)
    a = build(path=str(stored["root"] / "dict"), **common)
    b = build(path=str(stored["root"] / "pq"), **common)
    for f in ("x_train", "y_train", "train_offsets", "x_test", "x_server_test", "y_server_test"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_dirichlet_partition_with_a_held_out_server_fraction(stored):
    d = build(path=str(stored["root"] / "single"), num_clients=6, test_fraction=0.25, client_test_fraction=0.0,
              partition={"name": "dirichlet", "alpha": 0.3, "min_size": 2})
    assert d.num_clients == 6 and d.client_names is None
    assert len(d.y_server_test) == round(0.25 * N) and d.n_train.sum() == N - round(0.25 * N)
    assert (d.n_train >= 2).all()
    # Label skew: at alpha 0.3 clients hold few classes each, far from the 10 an IID split gives 20-row clients.
    hist = d.label_histogram()
    assert (hist > 0).sum(axis=1).mean() < 8
    # Server and client rows are disjoint and together are every row once.
    rows = np.concatenate([x[:, 0, 0, 0].astype(int) * 256 + x[:, 0, 0, 1] for x in (d.x_train, d.x_server_test)])
    assert sorted(rows) == list(range(N))
    again = build(path=str(stored["root"] / "single"), num_clients=6, test_fraction=0.25, client_test_fraction=0.0,
                  partition={"name": "dirichlet", "alpha": 0.3, "min_size": 2})
    np.testing.assert_array_equal(d.x_train, again.x_train)


def test_text_column_becomes_char_ids_for_char_lstm(stored):
    d = build("char_lstm", path=str(stored["root"] / "dict"), input="text", label="next", seq_len=20,
              test_split="test", client_id="writer_id")
    assert d.x_train.dtype == np.uint8 and d.input_shape == (20,) and d.input_scaling is None
    assert d.num_classes == len(LEAF_VOCAB) + 1  # the next character is a class of the same alphabet
    x, y = d.client_train(0)
    for row, label in zip(x, y):
        text = "".join(LEAF_VOCAB[i] for i in row)
        assert text.startswith(" ") and text.lstrip().startswith("to be or not ")
        # "to be or not 17" is followed by "7": the label is the character id of row i's i % 10
        assert LEAF_VOCAB[label] == str(int(text.split()[-1]) % 10)


def test_max_clients_and_min_size(stored):
    d = build(path=str(stored["root"] / "dict"), test_split="test", client_id="writer_id",
              partition={"name": "natural", "min_size": 10, "max_clients": 4})
    assert d.num_clients == 4
    assert set(d.client_names) <= {f"f{i:04d}" for i in range(5, 12)}  # writers with >= 10 rows
    counts = dict(zip([f"f{i:04d}" for i in range(12)], range(5, 17)))
    np.testing.assert_array_equal(d.n_train + d.n_test, [counts[n] for n in d.client_names])


def _yaml(tmp_path: Path, data: dict, **top) -> Path:
    cfg = {"name": "hf", "rounds": 3, "seeds": [0], "data": {"name": "huggingface", **data},
           "model": {"name": "cnn_fedsum_mnist"}, "selector": {"name": "uniform", "clients_per_round": 4},
           "train": {"batch_size": 5, "local_steps": 3, "lr": 0.05}, "eval": {"every": 1},
           "output": {"plots": False, "progress": False}, **top}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_training_runs_and_evaluates_through_the_cli(stored, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exp = _yaml(tmp_path, {"path": str(stored["root"] / "dict"), "test_split": "test", "client_id": "writer_id"})
    assert main(["check", str(exp), "--data"]) == 0
    assert main(["run", str(exp), "--quiet", "--out", str(tmp_path / "runs")]) == 0
    import pandas as pd

    rounds = pd.read_csv(next((tmp_path / "runs").rglob("rounds.csv")))
    acc = rounds["accuracy"].dropna()
    assert len(acc) == 3 and ((acc >= 0) & (acc <= 1)).all()
    assert rounds["loss"].dropna().gt(0).all()
    clients = pd.read_csv(next((tmp_path / "runs").rglob("clients.csv")))
    assert len(clients) == 12


def test_uint8_images_reach_the_model_as_pixel_over_255(stored):
    import torch

    d = build(path=str(stored["root"] / "dict"), test_split="test", client_id="writer_id",
              normalize={"mean": [0.5], "std": [0.25]})
    seen = {}
    module = torch.nn.Flatten()
    module.register_forward_hook(lambda m, args, out: seen.setdefault("x", args[0]))
    d.input_scaling.attach(module)
    module(torch.from_numpy(d.x_train[:3]))
    expect = (torch.from_numpy(d.x_train[:3]).float() / 255 - 0.5) / 0.25
    assert seen["x"].dtype == torch.float32
    torch.testing.assert_close(seen["x"], expect, rtol=0, atol=0)


def test_bad_blocks_are_refused_with_one_line(stored, tmp_path):
    root = stored["root"]
    cases = [
        ({"path": str(root / "dict"), "label": "digit"}, "data.label = 'digit': no such column"),
        ({"path": str(root / "dict"), "client_id": "author"}, "data.client_id = 'author': no such column"),
        ({"path": str(root / "nowhere")}, "data.path"),
        ({}, "give exactly one of path"),
        ({"path": str(root / "dict"), "hub_id": "x/y"}, "give exactly one of path"),
        ({"path": str(root / "dict"), "split": "validation"}, "has the splits train, test"),
        ({"path": str(root / "dict"), "client_id": "writer_id", "num_clients": 5}, "partition.max_clients"),
        ({"path": str(root / "dict"), "partition": {"name": "natural"}}, "data.partition.by"),
        ({"hub_id": "../../etc/passwd"}, "data.hub_id = '../../etc/passwd': a hub id is namespace/name"),
        ({"hub_id": "/etc/passwd"}, "data.hub_id = '/etc/passwd': a hub id is namespace/name"),
        ({"hub_id": "a/b/c"}, "e.g. flwrlabs/femnist; a local folder goes in data.path"),
    ]
    for data, needle in cases:
        with pytest.raises(ConfigError) as exc:
            validate_component(DATASETS, {"name": "huggingface", **data}, "data")
        assert needle in str(exc.value) and "\n" not in str(exc.value), (data, str(exc.value))


def test_natural_partition_needs_a_dataset_with_columns():
    with pytest.raises(ConfigError, match="data: {name: huggingface, client_id: COLUMN}"):
        expand({"data": {"name": "digits", "partition": {"name": "natural", "by": "w"}}}, None)


def test_without_datasets_the_block_is_refused_naming_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    with pytest.raises(ConfigError) as exc:
        validate_component(DATASETS, {"name": "huggingface", "hub_id": "flwrlabs/femnist"}, "data")
    assert str(exc.value).startswith("data.name = 'huggingface': needs the Hugging Face `datasets` library")
    assert "turnout[huggingface]" in str(exc.value)


def test_hub_experiment_files_validate_without_downloading(monkeypatch, tmp_path):
    """`turnout check` on the papers' hub files reads nothing from the hub (the cache is empty and offline)."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    files = sorted((Path(__file__).resolve().parents[2] / "experiments" / "hub").glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        variants = load_experiment(f)
        assert variants[0]["data"].cfg.hub_id
        assert main(["check", str(f)]) == 0
    assert not (tmp_path / "hf-home").exists() or not any((tmp_path / "hf-home").rglob("*.arrow"))
    assert os.environ["HF_DATASETS_OFFLINE"] == "1"


def test_a_dataset_loaded_by_load_dataset_reads_its_cache_files(stored, tmp_path, monkeypatch):
    """The hub branch (``load_dataset``) on a local parquet folder: the rows come from the cache's Arrow files.
    (A config's hub_id must look like namespace/name; here the folder stands in for the hub, so that check is
    lifted: it is tested below.)"""
    from turnout.data import hf_source, huggingface

    monkeypatch.setattr(huggingface, "is_hub_id", lambda _: True)
    monkeypatch.setattr(hf_source, "hub_unreachable", lambda *a: None)  # a folder needs no hub: load it as online
    a = build(hub_id=str(stored["root"] / "pq"), cache_dir=str(tmp_path / "cache"), test_split="test",
              client_id="writer_id")
    b = build(path=str(stored["root"] / "dict"), test_split="test", client_id="writer_id")
    assert any((tmp_path / "cache").rglob("*.arrow"))
    for f in ("x_train", "y_train", "train_offsets", "x_server_test", "client_names"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_the_memory_estimate_knows_a_local_sets_size_and_a_hub_id_is_not_fetched(stored):
    from turnout.data.huggingface import ROW_OVERHEAD, HuggingFaceDataset

    _, cfg = validate_component(DATASETS, {"name": "huggingface", "path": str(stored["root"] / "dict"),
                                           "test_split": "test", "client_id": "writer_id"}, "data")
    fp = HuggingFaceDataset.footprint(cfg)
    assert fp.bytes == (N + 30) * (28 * 28 + ROW_OVERHEAD) and fp.driver == "path"
    assert fp.input_shape == (1, 28, 28) and fp.num_classes == 10 and fp.num_clients is None
    _, hub = validate_component(DATASETS, {"name": "huggingface", "hub_id": "flwrlabs/femnist",
                                           "client_id": "writer_id"}, "data")
    assert HuggingFaceDataset.footprint(hub) is None


def test_an_audio_column_is_refused_with_one_line(tmp_path):
    ds = datasets.Dataset.from_dict({"audio": [{"bytes": b"RIFF", "path": None}] * 4, "label": [0, 1, 0, 1]})
    ds.cast_column("audio", datasets.Audio()).save_to_disk(str(tmp_path / "speech"))
    with pytest.raises(ConfigError) as exc:
        validate_component(DATASETS, {"name": "huggingface", "path": str(tmp_path / "speech"), "input": "audio"},
                           "data")
    assert str(exc.value).startswith("data.input = 'audio': is an audio column; audio is not supported")


def test_a_split_without_rows_null_ids_and_image_ids_are_refused_in_one_line(stored, tmp_path):
    """Odd data a user may hold: each is refused naming the key, never an unexpected error (run through the CLI)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(stored["root"] / "pq" / "data" / "train-00000-of-00001.parquet")
    empty = tmp_path / "empty" / "data"
    empty.mkdir(parents=True)
    pq.write_table(table.slice(0, 0), empty / "train-00000-of-00001.parquet")
    nulls = tmp_path / "nulls" / "data"
    nulls.mkdir(parents=True)
    writers = table.column("writer_id").to_pylist()
    writers[3] = writers[7] = None
    pq.write_table(table.set_column(table.schema.get_field_index("writer_id"), "writer_id",
                                    pa.array(writers, pa.string())), nulls / "train-00000-of-00001.parquet")
    cases = [
        ({"path": str(tmp_path / "empty")}, "data.split = 'train': ", "the split has no rows"),
        ({"path": str(tmp_path / "nulls"), "client_id": "writer_id"}, "data.client_id = 'writer_id': ",
         "2 of 126 rows have no value (null)"),
        ({"path": str(stored["root"] / "pq"), "partition": {"name": "natural", "by": "image"}},
         "data.partition.by = 'image': ", "not ids (integers or strings)"),
    ]
    for data, key, needle in cases:
        cfg = tmp_path / "exp.yaml"
        cfg.write_text(yaml.safe_dump({"name": "odd", "rounds": 1, "data": {"name": "huggingface", **data},
                                       "model": {"name": "logreg"}, "output": {"progress": False}}))
        out = tmp_path / f"run{len(key)}"
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["run", str(cfg), "--quiet", "--out", str(out)])
        lines = err.getvalue().strip().splitlines()
        assert rc == 2 and len(lines) == 1 and key in lines[0] and needle in lines[0], (data, err.getvalue())
        assert not out.exists()


def test_an_option_that_cannot_apply_and_an_all_nan_input_are_refused(stored, tmp_path):
    """input_shape on an image column is refused (never silently ignored); a feature column that is entirely NaN
    does not train without a word."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pytest.raises(ConfigError) as exc:
        build(path=str(stored["root"] / "dict"), test_split="test", input_shape=[3, 32, 32])
    assert str(exc.value).startswith("data.input_shape = [3, 32, 32]: reshapes array columns only; 'image' holds "
                                     "images of shape [1, 28, 28]")
    folder = tmp_path / "nan" / "data"
    folder.mkdir(parents=True)
    n = 40
    pq.write_table(pa.table({"x": pa.array([[float("nan")] * 4] * n, pa.list_(pa.float32())),
                             "label": pa.array(np.arange(n) % 2, pa.int64())}), folder / "train-00000-of-00001.parquet")
    with pytest.raises(ConfigError) as exc:
        build(model="logreg", path=str(tmp_path / "nan"), input="x", num_clients=2, num_classes=2)
    assert str(exc.value).startswith("data.input = 'x': has no finite value") and "\n" not in str(exc.value)
