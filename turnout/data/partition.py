"""Partitioners: split a pooled labelled dataset over clients.

Each partitioner maps labels to ``client_of_row`` (int64, one client id per row, −1 = row unused)
and never builds per-client Python objects: the work is a few numpy passes, looping at most over
classes, so 1,000 clients × 60,000 rows takes milliseconds. All randomness comes from the
``rng`` passed in, so a partition is fixed by the run seed.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_CLIENTS, MAX_COUNT, MAX_SAMPLES, MAX_SCALE
from ..core.errors import ConfigError
from .registry import PARTITIONERS


def _check_population(labels: np.ndarray, num_clients: int, per_client: int = 1) -> int:
    """Number of rows; a ConfigError on ``num_clients`` when there are fewer rows than clients need."""
    n = len(labels)
    if num_clients < 1 or num_clients * per_client > n:
        need = "must be >= 1" if num_clients < 1 else f"must be <= number of samples ({n})" if per_client == 1 \
            else f"needs {per_client} rows per client but there are {n} samples; at most {n // per_client} clients"
        raise ConfigError("num_clients", num_clients, need)
    return n


def _class_index(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """Labels as dense class ids ``0..C-1`` (any label values work) and ``C``."""
    classes, inv = np.unique(np.asarray(labels).ravel(), return_inverse=True)
    return inv.astype(np.int64), len(classes)


def _rows_by_class(cls_of_row: np.ndarray, num_classes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by class, randomly ordered within a class, and the class offsets."""
    order = np.lexsort((rng.random(len(cls_of_row)), cls_of_row))
    counts = np.bincount(cls_of_row, minlength=num_classes)
    offsets = np.zeros(num_classes + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return order, offsets


def _cut_by_proportions(n: int, p: np.ndarray) -> np.ndarray:
    """Client id of each of ``n`` positions when they are cut at ``cumsum(p)·n`` (p sums to 1)."""
    cuts = (np.cumsum(p)[:-1] * n).astype(np.int64)
    return np.searchsorted(cuts, np.arange(n), side="right").astype(np.int64)


def _sizes_to_clients(sizes: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``client_of_row`` giving client ``k`` ``sizes[k]`` random rows (rows beyond sum(sizes) stay −1)."""
    out = np.full(n, -1, dtype=np.int64)
    perm = rng.permutation(n)[: int(sizes.sum())]
    out[perm] = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    return out


@PARTITIONERS.register("iid")
class IIDPartitioner:
    """IID: rows shuffled and dealt out so every client has the same number of rows (±1).

    The baseline without any heterogeneity; every row is used.
    """

    class Config(StrictModel):
        pass

    @classmethod
    def assign(cls, cfg: "IIDPartitioner.Config", labels: np.ndarray, num_clients: int,
               rng: np.random.Generator) -> np.ndarray:
        n = _check_population(labels, num_clients)
        out = np.empty(n, dtype=np.int64)
        out[rng.permutation(n)] = np.arange(n, dtype=np.int64) % num_clients
        return out


@PARTITIONERS.register("dirichlet")
class DirichletPartitioner:
    """Label skew: each class is spread over clients in proportions drawn from Dirichlet(alpha).

    Hsu et al. 2019 / FedML ``partition_class_samples_with_dirichlet_distribution``: for every class
    a proportion vector ``p ~ Dir(alpha·1)`` over clients is drawn and the class's shuffled rows are
    cut at ``cumsum(p)``. Small alpha (0.1) gives each client few classes; large alpha (100) is close
    to IID. With ``balance`` (FedML's rule), clients that already hold ``N/num_clients`` rows get no
    share of later classes, which keeps sizes from running away. The whole draw is repeated until
    every client has at least ``min_size`` rows, at most ``max_tries`` times, then it is an error.
    """

    class Config(StrictModel):
        alpha: float = Field(0.5, gt=0.0, le=MAX_SCALE,
                             description="Dirichlet concentration; small = strong label skew")
        min_size: int = Field(1, ge=0, le=MAX_SAMPLES,
                              description="redraw until every client has at least this many rows")
        max_tries: int = Field(100, ge=1, le=MAX_COUNT, description="redraws allowed before giving up")
        balance: bool = Field(True, description="FedML's rule: full clients get no share of later classes")

    @classmethod
    def assign(cls, cfg: "DirichletPartitioner.Config", labels: np.ndarray, num_clients: int,
               rng: np.random.Generator) -> np.ndarray:
        n = _check_population(labels, num_clients, max(1, cfg.min_size))
        cls_of_row, num_classes = _class_index(labels)
        order, offsets = _rows_by_class(cls_of_row, num_classes, rng)
        target = n / num_clients
        smallest = 0
        for _ in range(cfg.max_tries):
            out = np.empty(n, dtype=np.int64)
            sizes = np.zeros(num_clients, dtype=np.int64)
            for c in range(num_classes):
                rows = order[offsets[c]:offsets[c + 1]]
                p = rng.dirichlet(np.full(num_clients, cfg.alpha))
                if cfg.balance:
                    p = p * (sizes < target)
                    total = p.sum()
                    # Every client already full (only possible on the last classes): plain Dir(alpha).
                    p = p / total if total > 0 else rng.dirichlet(np.full(num_clients, cfg.alpha))
                who = _cut_by_proportions(len(rows), p)
                out[rows] = who
                sizes += np.bincount(who, minlength=num_clients)
            smallest = int(sizes.min())
            if smallest >= cfg.min_size:
                return out
        raise ConfigError("partition.min_size", cfg.min_size,
                          f"no Dirichlet(alpha={cfg.alpha}) draw in {cfg.max_tries} tries gave every one of "
                          f"{num_clients} clients that many rows (smallest: {smallest}); raise alpha, use fewer "
                          "clients, or lower min_size (0 allows empty clients)")


@PARTITIONERS.register("shards")
class ShardsPartitioner:
    """Pathological non-IID (McMahan et al. 2017): sort by label, cut into shards, give each client a few.

    Rows are sorted by label (random order within a label), cut into ``num_clients ×
    shards_per_client`` contiguous shards of equal size (±1 row, so every row is used), and the
    shards are dealt to clients at random. A client therefore sees at most ``shards_per_client``
    labels when class sizes are multiples of the shard size; a shard that straddles a class
    boundary adds one more (MNIST, 100 clients × 2 shards of 300: mostly 2 labels, a few 3, as in the paper).
    """

    class Config(StrictModel):
        shards_per_client: int = Field(2, ge=1, le=MAX_COUNT, description="shards (≈ labels) per client")

    @classmethod
    def assign(cls, cfg: "ShardsPartitioner.Config", labels: np.ndarray, num_clients: int,
               rng: np.random.Generator) -> np.ndarray:
        n = _check_population(labels, num_clients, cfg.shards_per_client)
        cls_of_row, num_classes = _class_index(labels)
        order, _ = _rows_by_class(cls_of_row, num_classes, rng)
        num_shards = num_clients * cfg.shards_per_client
        shard_of_pos = (np.arange(n, dtype=np.int64) * num_shards) // n  # equal shards, ±1 row
        client_of_shard = np.empty(num_shards, dtype=np.int64)
        client_of_shard[rng.permutation(num_shards)] = np.arange(num_shards) // cfg.shards_per_client
        out = np.empty(n, dtype=np.int64)
        out[order] = client_of_shard[shard_of_pos]
        return out


@PARTITIONERS.register("lognormal")
class LognormalPartitioner:
    """Quantity skew: client sizes proportional to lognormal(0, sigma) draws, labels IID.

    Each client first gets ``min_size`` rows; the rest are shared in proportion to
    ``w_k ~ lognormal(0, sigma)`` (largest-remainder rounding, so all rows are used). sigma = 1
    gives a spread of sizes roughly like LEAF's natural splits; larger sigma, heavier tail.
    """

    class Config(StrictModel):
        sigma: float = Field(1.0, gt=0.0, le=MAX_SCALE, description="std of log client size")
        min_size: int = Field(1, ge=0, le=MAX_SAMPLES,
                              description="rows every client gets before the proportional share")

    @classmethod
    def assign(cls, cfg: "LognormalPartitioner.Config", labels: np.ndarray, num_clients: int,
               rng: np.random.Generator) -> np.ndarray:
        n = _check_population(labels, num_clients, max(1, cfg.min_size))
        w = rng.lognormal(0.0, cfg.sigma, num_clients)
        rest = n - num_clients * cfg.min_size
        share = w / w.sum() * rest
        sizes = np.floor(share).astype(np.int64)
        left = rest - int(sizes.sum())
        if left:  # largest remainders get the leftover rows
            sizes[np.argsort(-(share - sizes), kind="stable")[:left]] += 1
        return _sizes_to_clients(sizes + cfg.min_size, n, rng)


@PARTITIONERS.register("zipf")
class ZipfPartitioner:
    """Label skew by a Zipf law: each client's class shares fall as rank^-s over its own random class order.

    Client ``k`` ranks the classes by a random permutation and prefers the class of rank ``r``
    (1-based) with weight ``r^-s / H`` (``s`` = exponent; s → 0 is IID, s = 1.5 puts about 50 % of a
    10-class client on its top class, s = 3 about 84 %). Every class's rows are then shared among
    clients in proportion to these weights, so every row is used and sizes stay close to equal; a
    client's label mix is Zipf up to what the class supply allows.
    """

    class Config(StrictModel):
        s: float = Field(1.5, gt=0.0, le=MAX_SCALE, description="Zipf exponent; larger = stronger label skew")

    @classmethod
    def assign(cls, cfg: "ZipfPartitioner.Config", labels: np.ndarray, num_clients: int,
               rng: np.random.Generator) -> np.ndarray:
        n = _check_population(labels, num_clients)
        cls_of_row, num_classes = _class_index(labels)
        order, offsets = _rows_by_class(cls_of_row, num_classes, rng)
        weights = np.arange(1, num_classes + 1, dtype=np.float64) ** -cfg.s
        weights /= weights.sum()
        # rank_of[k, c]: rank of class c in client k's random order (argsort of random keys).
        rank_of = np.argsort(rng.random((num_clients, num_classes)), axis=1)
        pref = weights[rank_of]  # (num_clients, num_classes), each row a permuted Zipf pmf
        out = np.empty(n, dtype=np.int64)
        for c in range(num_classes):
            rows = order[offsets[c]:offsets[c + 1]]
            out[rows] = _cut_by_proportions(len(rows), pref[:, c] / pref[:, c].sum())
        return out


def assign_rows(part_cls, part_cfg, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
                columns: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """``client_of_row`` from any partitioner; one that declares ``reads_columns`` also gets the data's columns.

    Most partitioners look at labels only. A natural partition (one client per writer) reads a
    client-id column, which only a dataset with named columns (``huggingface``) can hand over.
    """
    if getattr(part_cls, "reads_columns", None) is None:
        return part_cls.assign(part_cfg, labels, num_clients, rng)
    return part_cls.assign(part_cfg, labels, num_clients, rng, columns=columns or {})


def partitioner_columns(part_cls, part_cfg) -> list[str]:
    """The data columns a partitioner reads besides the labels (empty for label-only partitioners)."""
    reads = getattr(part_cls, "reads_columns", None)
    return [] if reads is None else list(reads(part_cfg))


def sets_num_clients(part_cls, part_cfg) -> bool:
    """Whether the partitioner decides the number of clients itself (one per writer) instead of ``num_clients``."""
    fn = getattr(part_cls, "sets_num_clients", None)
    return bool(fn(part_cfg)) if fn is not None else False


@PARTITIONERS.register("natural")
class NaturalPartitioner:
    """Natural clients: one per distinct value of a client-id column (writer, speaker, role), as the data has them.

    Clients are the distinct ids in sorted order; each keeps all its rows. Ids with fewer than
    ``min_size`` rows are dropped (their rows unused); ``max_clients`` keeps a random subset of the
    rest (drawn from the partition stream, in sorted order), as LEAF's and FedScale's samplers do.
    The column comes from ``by`` or, for ``data: {name: huggingface}``, from ``data.client_id``.
    """

    class Config(StrictModel):
        by: str | None = Field(None, min_length=1, max_length=200,
                               description="column holding the client id (default: data.client_id)")
        min_size: int = Field(1, ge=1, le=MAX_SAMPLES, description="ids with fewer rows are left out")
        max_clients: int | None = Field(None, ge=1, le=MAX_CLIENTS,
                                        description="keep at most this many ids, a random subset (None: all)")

    @classmethod
    def reads_columns(cls, cfg: "NaturalPartitioner.Config") -> list[str]:
        return [cfg.by] if cfg.by is not None else []

    @classmethod
    def sets_num_clients(cls, cfg: "NaturalPartitioner.Config") -> bool:
        return True

    @classmethod
    def assign(cls, cfg: "NaturalPartitioner.Config", labels: np.ndarray, num_clients: int | None,
               rng: np.random.Generator, columns: dict[str, np.ndarray]) -> np.ndarray:
        if cfg.by is None or cfg.by not in columns:
            raise ConfigError("partition.by", cfg.by, "names no client-id column of this dataset; give the column "
                                                      "holding the writer / speaker id (data: {name: huggingface} "
                                                      "with client_id: COLUMN)")
        ids, inverse, counts = np.unique(np.asarray(columns[cfg.by]), return_inverse=True, return_counts=True)
        keep = np.flatnonzero(counts >= cfg.min_size)
        if cfg.max_clients is not None and len(keep) > cfg.max_clients:
            keep = np.sort(rng.choice(keep, size=cfg.max_clients, replace=False))
        if len(keep) == 0:
            raise ConfigError("partition.min_size", cfg.min_size,
                              f"no {cfg.by} value has that many rows (the largest has {int(counts.max())}); "
                              "lower min_size")
        client_of_id = np.full(len(ids), -1, dtype=np.int64)
        client_of_id[keep] = np.arange(len(keep), dtype=np.int64)
        return client_of_id[inverse.ravel()]
