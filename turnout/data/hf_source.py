"""One split of a Hugging Face dataset as Arrow record batches, read without holding the split in memory.

A split is found three ways: a hub id through the ``datasets`` library (``load_dataset``, which
uses the user's cache and downloads only where the library itself would; offline at once when the
hub does not answer one quick probe), a folder written by ``save_to_disk`` (``load_from_disk``), or
a folder of ``.parquet`` / ``.arrow`` files. Either way the rows end up in Arrow files on disk, and
they are read from there in two passes:

* :meth:`Split.column` reads the small columns (labels, writer ids) whole: from a memory map, so
  only those columns' pages are touched;
* :meth:`Split.batches` streams the big input column batch by batch with ordinary reads (no memory
  map), so a million images cost one batch of memory at a time, not the file's size on top of the
  arrays they are decoded into.

Column types are the dataset's own ``datasets.Features`` (read from the Arrow schema's metadata),
so an ``Image`` column is known as an image whatever its storage.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..core.errors import ConfigError, ConfigWarning

#: Rows per record batch when the storage does not fix the batches (parquet, in-memory tables).
BATCH_ROWS = 4096

HF_EXTRA = "pip install -c constraints.txt 'turnout[huggingface]'"

#: Seconds the hub may take to answer one request before it counts as unreachable.
PROBE_SECONDS = 3.0
#: Seconds a probe's answer is reused (a build opens a split and a test split; a sweep opens many).
PROBE_REUSE_SECONDS = 60.0
_PROBED: dict[str, tuple[float, str | None]] = {}
#: What to do about a hub dataset that cannot be loaded offline.
HUB_FIX = ("download it where the network is (one run there fills the datasets cache), give a local copy as data.path "
           "(save_to_disk or parquet files), or set HF_HUB_OFFLINE=1 with HF_DATASETS_CACHE (or data.cache_dir) at a "
           "cache that holds it")


def require_datasets(key: str = "name", value: object = "huggingface") -> None:
    """A one-line ConfigError naming the extra when the ``datasets`` library is not installed."""
    if importlib.util.find_spec("datasets") is None:
        raise ConfigError(key, value, f"needs the Hugging Face `datasets` library, which is not installed: {HF_EXTRA}")


@dataclass(frozen=True)
class Unreadable:
    """A column no key may name: the ``datasets`` library has no feature for its Arrow type (a union of ints and
    strings), or the split's files store it as types of different kinds (ints in one file, strings in another).
    It stands in the split's features, so a dataset that merely holds such a column still loads."""

    what: str  # "mixes int64 and string values across the split's files (a.parquet: int64, b.parquet: string)"

    def refuse(self, key: str, column: str) -> ConfigError:
        return ConfigError(key, column, f"{self.what}; store the column as one type in every row and file (e.g. "
                                        "cast it to string), or name another column")


@dataclass
class Split:
    """One split's rows: Arrow files on disk (``kind`` arrow or parquet) or an in-memory Arrow table."""

    name: str
    features: object  # datasets.Features, or a dict with Unreadable columns
    num_rows: int
    files: list[str] = field(default_factory=list)
    kind: str = "arrow"
    table: object = None  # pyarrow.Table, when the rows are not in files
    source: str = ""  # what to name in error messages
    schema: object = None  # pyarrow.Schema every file's batches are cast to, where the files' types differ
    key: str = "path"  # the config key a file that cannot be read is refused under (hub_id for a hub dataset)

    def _unreadable(self, f: str, exc: BaseException) -> ConfigError:
        return ConfigError(self.key, self.source, f"{f}: cannot be read ({_first_line(exc)[:200]}); replace or "
                                                  "remove the file")

    def _checked(self, arr, f: str):
        """``arr`` read from file ``f``, its buffers validated: a damaged file is refused, never read out of
        bounds (Arrow IPC reads check the layout, not the offsets inside the buffers)."""
        try:
            arr.validate(full=True)
        except Exception as exc:  # pyarrow raises ArrowInvalid, or others for odd types
            raise self._unreadable(f, exc) from None
        return arr

    def _cast(self, arr, name: str):
        """``arr`` (a column's chunk) as the type the split's files share (int32 in one file, int64 in another)."""
        import pyarrow as pa

        if self.schema is None or arr.type == (want := self.schema.field(name).type):
            return arr
        try:
            return arr.cast(want)
        except (pa.ArrowException, NotImplementedError) as exc:  # e.g. a uint64 id beyond int64 in another file
            raise ConfigError(self.key, self.source, f"column {name!r} cannot be read as {want} in every file "
                                                     f"({_first_line(exc)[:200]}); store it as one type") from None

    def column(self, name: str):
        """The whole column ``name`` as one pyarrow Array (for small columns: labels, ids)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.table is not None:
            return self.table.column(name).combine_chunks()
        chunks = []
        for f in self.files:  # file by file: one file's type must not decide how another's is parsed
            try:
                if self.kind == "parquet":
                    chunks += [self._cast(self._checked(c, f), name)
                               for c in pq.read_table(f, columns=[name]).column(name).chunks]
                    continue
                with pa.memory_map(f) as mm:
                    for batch in _arrow_reader(mm, f):
                        chunks.append(self._cast(self._checked(batch.column(name), f), name))
                    # combine before the map closes: the copy owns its memory
                    out = pa.chunked_array(chunks, type=chunks[0].type).combine_chunks() if chunks else None
                    chunks = [out] if out is not None else []
            except (OSError, pa.ArrowException) as exc:
                raise self._unreadable(f, exc) from None
        if not chunks:
            raise ConfigError("split", self.name, f"{self.source}: the split has no rows; choose a split that has "
                                                  "some")
        return pa.chunked_array(chunks, type=chunks[0].type).combine_chunks()

    def batches(self, columns: list[str]) -> Iterator[tuple[int, object]]:
        """``(first_row, record_batch)`` over the split in row order, holding one batch at a time."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        start = 0
        want = None if self.schema is None else pa.schema([pa.field(c, self.schema.field(c).type) for c in columns])
        if self.table is not None:
            for b in self.table.select(columns).to_batches(max_chunksize=BATCH_ROWS):
                yield start, b
                start += b.num_rows
            return
        for f in self.files:
            try:
                if self.kind == "parquet":
                    for b in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS, columns=columns):
                        yield start, self._cast_batch(self._checked(b, f), want)
                        start += b.num_rows
                    continue
                with pa.OSFile(f) as src:  # plain reads: a memory map would keep every page it touched resident
                    for b in _arrow_reader(src, f):
                        yield start, self._cast_batch(self._checked(b.select(columns), f), want)
                        start += b.num_rows
            except (OSError, pa.ArrowException) as exc:
                raise self._unreadable(f, exc) from None

    def _cast_batch(self, batch, want):
        if want is None or batch.schema.types == want.types:
            return batch
        import pyarrow as pa

        return pa.RecordBatch.from_arrays([self._cast(c, n) for c, n in zip(batch.columns, want.names)],
                                          schema=want)


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
        raise pa.ArrowInvalid(f"not an Arrow IPC file ({_first_line(exc)[:200]})") from None
    return (reader.get_batch(i) for i in range(reader.num_record_batches))


def _features(schema, unreadable: dict):
    """The columns' ``datasets`` features (from the schema's metadata where it has them); a column the library
    cannot read, or one of ``unreadable``, as an :class:`Unreadable` (refused only where a key names it)."""
    import datasets
    import pyarrow as pa

    if not unreadable:
        try:
            return datasets.Features.from_arrow_schema(schema)
        except Exception:  # a type without a feature (a union), or odd metadata: column by column below
            pass
    out = {}
    for f in schema:
        if f.name in unreadable:
            out[f.name] = unreadable[f.name]
            continue
        for meta in (schema.metadata, None):
            try:
                out[f.name] = datasets.Features.from_arrow_schema(pa.schema([f], metadata=meta))[f.name]
                break
            except Exception:  # noqa: S112 - the metadata's description is optional: try without it
                continue
        else:
            t = f.type
            if pa.types.is_union(t):
                members = " and ".join(dict.fromkeys(str(t.field(i).type) for i in range(t.num_fields)))
                out[f.name] = Unreadable(f"mixes {members} values (an Arrow {t.mode} union column)")
            else:
                out[f.name] = Unreadable(f"holds {t} values, which the datasets library cannot read")
    return out


def _kind(t) -> object:
    """What kind of values an Arrow type holds (int, float, str, a list of ...): files may store a column as
    different types of one kind (int32 / int64, string / large_string), which are read as their common type."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    for kind, test in (("null", pa.types.is_null), ("int", pa.types.is_integer), ("float", pa.types.is_floating),
                       ("bool", pa.types.is_boolean)):
        if test(t):
            return kind
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ("list", _kind(t.value_type))
    if pa.types.is_struct(t):
        return ("struct", tuple((t.field(i).name, _kind(t.field(i).type)) for i in range(t.num_fields)))
    return str(t)


def _reconcile(files: list[str], schemas: list, source: str, key: str = "path"):
    """``(schema, unreadable)``: the type every file's column is read as, and the columns whose files hold values
    of different kinds (ints in one, strings in another), described for a refusal."""
    import pyarrow as pa

    names = schemas[0].names
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ConfigError(key, source, f"column {twice!r} appears more than once in its files; give every column "
                                       "its own name")
    if all(s.types == schemas[0].types for s in schemas):
        return None, {}
    fields, unreadable = [], {}
    for i, name in enumerate(names):
        types = [s.field(i).type for s in schemas]
        plain = [t.value_type if pa.types.is_dictionary(t) else t for t in types]
        target = None
        if len({_kind(t) for t in plain} - {"null"}) <= 1:
            try:
                target = pa.unify_schemas([pa.schema([pa.field(name, t)]) for t in plain],
                                          promote_options="permissive").field(0).type
            except (pa.ArrowException, NotImplementedError):
                target = None
        if target is None:
            first = {}
            for f, t in zip(files, types):
                first.setdefault(str(t), Path(f).name)
            where = ", ".join(f"{f}: {t}" for t, f in first.items())
            unreadable[name] = Unreadable(f"mixes {' and '.join(first)} values across the split's files ({where})")
            target = types[0]
        fields.append(pa.field(name, target))
    return pa.schema(fields, metadata=schemas[0].metadata), unreadable


def _arrow_schema(path: str):
    """The schema of an Arrow IPC file (stream or file format), without reading its batches."""
    import pyarrow as pa

    with pa.memory_map(path) as mm:
        try:
            return pa.ipc.open_stream(mm).schema
        except pa.ArrowInvalid:
            mm.seek(0)
        return pa.ipc.open_file(mm).schema


def _from_dataset(ds, split: str, source: str, key: str = "path") -> Split:
    """A ``datasets.Dataset`` (loaded or from disk) as a Split over its cache files, or over its table."""
    files = [f["filename"] for f in ds.cache_files]
    # A dataset whose rows are a selection or shuffle of its files (an indices mapping, which `datasets`
    # exposes only as this attribute) reads its own table instead; loaded and saved datasets have none.
    if files and getattr(ds, "_indices", None) is None:
        import pyarrow as pa

        try:
            schemas = [_arrow_schema(f) for f in files]
        except (OSError, pa.ArrowException) as exc:
            raise ConfigError(key, source, f"its Arrow files cannot be read ({_first_line(exc)[:200]})") from None
        schema, unreadable = _reconcile(files, schemas, source, key)
        features = ds.features if not unreadable else {**ds.features, **unreadable}
        return Split(split, features, ds.num_rows, files=files, kind="arrow", source=source, schema=schema, key=key)
    return Split(split, ds.features, ds.num_rows, table=ds.with_format("arrow")[:], source=source, key=key)


def hub_unreachable(endpoint: str, seconds: float = PROBE_SECONDS) -> str | None:
    """Why the hub at ``endpoint`` gives no answer (``None`` when it answers, whatever the status): one request,
    no retries, in a thread because a name lookup ignores socket timeouts. Offline, the ``datasets`` library
    would spend ~25 s in retries and warnings before failing."""
    import time

    at, why = _PROBED.get(endpoint, (-PROBE_REUSE_SECONDS, None))
    if time.monotonic() - at < PROBE_REUSE_SECONDS:
        return why
    found: list[str | None] = []

    def probe():
        from huggingface_hub.utils import get_session

        try:
            get_session().head(endpoint, timeout=seconds)
            found.append(None)
        except Exception as exc:  # any failure to get an answer means unreachable
            found.append(" ".join(str(exc).split())[:150] or type(exc).__name__)

    thread = threading.Thread(target=probe, name="turnout-hub-probe", daemon=True)
    thread.start()
    thread.join(seconds + 1.0)
    why = found[0] if found else f"no answer within {seconds:g} s"
    _PROBED[endpoint] = (time.monotonic(), why)
    return why


@contextlib.contextmanager
def _offline_hub():
    """``datasets`` and ``huggingface_hub`` in offline mode (both read HF_HUB_OFFLINE once, at import), their
    logging and progress bars silenced: only the local cache is read, and turnout says what happened."""
    import datasets.config as dconfig
    import huggingface_hub.constants as hconstants
    from datasets.utils import logging as dlogging
    from huggingface_hub.utils import logging as hlogging

    saved = (dconfig.HF_HUB_OFFLINE, dconfig.HF_DATASETS_OFFLINE, hconstants.HF_HUB_OFFLINE)
    levels = (dlogging.get_verbosity(), hlogging.get_verbosity())
    bars = dlogging.is_progress_bar_enabled()
    dconfig.HF_HUB_OFFLINE = dconfig.HF_DATASETS_OFFLINE = hconstants.HF_HUB_OFFLINE = True
    dlogging.set_verbosity_error()
    hlogging.set_verbosity_error()
    dlogging.disable_progress_bar()
    try:
        yield
    finally:
        dconfig.HF_HUB_OFFLINE, dconfig.HF_DATASETS_OFFLINE, hconstants.HF_HUB_OFFLINE = saved
        dlogging.set_verbosity(levels[0])
        hlogging.set_verbosity(levels[1])
        if bars:
            dlogging.enable_progress_bar()


def _load_hub(hub_id: str, subset: str | None, split: str, cache_dir: str | None, key: str):
    """``load_dataset`` of a hub id, offline at once (from the local cache only) when HF_HUB_OFFLINE is set or the
    hub does not answer one quick probe; every failure is one line naming the key."""
    import datasets

    endpoint = datasets.config.HF_ENDPOINT
    offline = "HF_HUB_OFFLINE is set" if datasets.config.HF_HUB_OFFLINE else None
    if offline is None:
        why = hub_unreachable(endpoint)
        offline = None if why is None else f"the hub ({endpoint}) cannot be reached ({why})"
    cache = cache_dir or datasets.config.HF_DATASETS_CACHE
    try:
        with _offline_hub() if offline else contextlib.nullcontext():
            ds = datasets.load_dataset(hub_id, subset, split=split, cache_dir=cache_dir)
    except (ValueError, KeyError) as exc:  # unknown split or subset
        text = _first_line(exc)
        if offline and "find cache" in text:  # the cache holds the dataset but not this subset
            raise ConfigError("subset", subset, f"{hub_id}: {offline}, and the datasets cache ({cache}) holds no "
                                                f"such subset ({text}); {HUB_FIX}") from None
        raise ConfigError(key, split, f"{hub_id}: {text}") from None
    except (OSError, ConnectionError) as exc:
        if offline:
            raise ConfigError("hub_id", hub_id, f"{offline}, and the dataset is not in the datasets cache "
                                                f"({cache}); {HUB_FIX}") from None
        raise ConfigError("hub_id", hub_id, f"cannot be loaded ({_first_line(exc)}); check the id on the hub, or "
                                            f"{HUB_FIX}") from None
    if offline and not datasets.config.HF_HUB_OFFLINE:
        warnings.warn(ConfigWarning(f"data.hub_id = {hub_id!r}: {offline}; the copy in the datasets cache ({cache}) "
                                    "is used"), stacklevel=2)
    return ds


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
        return _from_dataset(_load_hub(hub_id, subset, split, cache_dir, key), split, hub_id, "hub_id")
    folder = Path(path).expanduser()
    if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
        import pyarrow as pa

        try:
            ds = datasets.load_from_disk(str(folder))
        except pa.ArrowTypeError as exc:  # its Arrow files' types differ: read them as files, column by column
            files = _saved_files(folder, split)
            if files is None:
                raise ConfigError("path", path, f"cannot be read with load_from_disk ({_first_line(exc)})") from None
            return _file_split(files, "arrow", split, path)
        except (OSError, ValueError, TypeError, KeyError, pa.ArrowException) as exc:
            raise ConfigError("path", path, f"cannot be read with load_from_disk ({_first_line(exc)}); save it "
                                            "again, or give a folder of parquet/arrow files") from None
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
        raise ConfigError("path", path, f"split {split!r} mixes .parquet and .arrow files; keep one format")
    kind = kinds.pop().lstrip(".")
    return _file_split(sorted(map(str, files)), kind, split, path)


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _saved_files(folder: Path, split: str) -> list[str] | None:
    """The Arrow files ``save_to_disk`` listed for ``split`` in its ``state.json`` (names inside the folder only),
    or ``None`` when they cannot be told."""
    import json

    sub = folder / split if (folder / "dataset_dict.json").is_file() else folder
    if sub == folder and split != "train":  # one saved Dataset is split train only
        return None
    try:
        names = [d["filename"] for d in json.loads((sub / "state.json").read_text())["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not names or not all(isinstance(n, str) and n and Path(n).name == n and n.endswith(".arrow") for n in names):
        return None
    files = [sub / n for n in names]
    return [str(f) for f in files] if all(f.is_file() for f in files) else None


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
                    rows += sum(b.num_rows for b in batches)
                schemas.append(batches[0].schema if batches else _arrow_schema(f))
        except (OSError, pa.ArrowException) as exc:
            raise ConfigError("path", source, f"{f}: cannot be read as {kind} ({_first_line(exc)[:200]}); replace "
                                              "or remove the file") from None
    if any(s.names != schemas[0].names for s in schemas):
        raise ConfigError("path", source, f"the {split!r} files do not all have the same columns; give every file "
                                          "of a split the same columns")
    schema, unreadable = _reconcile(files, schemas, source)
    return Split(split, _features(schema or schemas[0], unreadable), rows, files=files, kind=kind, source=source,
                 schema=schema)


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
