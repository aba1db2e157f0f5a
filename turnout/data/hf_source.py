"""One split of a Hugging Face dataset as Arrow record batches, read without holding the split in memory.

A split is found three ways: a hub id through the ``datasets`` library (``load_dataset``, which
uses the user's cache and downloads only where the library itself would), a folder written by
``save_to_disk`` (``load_from_disk``), or a folder of ``.parquet`` / ``.arrow`` files. Either way
the rows end up in Arrow files on disk, and they are read from there in two passes:

* :meth:`Split.column` reads the small columns (labels, writer ids) whole: from a memory map, so
  only those columns' pages are touched;
* :meth:`Split.batches` streams the big input column batch by batch with ordinary reads (no memory
  map), so a million images cost one batch of memory at a time, not the file's size on top of the
  arrays they are decoded into.

Column types are the dataset's own ``datasets.Features`` (read from the Arrow schema's metadata),
so an ``Image`` column is known as an image whatever its storage.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..core.errors import ConfigError, DataError

#: Rows per record batch when the storage does not fix the batches (parquet, in-memory tables).
BATCH_ROWS = 4096

HF_EXTRA = "pip install -c constraints.txt 'turnout[huggingface]'"


def require_datasets(key: str = "name", value: object = "huggingface") -> None:
    """A one-line ConfigError naming the extra when the ``datasets`` library is not installed."""
    if importlib.util.find_spec("datasets") is None:
        raise ConfigError(key, value, f"needs the Hugging Face `datasets` library, which is not installed: {HF_EXTRA}")


@dataclass
class Split:
    """One split's rows: Arrow files on disk (``kind`` arrow or parquet) or an in-memory Arrow table."""

    name: str
    features: object  # datasets.Features
    num_rows: int
    files: list[str] = field(default_factory=list)
    kind: str = "arrow"
    table: object = None  # pyarrow.Table, when the rows are not in files
    source: str = ""  # what to name in error messages

    def column(self, name: str):
        """The whole column ``name`` as one pyarrow Array (for small columns: labels, ids)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.table is not None:
            return self.table.column(name).combine_chunks()
        if self.kind == "parquet":
            return pq.read_table(self.files, columns=[name]).column(name).combine_chunks()
        chunks = []
        for f in self.files:
            with pa.memory_map(f) as mm:
                for batch in _arrow_reader(mm, f):
                    chunks.append(batch.column(name))
                # combine before the map closes: the copy owns its memory
                out = pa.chunked_array(chunks, type=chunks[0].type).combine_chunks() if chunks else None
                chunks = [out] if out is not None else []
        if not chunks:
            raise DataError(f"{self.source}: split {self.name!r} has no rows")
        return chunks[0]

    def batches(self, columns: list[str]) -> Iterator[tuple[int, object]]:
        """``(first_row, record_batch)`` over the split in row order, holding one batch at a time."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        start = 0
        if self.table is not None:
            for b in self.table.select(columns).to_batches(max_chunksize=BATCH_ROWS):
                yield start, b
                start += b.num_rows
            return
        for f in self.files:
            if self.kind == "parquet":
                for b in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS, columns=columns):
                    yield start, b
                    start += b.num_rows
                continue
            with pa.OSFile(f) as src:  # plain reads: a memory map would keep every page it touched resident
                for b in _arrow_reader(src, f):
                    yield start, b.select(columns)
                    start += b.num_rows


def _arrow_reader(src, path: str):
    """Record batches of an Arrow IPC file in the stream format (``datasets``' own) or the file format."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_stream(src)
        return iter(reader)
    except pa.ArrowInvalid:
        src.seek(0)
    try:
        reader = pa.ipc.open_file(src)
    except pa.ArrowInvalid as exc:
        raise DataError(f"{path}: not an Arrow IPC file ({exc})") from None
    return (reader.get_batch(i) for i in range(reader.num_record_batches))


def _features(schema, source: str):
    import datasets

    try:
        return datasets.Features.from_arrow_schema(schema)
    except Exception as exc:  # an unknown type in the metadata of someone else's file
        raise DataError(f"{source}: cannot read the column types ({exc})") from None


def _from_dataset(ds, split: str, source: str) -> Split:
    """A ``datasets.Dataset`` (loaded or from disk) as a Split over its cache files, or over its table."""
    files = [f["filename"] for f in ds.cache_files]
    # A dataset whose rows are a selection or shuffle of its files (an indices mapping, which `datasets`
    # exposes only as this attribute) reads its own table instead; loaded and saved datasets have none.
    if files and getattr(ds, "_indices", None) is None:
        return Split(split, ds.features, ds.num_rows, files=files, kind="arrow", source=source)
    return Split(split, ds.features, ds.num_rows, table=ds.with_format("arrow")[:], source=source)


def _split_files(folder: Path, split: str) -> list[Path]:
    """Data files of ``split`` in a folder: under a ``split/`` folder, else named ``split-*`` or ``split.*``."""
    found = sorted(p for p in folder.rglob("*") if p.suffix in (".parquet", ".arrow") and p.is_file())
    sub = [p for p in found if split in p.relative_to(folder).parts[:-1]]
    if sub:
        return sub
    named = [p for p in found if p.stem == split or p.stem.startswith(f"{split}-") or p.stem.startswith(f"{split}_")]
    if named:
        return named
    # A folder of files without split names is one split, which "train" reads.
    others = {"train", "test", "validation", "valid", "val"} - {split}
    unnamed = [p for p in found if not any(p.stem.startswith(o) or o in p.relative_to(folder).parts[:-1]
                                           for o in others)]
    return unnamed if split == "train" else []


def open_split(path: str | None, hub_id: str | None, split: str, subset: str | None = None,
               cache_dir: str | None = None, key: str = "split") -> Split:
    """The split ``split`` of a local dataset folder or of a hub dataset (through the ``datasets`` cache); a split
    without rows is refused here, naming the key, before anything reads its first row."""
    out = _open_split(path, hub_id, split, subset, cache_dir, key)
    if out.num_rows == 0:
        raise ConfigError(key, split, f"{out.source}: the split has no rows; choose a split that has some")
    return out


def _open_split(path: str | None, hub_id: str | None, split: str, subset: str | None, cache_dir: str | None,
                key: str) -> Split:
    import datasets

    if hub_id is not None:
        try:
            ds = datasets.load_dataset(hub_id, subset, split=split, cache_dir=cache_dir)
        except (ValueError, KeyError) as exc:  # unknown split or subset
            raise ConfigError(key, split, f"{hub_id}: {str(exc).splitlines()[0]}") from None
        except (OSError, ConnectionError) as exc:
            raise DataError(f"{hub_id}: cannot be loaded ({str(exc).splitlines()[0]}); the hub must be reachable "
                            "or the dataset in the datasets cache (HF_DATASETS_CACHE)") from None
        return _from_dataset(ds, split, hub_id)
    folder = Path(path).expanduser()
    if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
        try:
            ds = datasets.load_from_disk(str(folder))
        except (OSError, ValueError) as exc:
            raise DataError(f"{path}: cannot be read with load_from_disk ({str(exc).splitlines()[0]})") from None
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ConfigError(key, split, f"{path} has the splits {', '.join(ds)}; choose one")
            return _from_dataset(ds[split], split, path)
        if split != "train":
            raise ConfigError(key, split, f"{path} holds one saved Dataset (read as split 'train'), not a "
                                          "DatasetDict; use split: train and test_fraction, or save a DatasetDict")
        return _from_dataset(ds, split, path)
    files = _split_files(folder, split)
    if not files:
        raise ConfigError(key, split, f"{path} has no .parquet/.arrow files of split {split!r} (a {split}/ folder "
                                      f"or files named {split}-*.parquet)")
    kinds = {p.suffix for p in files}
    if len(kinds) > 1:
        raise DataError(f"{path}: split {split!r} mixes .parquet and .arrow files; keep one format")
    kind = kinds.pop().lstrip(".")
    return _file_split(sorted(map(str, files)), kind, split, path)


def _file_split(files: list[str], kind: str, split: str, source: str) -> Split:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas, rows = [], 0
    for f in files:
        try:
            if kind == "parquet":
                meta = pq.ParquetFile(f)
                schemas.append(meta.schema_arrow)
                rows += meta.metadata.num_rows
            else:
                with pa.memory_map(f) as mm:
                    batches = list(_arrow_reader(mm, f))  # zero-copy: counts rows without reading the data
                    schemas.append(batches[0].schema if batches else pa.ipc.open_stream(mm).schema)
                    rows += sum(b.num_rows for b in batches)
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{f}: cannot be read as {kind} ({str(exc).splitlines()[0]})") from None
    if any(s.names != schemas[0].names for s in schemas):
        raise DataError(f"{source}: the {split!r} files do not all have the same columns")
    return Split(split, _features(schemas[0], source), rows, files=files, kind=kind, source=source)


def local_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a local dataset (``None`` when it can), checked when the config is validated."""
    p = Path(path).expanduser()
    if not p.exists():
        return "does not exist; give a folder written by save_to_disk or one holding .parquet/.arrow files"
    if not p.is_dir():
        return "is a file; give the folder that holds it (written by save_to_disk, or of .parquet/.arrow files)"
    if not os.access(p, os.R_OK):
        return "cannot be read"
    return None
