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
import types
import typing
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
#: Row partitioners an experiment file cannot configure, and why.
_NOT_FROM_FILES = {"IdToSizeFncPartitioner": "takes a Python function (partition_id_to_size_fn), which an experiment "
                                             "file cannot hold; use SizePartitioner with partition_sizes"}


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
    if name in _NOT_FROM_FILES:
        raise ConfigError("partitioner", name, _NOT_FROM_FILES[name])
    if name in _NOT_ROWS or not (isinstance(cls, type) and issubclass(cls, base)):
        names = sorted(n for n in dir(mod) if n.endswith("Partitioner") and n not in _NOT_ROWS + tuple(_NOT_FROM_FILES))
        raise ConfigError("partitioner", name, f"not a row partitioner of flwr_datasets; one of: "
                                               f"{', '.join(names)}")
    return cls


def flower_refusal(exc: Exception, options: dict, partitioner: str, prefix: str,
                   num_clients: int | None = None) -> ConfigError:
    """Flower's own refusal as one line naming the option it is about (``prefix.KEY``: one given, else an argument
    the message names; else ``prefix``), or ``num_clients`` (Flower's num_partitions) when it is about that."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    low = text.lower()
    if num_clients is not None and "num_partitions" in low:
        return ConfigError("num_clients", num_clients, f"{partitioner}: {text}; lower num_clients (Flower's "
                                                       "num_partitions)")
    options = {k: v for k, v in options.items() if k not in ("num_partitions", "seed") or k.lower() in low}
    if "attempts" in text and "min_partition_size" in options:  # Dirichlet: no draw met the minimum size
        return ConfigError(f"{prefix}.min_partition_size", options["min_partition_size"],
                           f"{partitioner}: no draw gave every client this many rows ({text}); lower it or raise "
                           "alpha")
    key = next((k for k in options if _named(k, low) >= 0), None)
    if key is None:  # an argument left out (ShardPartitioner: "The shard_size needs to be specified ..."), first named
        cls = getattr(importlib.import_module("flwr_datasets.partitioner"), partitioner, None)
        params = [p for p in inspect.signature(cls).parameters if p != "num_partitions"] if cls else []
        named = sorted((_named(p, low), p) for p in params if _named(p, low) >= 0)
        if named:
            return ConfigError(f"{prefix}.{named[0][1]}", options.get(named[0][1]), f"{partitioner}: {text}")
        return ConfigError(prefix, options, f"{partitioner}: {text}")
    return ConfigError(f"{prefix}.{key}", options[key], f"{partitioner}: {text}")


#: Arguments that count something per client (Flower divides by some of them): at least 1.
_COUNTS = ("group_size", "shard_size", "num_shards_per_partition", "num_classes_per_partition",
           "num_unique_labels_per_partition")
#: Errors Flower's own code raises for options it cannot work with, at construction or when it splits the rows.
_FLOWER_ERRORS = (ValueError, TypeError, ArithmeticError, LookupError, AssertionError)
#: What a value of a plain annotated type is called in a refusal.
_TYPE_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", type(None): "null"}


def _type_problem(annotation, value) -> str | None:
    """What ``value`` should be (``None`` when it fits) for an argument annotated with plain types (int, float,
    bool, str, None, Literal choices), checked at validation; other annotations (lists, arrays) are Flower's to check.
    Flower compares or sorts these values, so a wrong type ended in a TypeError naming no option."""
    if isinstance(annotation, str) or annotation is inspect.Parameter.empty:
        return None
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    choices = [c for a in args if typing.get_origin(a) is typing.Literal for c in typing.get_args(a)]
    plain = [a for a in args if typing.get_origin(a) is not typing.Literal]
    if any(a not in _TYPE_NAMES for a in plain):
        return None
    fits = any(value == c and type(value) is type(c) for c in choices) or any(
        value is None if a is type(None) else
        isinstance(value, bool) if a is bool else
        isinstance(value, (int, float)) and not isinstance(value, bool) if a is float else
        isinstance(value, a) and not isinstance(value, bool) for a in plain)
    if fits:
        return None
    names = [_TYPE_NAMES[a] for a in plain] + [f"one of {', '.join(repr(c) for c in choices)}"] * bool(choices)
    return " or ".join(names)


def _arrays_only(annotation) -> bool:
    """Whether an argument's annotation allows numpy arrays and no lists (DistributionPartitioner's
    distribution_array): a YAML list is then passed as an array."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    return bool(args) and all(typing.get_origin(a) is np.ndarray or a is np.ndarray for a in args)


def _as_flower_values(cls, kwargs: dict, prefix: str) -> dict:
    """``kwargs`` with lists given for array-only arguments as numpy arrays (YAML has no arrays)."""
    out = dict(kwargs)
    for name, param in inspect.signature(cls).parameters.items():
        if isinstance(out.get(name), list) and _arrays_only(param.annotation):
            try:
                out[name] = np.asarray(out[name])
            except (ValueError, TypeError):  # ragged rows
                raise ConfigError(f"{prefix}.{name}", out[name], "must be a table of numbers, every row of one "
                                                                 "length") from None
    return out


def _named(arg: str, text: str) -> int:
    """Where lower-case ``text`` names argument ``arg`` (as ``partition_sizes`` or ``partition sizes``), else -1."""
    at = [i for i in (text.find(arg.lower()), text.find(arg.lower().replace("_", " "))) if i >= 0]
    return min(at, default=-1)


def build(cls, kwargs: dict, partitioner: str, prefix: str, num_clients: int | None = None):
    """``cls(**kwargs)``, its argument checks (ValueError, TypeError) refused as one line (:func:`flower_refusal`)."""
    kwargs = _as_flower_values(cls, kwargs, prefix)
    try:
        return cls(**kwargs)
    except _FLOWER_ERRORS as exc:
        raise flower_refusal(exc, kwargs, partitioner, prefix, num_clients) from None


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
            for key, value in self.options.items():
                wanted = _type_problem(params[key].annotation, value)
                if key == "partition_by" and not (isinstance(value, str) and value):
                    wanted = "a column name (a string, e.g. label)"
                if key in _COUNTS and isinstance(value, int) and value < 1:  # Flower divides by group_size
                    wanted = "a whole number >= 1"
                if wanted:
                    raise ConfigError(f"options.{key}", value, f"{self.partitioner} takes {wanted} here")
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
                       "partition.options", num_clients)
        flower.dataset = datasets.Dataset.from_dict(data)
        out = np.full(len(labels), -1, dtype=np.int64)
        try:
            with warnings.catch_warnings():  # its retries warn once a draw; the refusal below says it once
                warnings.filterwarnings("ignore", category=UserWarning, module="flwr_datasets")
                # the libraries under Flower (datasets, pyarrow, numpy) warn of their deprecations and of NaN
                # arithmetic: not the user's to read (a NaN ends in Flower's refusal below)
                for category in (FutureWarning, DeprecationWarning, RuntimeWarning):
                    warnings.filterwarnings("ignore", category=category)
                for i in range(flower.num_partitions):
                    rows = np.asarray(flower.load_partition(i)[_ROW], dtype=np.int64)
                    out[rows] = i
        except _FLOWER_ERRORS as exc:  # Flower's own refusals (no Dirichlet draw met min_partition_size)
            raise flower_refusal(exc, cfg.options, cfg.partitioner, "partition.options", num_clients) from None
        return out
