"""Local datasets as the fuzzing (tests/fuzz) wrote them when it found a defect: each is now a clean run, or refused in
one line naming the key (exit 2, no traceback, no run folder)."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import yaml

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from turnout.app.cli import main  # noqa: E402
from turnout.runs.experiment import prepare  # noqa: E402
from turnout.sim.composition import expand  # noqa: E402

N = 20


def floats(n: int = N) -> "pa.Array":
    return pa.array([[float(i), 1.0] for i in range(n)], pa.list_(pa.float32()))


def labels(n: int = N) -> "pa.Array":
    return pa.array(np.arange(n) % 2, pa.int64())


def write_ipc(path, t: "pa.Table") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)


def write_parquet(path, t: "pa.Table") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, path)


def png(side: int, value: int = 7) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((side, side), value, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def image_table(cells: list) -> "pa.Table":
    t = pa.table({"x": pa.array(cells, pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                  "label": labels(len(cells))})
    feats = datasets.Features({"x": datasets.Image(), "label": datasets.Value("int64")})
    return t.replace_schema_metadata({"huggingface": feats.arrow_schema.metadata[b"huggingface"]})


def run(tmp_path, capsys, data: dict, model: str = "logreg") -> tuple[int, str]:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump({"name": "odd", "rounds": 1, "seeds": [0],
                                   "data": {"name": "huggingface", "path": str(tmp_path / "ds"), "input": "x", **data},
                                   "model": {"name": model}, "selector": {"name": "uniform", "clients_per_round": 1},
                                   "output": {"progress": False, "plots": False}}))
    capsys.readouterr()
    rc = main(["run", str(cfg), "--quiet", "--out", str(tmp_path / "run")])
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    if rc == 2:
        assert captured.err.count("\n") == 1 and not (tmp_path / "run").exists(), captured.err
    return rc, captured.err.strip()


def refused(tmp_path, capsys, data: dict, start: str, *needles: str) -> str:
    rc, err = run(tmp_path, capsys, data)
    assert rc == 2 and err.startswith(f"turnout: error: {start}"), err
    for n in needles:
        assert n in err, err
    return err


def test_an_image_cut_short_is_refused_naming_the_input(tmp_path, capsys):
    cells = [{"bytes": png(4), "path": None} for _ in range(N)]
    cells[7] = {"bytes": cells[7]["bytes"][:45], "path": None}  # the header reads, the pixels are cut
    write_parquet(tmp_path / "ds" / "train.parquet", image_table(cells))
    refused(tmp_path, capsys, {"num_clients": 2}, "data.input = 'x': an image cannot be decoded (image file is "
                                                  "truncated); drop or replace it")


def test_an_image_without_bytes_or_a_file_is_refused_naming_the_input(tmp_path, capsys):
    cells = [{"bytes": png(4), "path": None} for _ in range(N)]
    cells[3] = {"bytes": None, "path": "/dev/zero"}  # not a file: never opened
    write_parquet(tmp_path / "ds" / "train.parquet", image_table(cells))
    refused(tmp_path, capsys, {"num_clients": 2}, "data.input = 'x': an image cannot be decoded (a row's image has "
                                                  "no bytes, and its path '/dev/zero' is no file)")


def test_a_test_split_of_another_kind_is_refused_naming_it(tmp_path, capsys):
    write_parquet(tmp_path / "ds" / "train.parquet", image_table([{"bytes": png(4), "path": None}] * N))
    write_parquet(tmp_path / "ds" / "test.parquet", pa.table({"x": pa.array(["to be"] * 4), "label": labels(4)}))
    refused(tmp_path, capsys, {"num_clients": 2, "test_split": "test"},
            "data.test_split = 'test': its 'x' column holds text data, split 'train''s image; give splits of one kind")


def test_test_split_labels_of_another_type_are_refused_naming_the_label(tmp_path, capsys):
    write_parquet(tmp_path / "ds" / "train.parquet", pa.table({"x": floats(), "label": labels()}))
    write_parquet(tmp_path / "ds" / "test.parquet", pa.table({"x": floats(4), "label": pa.array(["a"] * 4)}))
    refused(tmp_path, capsys, {"num_clients": 2, "test_split": "test"},
            "data.label = 'label': holds int64 values in the split but string values in the test split")


@pytest.mark.parametrize("values,t,needle", [
    ([0, 2**63] * (N // 2), "uint64", "holds label 9223372036854775808; class ids are 0 to 999,999"),
    ([0, 10**12] * (N // 2), "int64", "holds label 1000000000000; class ids are 0 to 999,999"),
])
def test_a_label_beyond_any_class_count_is_refused_before_a_model_is_built(tmp_path, capsys, values, t, needle):
    """Before, 10^12 made a model of 10^12 outputs (refused only by the allocator) and 2^63 read as negative."""
    write_parquet(tmp_path / "ds" / "train.parquet", pa.table({"x": floats(), "label": pa.array(values, t)}))
    refused(tmp_path, capsys, {"num_clients": 2}, "data.label = 'label': ", needle)


def test_a_class_label_beyond_its_names_is_refused(tmp_path, capsys):
    t = pa.table({"x": floats(), "label": pa.array(np.arange(N) % 4, pa.int64())})
    feats = datasets.Features({"x": datasets.Sequence(datasets.Value("float32")),
                               "label": datasets.ClassLabel(names=["a", "b"])})
    write_parquet(tmp_path / "ds" / "train.parquet", t.replace_schema_metadata(feats.arrow_schema.metadata))
    refused(tmp_path, capsys, {"num_clients": 2}, "data.label = 'label': holds label 3, but its ClassLabel names 2 "
                                                  "classes")


def test_rows_of_no_values_and_null_values_are_refused_naming_the_input(tmp_path, capsys):
    write_parquet(tmp_path / "ds" / "train.parquet",
                  pa.table({"x": pa.array([[]] * N, pa.list_(pa.float32())), "label": labels()}))
    refused(tmp_path, capsys, {"num_clients": 2}, "data.input = 'x': rows hold no values (the first row's shape [0])")
    write_parquet(tmp_path / "ds" / "train.parquet",
                  pa.table({"x": pa.array([[1.0, None]] * N, pa.list_(pa.float32())), "label": labels()}))
    refused(tmp_path, capsys, {"num_clients": 2}, "data.input = 'x': has missing values (nulls, in a row or inside "
                                                  "one)")


def build(tmp_path, **data):
    variants = expand({"name": "odd", "rounds": 1, "data": {"name": "huggingface", "path": str(tmp_path / "ds"),
                                                           "input": "x", "test_fraction": 0.25, **data}}, None)
    return prepare(variants).dataset_for(variants[0], 0)


def test_an_arrow_file_of_no_rows_before_one_of_rows_is_read(tmp_path):
    """A stream with a schema and no batches (what write_table leaves for 0 rows) was refused as unreadable."""
    write_ipc(tmp_path / "ds" / "train-0.arrow", pa.table({"x": floats(0), "label": labels(0)}))
    write_ipc(tmp_path / "ds" / "train-1.arrow", pa.table({"x": floats(), "label": labels()}))
    d = build(tmp_path, num_clients=2)
    rows = np.concatenate([d.x_train[:, 0], d.x_test[:, 0], d.x_server_test[:, 0]])
    np.testing.assert_array_equal(np.sort(rows), np.arange(N))


def test_dictionary_encoded_labels_are_class_names(tmp_path):
    names = np.array(["cat", "dog", "emu"])[np.arange(N) % 3]
    write_parquet(tmp_path / "ds" / "train.parquet",
                  pa.table({"x": floats(), "label": pa.array(names).dictionary_encode()}))
    d = build(tmp_path, num_clients=2, client_test_fraction=0.0)
    assert d.num_classes == 3
    rows = np.concatenate([d.x_train[:, 0], d.x_server_test[:, 0]]).astype(int)
    np.testing.assert_array_equal(np.concatenate([d.y_train, d.y_server_test]), rows % 3)  # sorted names: 0, 1, 2


@pytest.mark.parametrize("damage", ["offsets", "junk"])
def test_a_damaged_arrow_file_is_refused_naming_the_path(tmp_path, capsys, damage):
    """A string column's offsets pointing past its data were read out of bounds (Arrow IPC reads check the layout,
    not the offsets); a file of junk bytes was a DataError naming no key."""
    path = tmp_path / "ds" / "train.arrow"
    write_ipc(path, pa.table({"x": floats(), "label": pa.array([f"c{i % 2}" for i in range(N)])}))
    data = bytearray(path.read_bytes())
    if damage == "offsets":
        at = bytes(data).find(struct.pack("<4i", 0, 2, 4, 6))  # the labels' offsets: "c0", "c1", ... 2 bytes each
        assert at > 0
        data[at + 8:at + 12] = struct.pack("<i", 2**30)
    else:
        data = bytearray(b"\x07" * 64)
    path.write_bytes(bytes(data))
    refused(tmp_path, capsys, {"num_clients": 2}, f"data.path = '{tmp_path / 'ds'}': ", "train.arrow: cannot be read",
            "replace or remove the file")
