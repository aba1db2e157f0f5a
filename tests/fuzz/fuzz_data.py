"""Hypothesis strategies for two more kinds of input: local Hugging Face datasets (parquet, Arrow IPC and
``save_to_disk`` folders written on the fly) with the ``data:`` block that reads them, and Flower Datasets'
partitioners with their options.

A dataset is drawn as a plan (storage, layout, columns of odd types, rows, nulls, damage), which
:func:`write_dataset` turns into files, so that a failing case shows a readable description. Columns
range over what a user's files may hold: float and uint8 arrays, ragged and nested lists, PNG images
(some broken, some of another size), text, single characters, ids as strings, ints, dictionary
strings, Arrow unions, all-null columns, timestamps, decimals, maps, structs; the data block's options
are drawn from the option space of ``data: {name: huggingface}`` (:func:`fuzz_cases.field_values`).
Files are damaged the ways files get damaged (cut, bytes changed, emptied, replaced by junk, a shard
removed, ``state.json`` broken). Damage that leaves nothing readable must be refused.
"""

from __future__ import annotations

import inspect
import io
import json
import shutil
from pathlib import Path
from typing import Any

import fuzz_cases as fc
import numpy as np
from hypothesis import strategies as st

# ---------------------------------------------------------------------------------------------
# columns

#: Column kinds an input may be (each also drawn for the other roles, and as an extra column).
INPUT_KINDS = ["floats"] * 6 + ["image"] * 4 + ["floats64", "fixed", "nested", "uint8", "ragged", "scalar_f",
                                               "scalar_i", "text", "empty_lists", "nullcol", "bool", "str_ids",
                                               "binary"]
LABEL_KINDS = ["labels"] * 10 + ["str_labels", "chars", "class_label", "bool", "int_big", "scalar_f",
               "nullcol", "dict_str", "floats", "uint64", "union"]
ID_KINDS = ["str_ids"] * 4 + ["int_ids"] * 3 + ["large_str", "dict_str", "int_big", "uint64", "scalar_f",
            "nullcol", "union", "bool", "floats", "text"]
CLEAN_INPUTS = ["floats", "floats64", "fixed", "nested", "uint8", "image", "scalar_f"]
CLEAN_LABELS = ["labels", "labels", "str_labels", "class_label", "dict_str", "bool"]
CLEAN_IDS = ["str_ids", "int_ids", "large_str", "dict_str"]
ODD_KINDS = ["timestamp", "decimal", "duration", "map", "struct", "union", "nullcol", "binary", "large_str",
             "date", "dense_union", "nested"]
ALL_KINDS = sorted(set(INPUT_KINDS + LABEL_KINDS + ID_KINDS + ODD_KINDS))
ODD_NAMES = ["", " ", "é", "label ", "Label", "x.y", "a/b", "0", "__index_level_0__", "null", "\u202e", "x" * 300]


def _png(px: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(px).save(buf, format="PNG")
    return buf.getvalue()


def _pick(values: list, n: int, rng: np.random.Generator) -> list:
    """``n`` of ``values`` as Python objects (numpy's choice would make big ints floats)."""
    return [values[i] for i in rng.integers(0, len(values), n)]


def column_values(kind: str, n: int, rng: np.random.Generator, dim: int, classes: int) -> tuple[list, Any]:
    """``(python values, Arrow type)`` of a column of ``kind`` with ``n`` rows."""
    import pyarrow as pa

    if kind in ("floats", "floats64", "fixed", "uint8"):
        t = {"floats": pa.list_(pa.float32()), "floats64": pa.list_(pa.float64()),
             "fixed": pa.list_(pa.float32(), dim), "uint8": pa.list_(pa.uint8())}[kind]
        vals = rng.integers(0, 256, (n, dim)) if kind == "uint8" else rng.normal(size=(n, dim))
        return vals.tolist(), t
    if kind == "nested":
        return rng.normal(size=(n, 2, dim)).tolist(), pa.list_(pa.list_(pa.float32()))
    if kind == "ragged":
        return [rng.normal(size=int(rng.integers(0, dim + 2))).tolist() for _ in range(n)], pa.list_(pa.float32())
    if kind == "empty_lists":
        return [[] for _ in range(n)], pa.list_(pa.float32())
    if kind == "scalar_f":
        return rng.normal(size=n).tolist(), pa.float64()
    if kind == "scalar_i":
        return rng.integers(-3, 4, n).tolist(), pa.int64()
    if kind in ("labels", "class_label"):
        return rng.integers(0, classes, n).tolist(), pa.int64()
    if kind == "int_ids":
        return rng.integers(0, 5, n).tolist(), pa.int32()
    if kind == "int_big":
        return _pick([-(2**63), -1, 0, 1, 2**31, 2**62, 2**63 - 1], n, rng), pa.int64()
    if kind == "uint64":
        return _pick([0, 1, 2**63, 2**64 - 1], n, rng), pa.uint64()
    if kind in ("str_ids", "large_str", "dict_str"):
        t = pa.large_string() if kind == "large_str" else pa.string()
        return [f"w{k}" for k in rng.integers(0, 5, n)], t
    if kind == "str_labels":
        return [["cat", "dog", "émeu", ""][k] for k in rng.integers(0, 4, n)], pa.string()
    if kind == "chars":
        return [chr(c) for c in rng.choice([97, 98, 32, 10, 233, 0x1F600], n)], pa.string()
    if kind == "text":
        words = ["to", "be", "or", "not", "é", "\x00", "\U0001F600", "", "x" * 200]
        return [" ".join(rng.choice(words, int(rng.integers(0, 6)))) for _ in range(n)], pa.string()
    if kind == "bool":
        return rng.integers(0, 2, n).astype(bool).tolist(), pa.bool_()
    if kind == "nullcol":
        return [None] * n, pa.null()
    if kind == "binary":
        return [bytes(rng.integers(0, 256, int(rng.integers(0, 9))).astype(np.uint8)) for _ in range(n)], pa.binary()
    if kind == "image":
        mode = rng.choice(["L", "RGB"])
        side = int(rng.choice([2, 4, 5]))
        odd = int(rng.integers(0, n)) if n and rng.random() < 0.15 else -1  # one image of another size,
        broken = int(rng.integers(0, n)) if n and rng.random() < 0.1 else -1  # one cut short or not an image
        out = []
        for i in range(n):
            s = side + 1 if i == odd else side
            px = rng.integers(0, 256, (s, s) if mode == "L" else (s, s, 3)).astype(np.uint8)
            cell = {"bytes": _png(px), "path": None}
            if i == broken:
                cell = [{"bytes": cell["bytes"][: int(rng.integers(0, len(cell["bytes"])))], "path": None},
                        {"bytes": None, "path": "/etc/hostname"}, {"bytes": None, "path": "/dev/zero"},
                        {"bytes": None, "path": None}, {"bytes": b"GIF89a", "path": "x.gif"}][int(rng.integers(0, 5))]
            out.append(cell)
        return out, pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    if kind == "timestamp":
        return rng.integers(0, 2**40, n).tolist(), pa.timestamp("ms")
    if kind == "date":
        return rng.integers(0, 20000, n).tolist(), pa.date32()
    if kind == "duration":
        return rng.integers(0, 10**6, n).tolist(), pa.duration("s")
    if kind == "decimal":
        import decimal

        return [decimal.Decimal(int(v)) / 100 for v in rng.integers(-999, 999, n)], pa.decimal128(5, 2)
    if kind == "map":
        return [[("a", int(v))] for v in rng.integers(0, 9, n)], pa.map_(pa.string(), pa.int64())
    if kind == "struct":
        return [{"a": int(v), "b": "s"} for v in rng.integers(0, 9, n)], pa.struct([("a", pa.int64()),
                                                                                   ("b", pa.string())])
    if kind in ("union", "dense_union"):
        return [], "union"  # built by column_array
    raise AssertionError(kind)


def column_array(kind: str, n: int, rng: np.random.Generator, dim: int, classes: int, null_share: float):
    """The column as an Arrow array, with about ``null_share`` of its rows null."""
    import pyarrow as pa

    if kind in ("union", "dense_union"):
        codes = pa.array(rng.integers(0, 2, n), pa.int8())
        ints, strs = pa.array(rng.integers(0, 5, n), pa.int64()), pa.array([f"w{k}" for k in rng.integers(0, 5, n)])
        if kind == "union":
            return pa.UnionArray.from_sparse(codes, [ints, strs])
        offsets = pa.array(np.arange(n), pa.int32())
        return pa.UnionArray.from_dense(codes, offsets, [ints, strs])
    values, t = column_values(kind, n, rng, dim, classes)
    if null_share and kind != "nullcol":
        values = [None if rng.random() < null_share else v for v in values]
    arr = pa.array(values, t)
    if kind == "dict_str":
        arr = arr.dictionary_encode()
    return arr


# ---------------------------------------------------------------------------------------------
# datasets

@st.composite
def dataset_plans(draw) -> dict:
    """What to write: storage, layout, files, rows, the columns' kinds and names, nulls, damage. Half the plans
    are clean (the columns a run reads are valid, nothing is damaged), so that runs get past the data's checks."""
    clean = draw(st.booleans())
    store = draw(st.sampled_from(["parquet", "parquet", "arrow_stream", "arrow_file", "saved", "saved",
                                  "saved_dict"]))
    files = draw(st.sampled_from([1, 1, 1, 2, 3])) if not store.startswith("saved") else draw(st.sampled_from([1, 2]))
    sizes = [0, 1, 2, 3, 5, 8, 12, 24, 40] if not clean else [12, 24, 40]
    rows = [draw(st.sampled_from(sizes)) for _ in range(files)]
    columns = {"x": draw(st.sampled_from(INPUT_KINDS if not clean else CLEAN_INPUTS)),
               "label": draw(st.sampled_from(LABEL_KINDS if not clean else CLEAN_LABELS))}
    if draw(st.booleans()):
        columns["w"] = draw(st.sampled_from(ID_KINDS if not clean else CLEAN_IDS))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        name = draw(st.one_of(st.sampled_from(["extra", "meta", "y", "w2"]), st.sampled_from(ODD_NAMES)))
        columns.setdefault(name, draw(st.sampled_from(ALL_KINDS)))
    plan = {
        "store": store, "files": files, "rows": rows, "columns": columns,
        "layout": draw(st.sampled_from(["hub", "flat", "folder", "unnamed"])),
        "seed": draw(st.integers(0, 2**32 - 1)), "dim": draw(st.sampled_from([1, 2, 4, 6])),
        "classes": draw(st.sampled_from([1, 2, 3, 10] if not clean else [2, 3, 10])),
        "nulls": {c: draw(st.sampled_from([0.0] * 15 + [0.1, 0.5, 1.0])) if not clean or c not in ("x", "label", "w")
                  else 0.0 for c in columns},
        "mixed": None, "test": draw(st.sampled_from([None, None, "same", "odd"] if not clean else [None, "same"])),
        "damage": None, "clean": clean,
    }
    if clean:
        return plan
    if files > 1 and draw(fc.one_in(4)):  # one column stored as another kind in a later file
        plan["mixed"] = (draw(st.sampled_from(sorted(columns))), draw(st.sampled_from(ALL_KINDS)))
    if draw(fc.one_in(6)):
        ops = ["truncate", "flip", "zero", "junk", "append", "header"]
        if store.startswith("saved"):
            ops += ["state", "state", "info", "drop_shard", "dict_json"]
        plan["damage"] = (draw(st.sampled_from(ops)), draw(st.integers(0, 2**31)))
    return plan


def describe_plan(plan: dict) -> str:
    cols = ", ".join(f"{k!r}: {v}" + (f" ({plan['nulls'][k]:.0%} null)" if plan["nulls"][k] else "")
                     for k, v in plan["columns"].items())
    parts = [f"{'clean ' if plan.get('clean') else ''}{plan['store']} {plan['layout']} rows {plan['rows']}", cols]
    for key in ("mixed", "test", "damage"):
        if plan[key]:
            parts.append(f"{key} {plan[key]}")
    return "; ".join(parts)


def _table(plan: dict, n: int, rng: np.random.Generator, override: tuple | None = None):
    import pyarrow as pa

    arrays, names = [], []
    for name, kind in plan["columns"].items():
        if override is not None and override[0] == name:
            kind = override[1]
        arrays.append(column_array(kind, n, rng, plan["dim"], plan["classes"], plan["nulls"][name]))
        names.append(name)
    t = pa.Table.from_arrays(arrays, names=names)
    return _with_features(t, plan, override)


def _with_features(t, plan: dict, override: tuple | None):
    """The schema metadata ``datasets`` writes: image columns are Image, class labels ClassLabel."""
    import datasets

    try:
        feats = datasets.Features.from_arrow_schema(t.schema)
    except Exception:  # a type the library has no feature for: no metadata, as another writer leaves it
        return t
    for name, kind in plan["columns"].items():
        if override is not None and override[0] == name:
            kind = override[1]
        if kind == "image":
            feats[name] = datasets.Image()
        elif kind == "class_label":
            feats[name] = datasets.ClassLabel(num_classes=plan["classes"])
    meta = {"huggingface": json.dumps({"info": {"features": feats.to_dict()}})}
    return t.replace_schema_metadata(meta)


def _file_name(plan: dict, split: str, i: int, ext: str) -> str:
    k = plan["files"]
    return {"hub": f"data/{split}-{i:05d}-of-{k:05d}.{ext}", "flat": f"{split}-{i}.{ext}",
            "folder": f"{split}/part-{i}.{ext}", "unnamed": f"part-{i}.{ext}"}[plan["layout"]]


def _write_files(plan: dict, root: Path, split: str, tables: list) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ext = "parquet" if plan["store"] == "parquet" else "arrow"
    out = []
    for i, t in enumerate(tables):
        path = root / _file_name(plan, split, i, ext)
        if plan["layout"] == "unnamed" and split != "train":
            path = root / f"{split}-{i}.{ext}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if ext == "parquet":
            pq.write_table(t, path)
        else:
            with pa.OSFile(str(path), "wb") as f:
                opener = pa.ipc.new_stream if plan["store"] == "arrow_stream" else pa.ipc.new_file
                with opener(f, t.schema) as w:
                    w.write_table(t)
        out.append(path)
    return out


def _save(plan: dict, root: Path, tables: list, test) -> list[Path] | None:
    """``save_to_disk`` of the tables (a Dataset, or a DatasetDict with the test split); ``None`` when the library
    cannot hold them (an Arrow union, mixed shards), and the train shards' files otherwise."""
    import datasets
    import pyarrow as pa

    datasets.disable_progress_bars()  # the writing is the case's setup, not its output
    try:
        table = pa.concat_tables(tables)
        train = datasets.Dataset(table)
        shards = max(1, min(plan["files"], len(train)))
        if plan["store"] == "saved_dict":
            dd = {"train": train}
            if test is not None:
                dd["test"] = datasets.Dataset(test)
            datasets.DatasetDict(dd).save_to_disk(str(root), num_shards={k: 1 if k != "train" else shards
                                                                         for k in dd})
            return sorted((root / "train").glob("*.arrow"))
        train.save_to_disk(str(root), num_shards=shards)
        return sorted(root.glob("*.arrow"))
    except Exception:  # noqa: BLE001 - what the library refuses to write is written as parquet instead
        shutil.rmtree(root, ignore_errors=True)
        return None
    finally:
        datasets.enable_progress_bars()


def _damage(plan: dict, root: Path, files: list[Path]) -> tuple[str, bool]:
    """Damage one of the train files (or the saved folder's json); returns (note, whether it must be refused)."""
    op, seed = plan["damage"]
    rng = np.random.default_rng(seed)
    if op in ("state", "info", "dict_json", "drop_shard"):
        sub = root / "train" if (root / "train").is_dir() and (root / "dataset_dict.json").exists() else root
        if op == "drop_shard" and files:
            files[-1].unlink()
            return f"shard {files[-1].name} removed", True
        name = {"state": "state.json", "info": "dataset_info.json", "dict_json": "dataset_dict.json"}[op]
        target = (root if op == "dict_json" else sub) / name
        if not target.exists():
            return f"no {name}", False
        text = target.read_text()
        choice = int(rng.integers(0, 6))
        new = [text[: int(rng.integers(0, len(text)))], "{}", "[]", "null", "\x00\xff",
               text.replace(".arrow", ".arrow.x").replace('"filename": "', '"filename": "../')][choice]
        target.write_text(new)
        return f"{name} rewritten ({choice})", False
    if not files:
        return "no file to damage", False
    f = files[int(rng.integers(0, len(files)))]
    data = f.read_bytes()
    if op == "truncate":
        cut = int(rng.integers(0, max(len(data), 1)))
        f.write_bytes(data[:cut])
        return f"{f.name} cut at {cut} of {len(data)}", False
    if op == "flip":
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 9))):
            if b:
                b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        f.write_bytes(bytes(b))
        return f"{f.name} bytes changed", False
    if op == "zero":
        f.write_bytes(b"")
        return f"{f.name} emptied", True
    if op == "junk":
        f.write_bytes(bytes(rng.integers(0, 256, int(rng.integers(1, 200))).astype(np.uint8)))
        return f"{f.name} replaced by junk", True
    if op == "append":
        f.write_bytes(data + bytes(rng.integers(0, 256, 50).astype(np.uint8)))
        return f"{f.name} junk appended", False
    f.write_bytes(bytes(8) + data[8:])
    return f"{f.name} header zeroed", False


def write_dataset(plan: dict, root: Path) -> tuple[str, bool]:
    """Write ``plan`` under ``root``; returns (notes, whether a run on it must be refused)."""
    rng = np.random.default_rng(plan["seed"])
    tables = [_table(plan, n, rng, plan["mixed"] if i > 0 else None) for i, n in enumerate(plan["rows"])]
    test = None
    if plan["test"] == "same":
        test = _table(plan, 6, rng)
    elif plan["test"] == "odd":
        test = _table({**plan, "columns": {"x": "text", "label": "str_labels"},
                       "nulls": {"x": 0.0, "label": 0.0}}, 4, rng)
    notes = []
    files = None
    if plan["store"].startswith("saved"):
        files = _save(plan, root, tables, test)
        if files is None:
            notes.append("unsavable: written as parquet")
    if files is None:
        import pyarrow as pa

        store = plan["store"] if not plan["store"].startswith("saved") else "parquet"
        try:
            files = _write_files({**plan, "store": store}, root, "train", tables)
            if test is not None:
                _write_files({**plan, "store": store, "files": 1}, root, "test", [test])
        except pa.ArrowNotImplementedError:  # parquet holds no unions: Arrow files then
            shutil.rmtree(root, ignore_errors=True)
            notes.append("no parquet for a union: written as Arrow")
            files = _write_files({**plan, "store": "arrow_stream"}, root, "train", tables)
            if test is not None:
                _write_files({**plan, "store": "arrow_stream", "files": 1}, root, "test", [test])
    must_refuse = False
    if plan["damage"]:
        note, must_refuse = _damage(plan, root, files)
        notes.append(note)
    return "; ".join(notes), must_refuse


# ---------------------------------------------------------------------------------------------
# the data block and the experiment around it

def _hf_fields() -> dict:
    from turnout.data.huggingface import HuggingFaceDataset

    return {k: f for k, f in HuggingFaceDataset.Config.model_fields.items() if k not in ("path", "hub_id")}


FLOWER_NAMES = ["DirichletPartitioner", "IidPartitioner", "ShardPartitioner", "PathologicalPartitioner",
                "NaturalIdPartitioner", "LinearPartitioner", "SquarePartitioner", "ExponentialPartitioner",
                "SizePartitioner", "InnerDirichletPartitioner", "ContinuousPartitioner", "DistributionPartitioner",
                "GroupedNaturalIdPartitioner", "IdToSizeFncPartitioner", "VerticalEvenPartitioner",
                "VerticalSizePartitioner", "Partitioner", "dirichletpartitioner", "Dirichlet", "", "os.system"]
#: The row partitioners an experiment can use (drawn far more often than the rest of :data:`FLOWER_NAMES`).
FLOWER_ROWS = FLOWER_NAMES[:13]


def partition_choices(columns: list[str]) -> st.SearchStrategy:
    natural = st.builds(lambda by, ms, mc: {"name": "natural", "by": by, **ms, **mc},
                        st.sampled_from(columns + ["nope"]),
                        st.sampled_from([{}, {"min_size": 2}, {"min_size": 1000}]),
                        st.sampled_from([{}, {"max_clients": 2}]))
    return st.one_of(st.just({"name": "iid"}), natural, fc.partition_blocks(), flower_blocks(columns),
                     st.just({"name": "dirichlet", "alpha": 0.5}))


@st.composite
def hf_experiments(draw) -> dict:
    """A dataset plan and the experiment that reads it (``PATH`` stands for the dataset's folder)."""
    plan = draw(dataset_plans())
    cols = list(plan["columns"])
    data: dict[str, Any] = {"name": "huggingface", "path": "PATH", "input": "x", "label": "label"}
    if "w" in cols and draw(st.booleans()):
        data["client_id"] = "w"  # a natural partition, one client per writer
    else:
        data["num_clients"] = draw(st.integers(1, 6))
        if draw(st.booleans()):
            data["partition"] = draw(partition_choices(cols))
            if data["partition"].get("name") == "natural" or draw(fc.one_in(10)):
                data.pop("num_clients")
    if plan["test"] and draw(st.booleans()):
        data["test_split"] = "test"
    fields = _hf_fields()
    notes = []
    keys = st.lists(st.sampled_from(sorted(fields)), min_size=1, max_size=3, unique=True)
    for key in draw(keys) if draw(fc.one_in(3)) else []:
        data[key] = draw(fc.field_values(fields[key], valid_weight=10))
        notes.append(f"{key} = {data[key]!r}"[:120])
    for key in ("input", "label", "client_id"):  # now and then a key names another column, or none
        if draw(fc.one_in(12)):
            data[key] = draw(st.sampled_from(cols + ["nope"]))
            notes.append(f"{key} = {data[key]!r}")
    if draw(fc.one_in(25)):
        data["hub_id"] = "tester/tiny"  # with a path too: refused before any hub is asked
        notes.append("hub_id besides path")
    data = fc.clamp(data)
    text = plan["columns"]["x"] == "text" and data.get("input") == "x"
    model = {"name": "char_lstm", "embed_dim": 4, "hidden": 8, "layers": 1} if text else \
        {"name": draw(st.sampled_from(["logreg", "logreg", "mlp"]))}
    if model["name"] == "mlp":
        model["hidden"] = [8]
    exp = {"name": "fuzzhf", "seeds": [0], "rounds": 1, "data": data, "model": model,
           "train": {"batch_size": 8, "local_steps": 1, "lr": 0.05},
           "selector": {"name": "uniform", "clients_per_round": draw(st.sampled_from([1, 2]))},
           "eval": {"every": 1}, "output": {"progress": False, "plots": False}}
    return {"plan": plan, "experiment": exp, "describe": "; ".join([describe_plan(plan), *notes])}


# ---------------------------------------------------------------------------------------------
# Flower Datasets' partitioners

#: Values for a partitioner argument by its name: valid ones first, then edges and wrong types.
def _option_values(name: str, columns: list[str]) -> st.SearchStrategy:
    floats = st.floats(0.01, 10.0)
    by = {
        "partition_by": st.sampled_from(columns + ["label", "label", "nope", ""]),
        "alpha": st.one_of(floats, st.lists(floats, min_size=1, max_size=12),
                           st.sampled_from([0, -1, 0.0, "lots", float("nan"), float("inf"), [], [0.5] * 1000, True,
                                            [0.5, -1.0], 1e-300, 1e300])),
        "min_partition_size": st.one_of(st.integers(0, 20), st.sampled_from([10**6, -1, 1.5, "3", None])),
        "strictness": st.one_of(st.floats(0, 1), st.sampled_from([-0.1, 1.1, float("nan"), "x"])),
        "seed": st.one_of(st.none(), st.integers(0, 2**32), st.sampled_from([-1, 2**64, 1.5, "x", True])),
        "num_shards_per_partition": st.one_of(st.none(), st.integers(1, 6), st.sampled_from([0, -1, 10**6, 2.5])),
        "shard_size": st.one_of(st.none(), st.integers(1, 30), st.sampled_from([0, -3, 10**9])),
        "num_classes_per_partition": st.one_of(st.integers(1, 12), st.sampled_from([0, -1, 100, 10**9])),
        "class_assignment_mode": st.sampled_from(["random", "deterministic", "first-deterministic", "RANDOM", "",
                                                  None, 3]),
        "group_size": st.one_of(st.integers(1, 6), st.sampled_from([0, -1, 10**6, 1.5])),
        "mode": st.sampled_from(["allow-smaller", "allow-bigger", "drop-reminder", "strict", "x", None]),
        "partition_sizes": st.one_of(st.lists(st.integers(0, 40), min_size=1, max_size=6),
                                     st.lists(st.floats(0, 1), min_size=1, max_size=4),
                                     st.sampled_from([[], [-1, 5], [10**9], [[1, 2]], "5", [1.5, 2], [0, 0]])),
        "distribution_array": st.one_of(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), min_size=1,
                                                 max_size=4), st.sampled_from([[], [[-1]], "x", [[1.0, float("nan")]],
                                                                               [1, 2]])),
        "num_unique_labels_per_partition": st.one_of(st.integers(1, 5), st.sampled_from([0, -2, 100])),
        "preassigned_num_samples_per_label": st.one_of(st.integers(0, 5), st.sampled_from([-1, 1000, 10**9])),
        "partition_id_to_size_fn": st.sampled_from(["lambda x: x", "len", 1, None]),
    }
    flags = st.one_of(st.booleans(), st.sampled_from(["yes", 1, None, "false"]))
    base = by.get(name, flags if name in ("shuffle", "self_balancing", "keep_incomplete_shard", "rescale",
                                          "sort_unique_ids") else fc.values(1))
    return st.one_of(base, base, base, fc.scalars())


def _clean_values(name: str, columns: list[str]) -> st.SearchStrategy:
    """Values of the right type and in range for a partitioner argument (what a careful user writes)."""
    small = {"partition_by": st.sampled_from(columns), "alpha": st.floats(0.1, 5.0),
             "min_partition_size": st.integers(0, 3), "strictness": st.floats(0.0, 1.0),
             "seed": st.one_of(st.none(), st.integers(0, 2**31)), "num_shards_per_partition": st.integers(1, 3),
             "shard_size": st.integers(1, 10), "num_classes_per_partition": st.integers(1, 5),
             "class_assignment_mode": st.sampled_from(["random", "deterministic", "first-deterministic"]),
             "group_size": st.integers(1, 4), "mode": st.sampled_from(["allow-smaller", "allow-bigger",
                                                                       "drop-reminder", "strict"]),
             "partition_sizes": st.lists(st.integers(1, 10), min_size=1, max_size=5),
             "distribution_array": st.lists(st.lists(st.integers(1, 5), min_size=2, max_size=2), min_size=10,
                                            max_size=10),
             "num_unique_labels_per_partition": st.integers(1, 3),
             "preassigned_num_samples_per_label": st.integers(0, 2)}
    return small.get(name, st.booleans())


@st.composite
def flower_blocks(draw, columns: list[str] | None = None) -> dict:
    """``{name: flower, partitioner, options}``: a class of flwr_datasets (or a wrong name), some of its
    arguments, each from :func:`_option_values`; half the blocks clean (a row partitioner, its required
    arguments, values of the right types), so that runs get to Flower's own checks and past them."""
    import flwr_datasets.partitioner as fp

    columns = columns or ["label"]
    clean = draw(st.booleans())
    name = draw(st.sampled_from(FLOWER_ROWS if clean else FLOWER_ROWS * 8 + FLOWER_NAMES[13:]))
    cls = getattr(fp, name, None)
    params = [p for p in inspect.signature(cls).parameters if p != "num_partitions"] if isinstance(cls, type) else []
    required = [p for p in params if inspect.signature(cls).parameters[p].default is inspect.Parameter.empty]
    chosen = required if clean or not draw(fc.one_in(8)) else []  # now and then a required argument left out
    chosen += draw(st.lists(st.sampled_from(params), max_size=3, unique=True)) if params else []
    values = _clean_values if clean else _option_values
    options = {p: draw(values(p, columns)) for p in dict.fromkeys(chosen)}
    block = {"name": "flower", "partitioner": name, "options": options}
    if clean:
        return block
    if draw(fc.one_in(10)):
        block["options"]["num_partitions"] = 3
    if draw(fc.one_in(10)):
        block["options"]["zz_unknown"] = 1
    if draw(fc.one_in(20)):
        block["options"] = draw(fc.values(1))
    return block


@st.composite
def flower_experiments(draw) -> dict:
    """An experiment partitioned by a Flower partitioner: on ``digits`` (labels only), or on a small valid
    Hugging Face dataset with id columns (``PATH``)."""
    on_hf = draw(st.booleans())
    columns = ["label", "w", "c", "f", "x"] if on_hf else ["label"] * 6 + ["w"]
    block = draw(flower_blocks(columns))
    if on_hf:
        data = {"name": "huggingface", "path": "PATH", "input": "x", "label": "label"}
    else:
        data = {"name": "digits"}
    data["num_clients"] = draw(st.integers(1, 10))
    data["partition"] = block
    if draw(fc.one_in(5)):
        data["client_test_fraction"] = draw(st.sampled_from([0.0, 0.5, 0.9]))
    exp = {"name": "fuzzflower", "seeds": [0], "rounds": 1, "data": data, "model": {"name": "logreg"},
           "train": {"batch_size": 8, "local_steps": 1, "lr": 0.05},
           "selector": {"name": "uniform", "clients_per_round": draw(st.sampled_from([1, 2]))},
           "eval": {"every": 1}, "output": {"progress": False, "plots": False}}
    must_refuse = isinstance(block["options"], dict) and ("num_partitions" in block["options"]
                                                          or "zz_unknown" in block["options"])
    return {"experiment": exp, "on_hf": on_hf, "must_refuse": must_refuse,
            "describe": f"{'hf' if on_hf else 'digits'} {fc.dump(block, flow=True, width=10**6).strip()}"[:600]}


#: The valid dataset a Flower case on Hugging Face data reads: 60 rows, labels 0-4, writers, ints, floats.
FLOWER_DATA = {"store": "parquet", "files": 1, "rows": [60], "layout": "hub", "seed": 7, "dim": 3, "classes": 5,
               "columns": {"x": "floats", "label": "labels", "w": "str_ids", "c": "int_ids", "f": "scalar_f"},
               "nulls": {"x": 0.0, "label": 0.0, "w": 0.0, "c": 0.0, "f": 0.0}, "mixed": None, "test": None,
               "damage": None}
