"""Hugging Face datasets as federated data: by hub id, a ``save_to_disk`` folder or parquet/arrow files.

This is how FL researchers keep the seed papers' datasets today (Flower Datasets reads the same
hub sets): ``flwrlabs/femnist`` with its writer id, ``uoft-cs/cifar10``, ``flwrlabs/shakespeare``.
``data: {name: huggingface, hub_id: flwrlabs/femnist, input: image, label: character, client_id:
writer_id}`` gives one client per writer (``partition: natural``); any partitioner of turnout, or of
Flower Datasets (``partition: {name: flower, ...}``), splits a set without writers.

The split is read in two passes (:mod:`.hf_source`): the small columns first (labels, ids), which
decide the partition and so where every row goes; then the input column batch by batch, each
row converted (:mod:`.hf_columns`) and written straight into its place in the client-ordered
arrays. Images stay uint8 (the model scales them, :class:`~.federated.InputScaling`), so a
million 28×28 images need their 784 MB plus a batch, never a float32 copy of the set.

The server test set is ``test_split`` or, without one, a random ``test_fraction`` of the split
held out before partitioning; each client keeps ``client_test_fraction`` of its rows as its local test part.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from ..config.base import PathText, StrictModel
from ..config.components import validate_component
from ..config.limits import MAX_FEATURES, MAX_SAMPLES
from ..core import rng as rngmod
from ..core.errors import ConfigError, DataError
from .digits import server_test_mask
from .federated import DataFootprint, FederatedDataset, InputScaling, offsets_from_counts
from .hf_columns import AUDIO_REFUSAL, encode_labels, input_kind, make_converter
from .hf_source import Split, Unreadable, local_path_problem, open_split, require_datasets
from .partition import partitioner_columns, sets_num_clients
from .pooled import PooledSplitConfig, split_rows
from .registry import DATASETS, PARTITIONERS

#: Bytes per row besides the input: labels, ids, the partition's index arrays and where each row goes.
ROW_OVERHEAD = 96



#: a Hugging Face repository id: an optional namespace and a name, each of letters, digits, '-', '_' and '.'
_HUB_PART = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")


def is_hub_id(text: str) -> bool:
    """Whether ``text`` is a hub repository id (``flwrlabs/femnist``, ``mnist``), checked before anything is opened,
    so a path (``../../etc/passwd``) is never read as one."""
    parts = text.split("/")
    return 1 <= len(parts) <= 2 and all(_HUB_PART.match(p) and ".." not in p and "--" not in p for p in parts)


class Normalization(StrictModel):
    """``(x / 255 − mean) / std`` for uint8 inputs, one value or one per channel (on the [0, 1] scale)."""

    mean: list[float] = Field([0.0], min_length=1, max_length=64, description="subtracted after dividing by 255")
    std: list[Annotated[float, Field(gt=0.0)]] = Field([1.0], min_length=1, max_length=64,
                                                       description="divides after the mean is subtracted")


@DATASETS.register("huggingface")
class HuggingFaceDataset:
    """A Hugging Face dataset (hub id or local folder) with natural clients or any partitioner; needs `datasets`.

    ``hub_id`` loads through the ``datasets`` library and its cache (downloading only where the
    library would); ``path`` reads a ``save_to_disk`` folder or a folder of parquet/arrow files.
    ``input`` names the image, array or text column, ``label`` the class column, ``client_id`` a
    writer/speaker column (which makes ``partition: natural`` the default).
    """

    class Config(PooledSplitConfig):
        hub_id: str | None = Field(None, min_length=1, max_length=300,
                                   description="dataset on the Hugging Face hub, e.g. flwrlabs/femnist")
        path: PathText | None = Field(
            None, description="local folder: written by save_to_disk, or holding parquet/arrow files")
        subset: str | None = Field(None, max_length=200, description="the hub dataset's configuration (subset) name")
        cache_dir: str | None = Field(None, max_length=4096,
                                      description="datasets cache for hub_id (default: HF_DATASETS_CACHE)")
        split: str = Field("train", min_length=1, max_length=200, description="split the clients' data comes from")
        test_split: str | None = Field(None, max_length=200,
                                       description="split used as the server test set (None: hold out test_fraction)")
        test_fraction: float = Field(0.1, gt=0.0, lt=1.0,
                                     description="without test_split: share of the split held out as server test set")
        input: str = Field("image", min_length=1, max_length=200, description="column holding the model's input")
        input_kind: Literal["auto", "image", "array", "text"] = Field(
            "auto", description="how the input column is read (auto: from its type; audio is not supported)")
        label: str = Field("label", min_length=1, max_length=200, description="column holding the class")
        client_id: str | None = Field(None, max_length=200,
                                      description="column holding a natural client id (writer, speaker, role); "
                                                  "makes partition: natural the default")
        num_classes: int | None = Field(None, ge=2, le=1_000_000,
                                        description="None: the ClassLabel's names, else the largest label + 1")
        channels: Literal[1, 3] | None = Field(None, description="images: convert to 1 (greyscale) or 3 (RGB) "
                                                                 "channels; None: as the first image is")
        normalize: Normalization = Field(default_factory=Normalization,
                                         description="uint8 inputs become (x / 255 - mean) / std in the model")
        input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] | None = Field(
            None, min_length=1, max_length=4, description="arrays: reshape each row, e.g. [1, 28, 28]")
        seq_len: int = Field(80, ge=1, le=100_000, description="text: characters of context per sample")
        limit_train: int | None = Field(None, ge=1, le=MAX_SAMPLES,
                                        description="use a random subset of this many rows of the split")
        limit_test: int | None = Field(None, ge=1, le=MAX_SAMPLES,
                                       description="use a random subset of this many server test rows")

        @model_validator(mode="before")
        @classmethod
        def _defaults(cls, data: Any) -> Any:
            """Refuse without ``datasets``; a client_id column makes ``natural`` the default partition."""
            require_datasets()
            if not isinstance(data, dict):
                return data
            data = dict(data)
            client = data.get("client_id")
            part = data.get("partition")
            if client is not None and part is None:
                data["partition"] = part = {"name": "natural"}
            if isinstance(part, str):
                data["partition"] = part = {"name": part}
            if isinstance(part, dict) and part.get("name") == "natural":
                if part.get("by") is None and client is not None:
                    data["partition"] = {**part, "by": client}
                if "num_clients" in data:
                    raise ConfigError("num_clients", data["num_clients"],
                                      "a natural partition makes one client per id; cap them with "
                                      "partition.max_clients instead")
            return data

        @model_validator(mode="after")
        def _where(self):
            if (self.hub_id is None) == (self.path is None):
                raise ConfigError("path", self.path, "give exactly one of path (a local folder) and hub_id")
            if self.hub_id is not None and not is_hub_id(self.hub_id):
                raise ConfigError("hub_id", self.hub_id, "a hub id is namespace/name (letters, digits, '-', "
                                                         "'_', '.'), e.g. flwrlabs/femnist; a local folder goes "
                                                         "in data.path")
            if self.partition.get("name") == "natural" and self.partition.get("by") is None:
                raise ConfigError("partition.by", None, "required: the column holding the client id (writer, "
                                                        "speaker), or set data.client_id")
            if self.path is not None:
                problem = local_path_problem(self.path)
                if problem:
                    raise ConfigError("path", self.path, problem)
                self._check_columns()
            return self

        @classmethod
        def has_columns(cls) -> bool:
            return True

        def columns_needed(self) -> list[str]:
            """The small columns read whole: the label, the client id, what the partitioner reads."""
            part_cls, part_cfg = validate_component(PARTITIONERS, self.partition, "partition")
            cols = [self.label, self.client_id, *partitioner_columns(part_cls, part_cfg)]
            return list(dict.fromkeys(c for c in cols if c is not None))

        def column_keys(self) -> list[tuple[str, str]]:
            """``(key, column)`` for every column the config names: input, label, client id, the partition's."""
            keys = [("input", self.input), ("label", self.label), ("client_id", self.client_id)]
            by = "partition.options.partition_by" if self.partition.get("name") == "flower" else "partition.by"
            keys += [(by, c) for c in self.columns_needed() if c not in (self.label, self.client_id)]
            return [(k, c) for k, c in keys if c is not None]

        def _check_columns(self) -> None:
            """A local dataset's columns are known without reading its rows: name the missing one now."""
            split = open_split(self.path, None, self.split)
            check_columns(self, split)
            if input_kind(split.features[self.input]) == "audio":
                raise ConfigError("input", self.input, AUDIO_REFUSAL)
            if self.test_split is not None:
                check_columns(self, open_split(self.path, None, self.test_split, key="test_split"), split)

    @classmethod
    def footprint(cls, cfg: "HuggingFaceDataset.Config") -> DataFootprint | None:
        """A local set's rows × its input's bytes (read from the metadata and first row); ``None`` for a hub id.

        A hub id's size is unknown without asking the hub, and ``turnout check`` must not download.
        """
        if cfg.path is None:
            return None
        try:
            split = open_split(cfg.path, None, cfg.split)
            conv = _converter(cfg, split)
            rows = min(split.num_rows, cfg.limit_train or split.num_rows)
            if cfg.test_split is not None:
                test = open_split(cfg.path, None, cfg.test_split)
                rows += min(test.num_rows, cfg.limit_test or test.num_rows)
        except (ConfigError, DataError):
            return None
        per_row = conv.dtype.itemsize * math.prod(conv.shape)
        labels = split.features[cfg.label]
        classes = cfg.num_classes or (len(labels.names) if hasattr(labels, "names") else None)
        clients = cfg.num_clients if not _natural(cfg) else None
        return DataFootprint(rows * (per_row + ROW_OVERHEAD), "path", num_clients=clients,
                             input_shape=conv.shape, num_classes=classes, max_client_rows=rows)

    @classmethod
    def build(cls, cfg: "HuggingFaceDataset.Config", seed: int) -> FederatedDataset:
        require_datasets()
        data_seed = seed if cfg.data_seed is None else cfg.data_seed
        split = open_split(cfg.path, cfg.hub_id, cfg.split, cfg.subset, cfg.cache_dir)
        test = None if cfg.test_split is None else \
            open_split(cfg.path, cfg.hub_id, cfg.test_split, cfg.subset, cfg.cache_dir, key="test_split")
        check_columns(cfg, split)
        if test is not None:
            check_columns(cfg, test, split)
        conv = _converter(cfg, split)
        scaling = _scaling(cfg, conv)
        # Pass 1: the small columns decide which rows are used, and where each goes.
        rows = _subset(split.num_rows, cfg.limit_train, data_seed, "limit-train")
        test_rows = None if test is None else _subset(test.num_rows, cfg.limit_test, data_seed, "limit-test")
        label_columns = [_decoded(split.column(cfg.label)), None if test is None else _decoded(test.column(cfg.label))]
        for col in label_columns:
            if col is not None and col.null_count:
                raise ConfigError("label", cfg.label, f"{col.null_count} of {len(col)} rows have no label (null); "
                                                      "drop or fill them before the data is used")
        labels = encode_labels(split.features[cfg.label], *label_columns, conv.kind == "text", cfg.num_classes,
                               cfg.label)
        y_all = labels.train
        if test is None:
            held = server_test_mask(len(rows), cfg.test_fraction, data_seed)
            server, pool = rows[held], rows[~held]
            y_server = y_all[server]
        else:
            pool, server = rows, None
            y_server = labels.test[test_rows]
        columns = {}
        keys = {c: k for k, c in reversed(cfg.column_keys()) if k not in ("input", "label")}  # the id keys
        for c in cfg.columns_needed():
            if c == cfg.label:
                columns[c] = y_all[pool]
            else:
                flower = keys[c] == "partition.options.partition_by"  # Flower's column: floats too
                columns[c] = id_column(split, keys[c], c, numbers=flower)[pool]
        tr, te, n_train, n_test = split_rows(y_all[pool], cfg, seed, columns)
        if len(n_train) == 0:
            raise ConfigError("partition", cfg.partition, f"made no clients of {split.source}'s rows; choose another "
                                                          "partition or its options")
        src_tr, src_te = pool[tr], pool[te]
        del columns, tr, te, pool, rows  # pass 2 holds the arrays it fills, not pass 1's index arrays
        # Pass 2: every input row converted and written once, straight into its client-ordered place.
        x_train = np.empty((len(src_tr), *conv.shape), conv.dtype)
        x_test = np.empty((len(src_te), *conv.shape), conv.dtype)
        targets = [(x_train, src_tr), (x_test, src_te)]
        if server is not None:
            x_server = np.empty((len(server), *conv.shape), conv.dtype)
            targets.append((x_server, server))
        _fill(split, conv, targets)
        if x_train.dtype.kind == "f" and len(x_train) and not np.isfinite(x_train).any():
            raise ConfigError("input", cfg.input, "has no finite value in the clients' rows (every value is NaN or "
                                                  "infinite); name a column of numbers")
        if test is not None:
            x_server = np.empty((len(test_rows), *conv.shape), conv.dtype)
            _fill(test, conv, [(x_server, test_rows)])
        names = _client_names(cfg, split, src_tr[offsets_from_counts(n_train)[:-1]])
        return FederatedDataset(
            name="huggingface",
            x_train=x_train, y_train=y_all[src_tr], train_offsets=offsets_from_counts(n_train),
            x_test=x_test, y_test=y_all[src_te], test_offsets=offsets_from_counts(n_test),
            x_server_test=x_server, y_server_test=y_server,
            num_classes=labels.num_classes, input_shape=conv.shape, client_names=names, input_scaling=scaling,
        )


def _decoded(col):
    """A dictionary-encoded column (strings stored once each) as its plain values."""
    import pyarrow as pa

    return col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col


def check_columns(cfg: HuggingFaceDataset.Config, split: Split, train: Split | None = None) -> None:
    """Every column the config names is in the split (a test split, given its ``train`` split: the input and label,
    the input of the same kind) and readable, else one line naming its key."""
    test = train is not None
    keys = cfg.column_keys() if not test else [("input", cfg.input), ("label", cfg.label)]
    for key, col in keys:
        if col not in split.features:
            where = f"{split.source} (split {split.name!r})" if test else split.source
            raise ConfigError(key, col, f"no such column in {where}; its columns are {', '.join(split.features)}")
        if isinstance(split.features[col], Unreadable):
            raise split.features[col].refuse(key, col)
    if test and (kind := input_kind(split.features[cfg.input])) != (ours := input_kind(train.features[cfg.input])):
        raise ConfigError("test_split", split.name, f"its {cfg.input!r} column holds {kind} data, split "
                                                    f"{train.name!r}'s {ours}; give splits of one kind")


def _scaling(cfg: HuggingFaceDataset.Config, conv) -> InputScaling | None:
    """How uint8 images / arrays become floats in the model (text ids stay ids); checks the per-channel lengths."""
    if conv.dtype != np.uint8 or conv.kind == "text":
        return None
    channels = conv.shape[0] if len(conv.shape) >= 2 else 1
    for key, v in (("normalize.mean", cfg.normalize.mean), ("normalize.std", cfg.normalize.std)):
        if len(v) not in (1, channels):
            raise ConfigError(key, v, f"give one value or one per channel ({channels} in {cfg.input!r})")
    return InputScaling(255.0, tuple(cfg.normalize.mean), tuple(cfg.normalize.std))


def _client_names(cfg: HuggingFaceDataset.Config, split: Split, first_rows: np.ndarray) -> np.ndarray | None:
    """Each client's id (its first row's value of the column a natural partition groups by), else None."""
    part_cls, part_cfg = validate_component(PARTITIONERS, cfg.partition, "partition")
    by = partitioner_columns(part_cls, part_cfg)
    if not sets_num_clients(part_cls, part_cfg) or len(by) != 1:
        return None
    import pyarrow as pa

    column = _decoded(split.column(by[0]))
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        codes, sorted_names = _ranked(column)
        return sorted_names[codes[first_rows]]
    return _plain(column)[first_rows].astype(str)


def _natural(cfg: HuggingFaceDataset.Config) -> bool:
    part_cls, part_cfg = validate_component(PARTITIONERS, cfg.partition, "partition")
    return sets_num_clients(part_cls, part_cfg)


def _converter(cfg: HuggingFaceDataset.Config, split: Split):
    shape = tuple(cfg.input_shape) if cfg.input_shape is not None else None
    return make_converter(split, cfg.input, cfg.input_kind, channels=cfg.channels, seq_len=cfg.seq_len,
                          input_shape=shape)


def _subset(n: int, limit: int | None, seed: int, purpose: str) -> np.ndarray:
    """All row numbers, or a sorted random ``limit`` of them."""
    if n == 0:
        raise DataError("the split has no rows")
    if limit is None or limit >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(rngmod.stream(seed, purpose).choice(n, size=limit, replace=False)).astype(np.int64)


def id_column(split, key: str, name: str, numbers: bool = False) -> np.ndarray:
    """Column ``name`` of ``split`` as client ids or labels (:func:`_plain`), refused in one line naming ``key``
    when it cannot be: values that are not integers or strings (an image, a list, a float), or missing ones.
    ``numbers``: finite floats too (what Flower's ContinuousPartitioner splits by)."""
    import pyarrow as pa

    col = split.column(name)
    t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    floats = numbers and pa.types.is_floating(t)
    if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) or floats):
        what = "ids or numbers (integers, floats or strings)" if numbers else "ids (integers or strings)"
        raise ConfigError(key, name, f"the column holds {t} values, not {what}; name a column of writer/speaker "
                                     "ids or class labels")
    if col.null_count:
        raise ConfigError(key, name, f"{col.null_count} of {len(col)} rows have no value (null); drop or fill "
                                     "them before the data is used")
    if floats:
        values = col.cast(t).to_numpy(zero_copy_only=False).astype(np.float64)
        if not np.isfinite(values).all():
            raise ConfigError(key, name, f"{int((~np.isfinite(values)).sum())} of {len(values)} rows are NaN or "
                                         "infinite; drop or fill them before the data is used")
        return values
    if pa.types.is_dictionary(col.type):
        col = col.cast(t)
    return _plain(col)


def _plain(arr) -> np.ndarray:
    """A small Arrow column as numpy; strings (writer ids) as int64 ranks in their sorted distinct values.

    Ranks keep the sorted order and the equalities of the strings, which is all a partition looks
    at, at 8 bytes a row instead of a Python string each (a million writer ids: 8 MB, not 70).
    """
    import pyarrow as pa

    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return _ranked(arr)[0]
    return arr.to_numpy(zero_copy_only=False)


def _ranked(arr) -> tuple[np.ndarray, np.ndarray]:
    """``(rank of each row's string among the distinct strings in sorted order, those strings sorted)``."""
    enc = arr.dictionary_encode()
    names = np.asarray(enc.dictionary.to_pylist(), dtype=object)
    order = np.argsort(names.astype(str), kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank[enc.indices.to_numpy(zero_copy_only=False)], names[order].astype(str)


def _fill(split: Split, conv, targets: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Stream ``conv``'s column once and write source row ``rows[i]`` of each target to ``out[i]``."""
    which = np.full(split.num_rows, -1, dtype=np.int8)
    pos = np.zeros(split.num_rows, dtype=np.int64)
    for k, (_, rows) in enumerate(targets):
        which[rows] = k
        pos[rows] = np.arange(len(rows), dtype=np.int64)
    for start, batch in split.batches([conv.column]):
        stop = start + batch.num_rows
        w = which[start:stop]
        if not (w >= 0).any():
            continue
        col = batch.column(0)
        used = np.flatnonzero(w >= 0)
        if len(used) < batch.num_rows:  # decode only the rows that are kept
            import pyarrow as pa

            col = col.take(pa.array(used))
        xs = conv.convert(col)
        for k, (out, _) in enumerate(targets):
            sel = w[used] == k
            out[pos[start + used[sel]]] = xs[sel]
