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

import contextlib
import importlib.util
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..core.errors import ConfigError, ConfigWarning, DataError

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
        text = " ".join(str(exc).split())
        if offline and "find cache" in text:  # the cache holds the dataset but not this subset
            raise ConfigError("subset", subset, f"{hub_id}: {offline}, and the datasets cache ({cache}) holds no "
                                                f"such subset ({text}); {HUB_FIX}") from None
        raise ConfigError(key, split, f"{hub_id}: {text}") from None
    except (OSError, ConnectionError) as exc:
        if offline:
            raise ConfigError("hub_id", hub_id, f"{offline}, and the dataset is not in the datasets cache "
                                                f"({cache}); {HUB_FIX}") from None
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise ConfigError("hub_id", hub_id, f"cannot be loaded ({text}); check the id on the hub, or {HUB_FIX}") \
            from None
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
        return _from_dataset(_load_hub(hub_id, subset, split, cache_dir, key), split, hub_id)
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
