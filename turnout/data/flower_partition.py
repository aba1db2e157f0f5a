"""Flower Datasets' partitioners by name: the same seed gives the same partition in Flower and in turnout.

Flower users split a Hugging Face dataset with ``flwr_datasets.partitioner`` classes (IID,
Dirichlet, shard/pathological, natural id, linear, square, exponential, size, inner Dirichlet …).
``partition: {name: flower, partitioner: DirichletPartitioner, options: {partition_by: label,
alpha: 0.5, seed: 42}}`` runs that very class on the dataset's column, so a study made with Flower
and one made with turnout split the rows identically. ``num_partitions`` is turnout's
``num_clients``; a ``seed`` left out is drawn from the run's partition stream (so it follows the
run seed); ``seed: 42`` is Flower's own default. Needs the optional ``flwr-datasets`` package.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import warnings
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from ..config.base import StrictModel
from ..core.errors import ConfigError
from .registry import PARTITIONERS

FLOWER_EXTRA = "pip install -c constraints.txt 'turnout[flower-datasets]'"
#: Column carrying each row's number through Flower's partition (Flower selects rows, this tells which).
_ROW = "__turnout_row__"
#: Partitioners that split columns, not rows: they have no client index sets.
_NOT_ROWS = ("VerticalEvenPartitioner", "VerticalSizePartitioner", "Partitioner")


def _module():
    """``flwr_datasets.partitioner``; keys of the errors here are relative to the partition block (validation)."""
    if importlib.util.find_spec("flwr_datasets") is None:
        raise ConfigError("name", "flower", f"needs Flower Datasets (flwr-datasets), which is not "
                                              f"installed: {FLOWER_EXTRA}")
    return importlib.import_module("flwr_datasets.partitioner")


def _partitioner_class(name: str):
    mod = _module()
    cls = getattr(mod, name, None)
    base = mod.Partitioner
    if name in _NOT_ROWS or not (isinstance(cls, type) and issubclass(cls, base)):
        names = sorted(n for n in dir(mod) if n.endswith("Partitioner") and n not in _NOT_ROWS)
        raise ConfigError("partitioner", name, f"not a row partitioner of flwr_datasets; one of: "
                                               f"{', '.join(names)}")
    return cls


def flower_refusal(exc: Exception, options: dict, partitioner: str, prefix: str) -> ConfigError:
    """Flower's own refusal as one line naming the option it is about (``prefix.KEY``, else ``prefix``)."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    options = {k: v for k, v in options.items() if k not in ("num_partitions", "seed") or k in str(exc)}
    if "attempts" in text and "min_partition_size" in options:  # Dirichlet: no draw met the minimum size
        return ConfigError(f"{prefix}.min_partition_size", options["min_partition_size"],
                           f"{partitioner}: no draw gave every client this many rows ({text}); lower it or raise "
                           "alpha")
    key = next((k for k in options if k.lower() in str(exc).lower()), None)
    if key is None:
        return ConfigError(prefix, options, f"{partitioner}: {text}")
    return ConfigError(f"{prefix}.{key}", options[key], f"{partitioner}: {text}")


def build(cls, kwargs: dict, partitioner: str, prefix: str):
    """``cls(**kwargs)``, its argument checks (ValueError, TypeError) refused as one line (:func:`flower_refusal`)."""
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise flower_refusal(exc, kwargs, partitioner, prefix) from None


@PARTITIONERS.register("flower")
class FlowerPartitioner:
    """A Flower Datasets partitioner by class name (DirichletPartitioner, IidPartitioner, …); needs flwr-datasets."""

    class Config(StrictModel):
        partitioner: str = Field(..., min_length=1, max_length=100,
                                 description="class name in flwr_datasets.partitioner, e.g. DirichletPartitioner")
        options: dict[str, Any] = Field(default_factory=dict,
                                        description="the class's arguments but num_partitions (turnout's num_clients); "
                                                    "a missing seed is drawn from the run seed")

        @model_validator(mode="after")
        def _binds(self):
            cls = _partitioner_class(self.partitioner)
            params = inspect.signature(cls).parameters
            if "num_partitions" in self.options:
                raise ConfigError("options.num_partitions", self.options["num_partitions"],
                                  "is set by data.num_clients; leave it out")
            for key in self.options:
                if key not in params:
                    raise ConfigError(f"options.{key}", self.options[key],
                                      f"{self.partitioner} takes no such argument; it takes "
                                      f"{', '.join(p for p in params if p != 'num_partitions')}")
            missing = [p for p, v in params.items() if v.default is inspect.Parameter.empty
                       and p != "num_partitions" and p not in self.options]
            if missing:
                raise ConfigError(f"options.{missing[0]}", None, f"{self.partitioner} needs it")
            trial = {**self.options, **({"num_partitions": 2} if "num_partitions" in params else {})}
            build(cls, trial, self.partitioner, "options")  # the class's own argument checks, now
            return self

    @classmethod
    def reads_columns(cls, cfg: "FlowerPartitioner.Config") -> list[str]:
        by = cfg.options.get("partition_by")
        return [] if by in (None, "label") else [str(by)]

    @classmethod
    def sets_num_clients(cls, cfg: "FlowerPartitioner.Config") -> bool:
        """A partitioner without ``num_partitions`` (natural id) makes as many clients as the data has ids."""
        return "num_partitions" not in inspect.signature(_partitioner_class(cfg.partitioner)).parameters

    @classmethod
    def kwargs(cls, cfg: "FlowerPartitioner.Config", num_clients: int | None, rng: np.random.Generator) -> dict:
        """The arguments the Flower class is built with: the options, ``num_partitions`` and a seed."""
        flower_cls = _partitioner_class(cfg.partitioner)
        params = inspect.signature(flower_cls).parameters
        kw = dict(cfg.options)
        if "num_partitions" in params:
            kw["num_partitions"] = int(num_clients)
        if "seed" in params and "seed" not in kw:
            kw["seed"] = int(rng.integers(2**31))
        return kw

    @classmethod
    def assign(cls, cfg: "FlowerPartitioner.Config", labels: np.ndarray, num_clients: int | None,
               rng: np.random.Generator, columns: dict[str, np.ndarray]) -> np.ndarray:
        import datasets

        by = cfg.options.get("partition_by")
        data: dict[str, Any] = {_ROW: np.arange(len(labels), dtype=np.int64)}
        if by is not None:
            if by in columns:
                values = columns[by]
            elif by == "label":
                values = labels
            else:
                raise ConfigError("partition.options.partition_by", by, "names no column of this dataset")
            data[by] = values.tolist() if values.dtype == object else values
        flower = build(_partitioner_class(cfg.partitioner), cls.kwargs(cfg, num_clients, rng), cfg.partitioner,
                       "partition.options")
        flower.dataset = datasets.Dataset.from_dict(data)
        out = np.full(len(labels), -1, dtype=np.int64)
        try:
            with warnings.catch_warnings():  # its retries warn once a draw; the refusal below says it once
                warnings.filterwarnings("ignore", category=UserWarning, module="flwr_datasets")
                for i in range(flower.num_partitions):
                    rows = np.asarray(flower.load_partition(i)[_ROW], dtype=np.int64)
                    out[rows] = i
        except (ValueError, TypeError) as exc:  # Flower's own refusals (no Dirichlet draw met min_partition_size)
            raise flower_refusal(exc, cfg.options, cfg.partitioner, "partition.options") from None
        return out
