"""Columns whose values are of mixed types (ints and strings in an Arrow union, or in different files of one split)
are refused in one line naming the key that names them; types of one kind across files (int32 / int64, string /
large_string) read as their common type; a mixed column no key names does not stop the dataset."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from turnout.app.cli import main  # noqa: E402
from turnout.runs.experiment import prepare  # noqa: E402
from turnout.sim.composition import expand  # noqa: E402

N = 24
HALF = N // 2


def table(rows: slice, ids) -> "pa.Table":
    r = np.arange(N)[rows]
    return pa.table({"x": pa.array([[float(i), 1.0] for i in r], pa.list_(pa.float64())),
                     "label": pa.array(r % 2, pa.int64()), "w": ids})


def int_ids(n: int, t=None) -> "pa.Array":
    return pa.array(np.arange(n) % 3, t or pa.int64())


def str_ids(n: int, t=None) -> "pa.Array":
    return pa.array([str(i % 3) for i in range(n)], t or pa.string())


def write_ipc(path, t: "pa.Table") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)


def two_files(root, kind: str, first: "pa.Array", second: "pa.Array"):
    """A split of two files, its first half's ids ``first`` and its second half's ``second``."""
    parts = [table(slice(0, HALF), first), table(slice(HALF, N), second)]
    if kind == "parquet":
        (root / "data").mkdir(parents=True)
        for i, t in enumerate(parts):
            pq.write_table(t, root / "data" / f"train-0000{i}-of-00002.parquet")
    elif kind == "arrow":
        for i, t in enumerate(parts):
            write_ipc(root / f"train-0000{i}.arrow", t)
    else:  # save_to_disk in two shards, the second rewritten with the other type (as a second writer would)
        ds = datasets.Dataset.from_dict({"x": [[float(i), 1.0] for i in range(N)], "label": (np.arange(N) % 2).tolist(),
                                         "w": first.to_pylist() + first.to_pylist()})
        ds.save_to_disk(str(root), num_shards=2)
        write_ipc(root / "data-00001-of-00002.arrow", parts[1])
    return root


def union_column(root, mode: str):
    types = pa.array(np.arange(N) % 2, pa.int8())
    if mode == "sparse":
        ids = pa.UnionArray.from_sparse(types, [int_ids(N), str_ids(N)])
    else:
        ids = pa.UnionArray.from_dense(types, pa.array(np.arange(N) // 2, pa.int32()), [int_ids(HALF), str_ids(HALF)])
    write_ipc(root / "train.arrow", table(slice(None), ids))
    return root


#: (where the mixed column is named, the data block, the key the refusal names)
USES = [
    ({"client_id": "w"}, "data.client_id = 'w': "),
    ({"partition": {"name": "natural", "by": "w"}}, "data.partition.by = 'w': "),
    ({"num_clients": 2, "partition": {"name": "flower", "partitioner": "DirichletPartitioner",
                                      "options": {"partition_by": "w", "alpha": 1.0, "min_partition_size": 1}}},
     "data.partition.options.partition_by = 'w': "),
    ({"num_clients": 2, "label": "w"}, "data.label = 'w': "),
]


def run(tmp_path, capsys, data: dict) -> tuple[int, str]:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump({"name": "ids", "rounds": 1, "seeds": [0],
                                   "data": {"name": "huggingface", "input": "x", **data}, "model": {"name": "logreg"},
                                   "selector": {"name": "uniform", "clients_per_round": 2},
                                   "output": {"progress": False, "plots": False}}))
    capsys.readouterr()  # what writing the data printed (save_to_disk's progress bar)
    rc = main(["run", str(cfg), "--quiet", "--out", str(tmp_path / "run")])
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return rc, captured.err


@pytest.mark.parametrize("store", ["parquet", "arrow", "save_to_disk", "sparse union", "dense union"])
@pytest.mark.parametrize("use,key", USES, ids=["client_id", "natural.by", "flower.partition_by", "label"])
def test_a_column_of_ints_and_strings_is_refused_naming_its_key(tmp_path, capsys, store, use, key):
    root = tmp_path / "data"
    if store.endswith("union"):
        union_column(root, store.split()[0])
        what = f"mixes int64 and string values (an Arrow {store.split()[0]} union column)"
    else:
        two_files(root, store.replace("save_to_disk", "saved"), int_ids(HALF), str_ids(HALF))
        what = "mixes int64 and string values across the split's files ("
    rc, err = run(tmp_path, capsys, {"path": str(root), **use})
    assert rc == 2 and err.count("\n") == 1, err
    line = err.strip()
    assert line.startswith(f"turnout: error: {key}{what}"), line
    assert line.endswith("store the column as one type in every row and file (e.g. cast it to string), or name "
                         "another column")
    assert not (tmp_path / "run").exists() and not (tmp_path / "run.partial").exists()


def clients(path, **data) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    variants = expand({"name": "ids", "rounds": 1, "data": {"name": "huggingface", "path": str(path), "input": "x",
                                                           "test_fraction": 0.25, "client_test_fraction": 0.0,
                                                           **data}}, None)
    d = prepare(variants).dataset_for(variants[0], 0)
    return d.client_names, d.n_train, d.x_train[:, 0], d.x_server_test[:, 0]


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
@pytest.mark.parametrize("first,second", [
    (int_ids(HALF, pa.int32()), int_ids(HALF)),
    (str_ids(HALF), str_ids(HALF, pa.large_string())),
    (str_ids(HALF).dictionary_encode(), str_ids(HALF)),
], ids=["int32+int64", "string+large_string", "dictionary+string"])
def test_types_of_one_kind_across_files_read_as_their_common_type(tmp_path, kind, first, second):
    mixed = clients(two_files(tmp_path / "mixed", kind, first, second), client_id="w")
    plain = first.cast(pa.string()) if pa.types.is_dictionary(first.type) else first
    same = clients(two_files(tmp_path / "same", kind, plain, plain), client_id="w")
    for a, b in zip(mixed, same):
        np.testing.assert_array_equal(a, b)
    names, counts, rows, server = mixed
    assert list(names) == ["0", "1", "2"] and counts.sum() == N - 6 and len(server) == 6
    np.testing.assert_array_equal(np.sort(np.concatenate([rows, server])), np.arange(N))
    np.testing.assert_array_equal(rows.astype(int) % 3, np.repeat([0, 1, 2], counts))  # each row with its writer


def test_a_mixed_column_no_key_names_does_not_stop_the_dataset(tmp_path):
    root = union_column(tmp_path / "u", "sparse")
    names, counts, rows, server = clients(root, num_clients=3)
    assert names is None and len(counts) == 3 and counts.sum() == N - 6
    np.testing.assert_array_equal(np.sort(np.concatenate([rows, server])), np.arange(N))
