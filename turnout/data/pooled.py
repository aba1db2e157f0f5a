"""Turn a pooled dataset (no natural clients) into a federated one with a partitioner.

Digits, Fashion-MNIST and MNIST have no per-user split, so their training pool is divided by a
registered partitioner (IID, Dirichlet label skew, shards, ...). Each client's rows are then split
into a local train part and a local test part (``client_test_fraction``), and the dataset's own
held-out test set becomes the server test set.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from ..config.base import StrictModel
from ..config.components import validate_component
from ..config.limits import MAX_CLIENTS, MAX_SEED
from ..core import rng as rngmod
from ..core.errors import ConfigError
from .federated import DataFootprint, FederatedDataset, group_by_client, offsets_from_counts
from .partition import assign_rows, partitioner_columns, sets_num_clients
from .registry import PARTITIONERS


class PooledSplitConfig(StrictModel):
    """Options shared by every dataset that needs a partitioner."""

    num_clients: int = Field(100, ge=1, le=MAX_CLIENTS, description="clients the training pool is divided over")
    partition: dict[str, Any] = Field(default_factory=lambda: {"name": "iid"}, description="partitioner block "
                                      "{name: ..., options}; see `turnout list data.partition`")
    client_test_fraction: float = Field(0.1, ge=0.0, lt=1.0, description="share of each client's rows kept as "
                                        "its local test part")
    data_seed: int | None = Field(None, ge=0, le=MAX_SEED,
                                  description="seed of the data: the partition, the local train/test split (and "
                                              "digits' server test split, IDX subsets); default: the run seed (a "
                                              "fixed value keeps one task across seeds, as FedGS does)")

    @model_validator(mode="after")
    def _check_partition(self):
        part_cls, part_cfg = validate_component(PARTITIONERS, self.partition, "partition")
        needs = partitioner_columns(part_cls, part_cfg)
        if (needs or sets_num_clients(part_cls, part_cfg)) and not self.has_columns():
            raise ConfigError("partition.name", self.partition.get("name"),
                              "reads a client-id column, and this dataset has no named columns; use it with "
                              "data: {name: huggingface, client_id: COLUMN}, or choose a label partitioner")
        return self

    @classmethod
    def has_columns(cls) -> bool:
        """Whether the dataset can hand named columns (a writer id) to a partitioner; pooled arrays cannot."""
        return False


def pooled_footprint(cfg: PooledSplitConfig, rows: int, input_shape: tuple[int, ...], num_classes: int,
                     raw_bytes: int = 0) -> DataFootprint:
    """Size of a pooled dataset of ``rows`` float32 samples once split: the pool, its train/test copies
    (about three float32 copies in all) plus whatever the loader reads first (``raw_bytes``), and
    the partition's per-client arrays."""
    per_row = 4 * math.prod(input_shape)
    data = rows * (3 * per_row + 4 * 8) + raw_bytes
    clients = cfg.num_clients * 16 * 8
    return DataFootprint(data + clients, "num_clients" if clients > data else "name", num_clients=cfg.num_clients,
                         input_shape=tuple(input_shape), num_classes=num_classes,
                         max_client_rows=rows)


def split_rows(y: np.ndarray, cfg: PooledSplitConfig, seed: int, columns: dict[str, np.ndarray] | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row indices of every client's local train and test parts, and their per-client counts.

    The partitioner assigns rows to clients (a natural partition decides the number of clients
    itself); each client's rows are shuffled and its last ``client_test_fraction`` go to its local
    test part. Returns ``(train_rows, test_rows, train_counts, test_counts)``, the rows grouped by client.
    """
    seed = seed if cfg.data_seed is None else cfg.data_seed
    part_cls, part_cfg = validate_component(PARTITIONERS, cfg.partition, "partition")
    client_of_row = assign_rows(part_cls, part_cfg, y, cfg.num_clients, rngmod.stream(seed, "partition"), columns)
    num_clients = int(client_of_row.max()) + 1 if sets_num_clients(part_cls, part_cfg) else cfg.num_clients
    order, offsets = group_by_client(client_of_row, num_clients)
    # Shuffle within each client (one stream for the whole population, so it is vectorised),
    # then send the last ``client_test_fraction`` of each client's rows to its local test part.
    r = rngmod.stream(seed, "client-split")
    counts = np.diff(offsets)
    owner = np.repeat(np.arange(num_clients), counts)
    order = order[np.lexsort((r.random(len(order)), owner))]
    n_test = np.floor(counts * cfg.client_test_fraction).astype(np.int64)
    pos = np.arange(len(order)) - np.repeat(offsets[:-1], counts)
    is_test = pos >= np.repeat(counts - n_test, counts)
    return order[~is_test], order[is_test], counts - n_test, n_test


def split_pool(name: str, x: np.ndarray, y: np.ndarray, x_server_test: np.ndarray, y_server_test: np.ndarray,
               num_classes: int, cfg: PooledSplitConfig, seed: int, extras: dict | None = None) -> FederatedDataset:
    """Partition ``(x, y)`` over ``cfg.num_clients`` clients and carve each client's local test part."""
    tr, te, n_train, n_test = split_rows(y, cfg, seed)
    return FederatedDataset(
        name=name,
        x_train=x[tr], y_train=y[tr].astype(np.int64), train_offsets=offsets_from_counts(n_train),
        x_test=x[te], y_test=y[te].astype(np.int64), test_offsets=offsets_from_counts(n_test),
        x_server_test=x_server_test, y_server_test=y_server_test.astype(np.int64),
        num_classes=num_classes, input_shape=tuple(x.shape[1:]), extras=extras or {},
    )
