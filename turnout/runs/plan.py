"""What an experiment will run: its variants, seeds and the datasets they share, as units.

Fair comparison is the point: for a given seed, every variant sees the same data partition,
the same initial model, the same device profiles and the same availability draws, because all
of them come from (seed, purpose) streams that no variant consumes differently. Datasets are
built once per (data config, seed) and shared; a unit is one (variant, seed) of the plan.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..config.loader import ResolvedExperiment
from ..core.environment import versions  # noqa: F401  (re-exported: what config.yaml and summary.json record)
from ..core.errors import ConfigError, DataError
from ..data.federated import FederatedDataset
from ..sim.baselines import centralized_accuracy
from ..sim.engine import Simulation, build_model
from .preflight import check_resources
from .rundir import atomic_write_text


@dataclass
class Plan:
    """Validated experiment: variants, seeds and the datasets they need (already built)."""

    name: str
    variants: list[ResolvedExperiment]
    seeds: list[int]
    datasets: dict[tuple[str, int], FederatedDataset]

    def dataset_for(self, exp: ResolvedExperiment, seed: int) -> FederatedDataset:
        return self.datasets[(data_key(exp), seed)]

    @property
    def total_rounds(self) -> int:
        return sum(v.config.rounds for v in self.variants) * len(self.seeds)


def data_key(exp: ResolvedExperiment) -> str:
    return json.dumps(exp["data"].as_dict(), sort_keys=True)


def require_shared_seeds(variants: list[ResolvedExperiment]) -> None:
    """Variants are compared seed by seed on the same populations, so they must run the same seeds."""
    base = variants[0].config
    for v in variants:
        if v.config.seeds != base.seeds:
            raise ConfigError(f"variants[{v.variant}].seeds", v.config.seeds,
                              "variants must share the experiment's seeds (compare on the same populations)")


def prepare(variants: list[ResolvedExperiment]) -> Plan:
    """Build each distinct dataset once per seed (data errors surface here, before any output)."""
    check_resources(variants)
    require_shared_seeds(variants)
    base = variants[0].config
    datasets: dict[tuple[str, int], FederatedDataset] = {}
    fits: set[tuple[str, str]] = set()
    for v in variants:
        key = data_key(v)
        comp = v["data"]
        for seed in base.seeds:
            if (key, seed) not in datasets:
                try:
                    datasets[(key, seed)] = comp.cls.build(comp.cfg, seed)
                except ConfigError as exc:  # a dataset names keys relative to its own block
                    raise ConfigError(f"{where_prefix(variants, v)}data.{exc.key}", exc.value, exc.allowed) from None
            n = datasets[(key, seed)].num_clients
            if n == 0:
                raise DataError(f"dataset {comp.name!r} produced no clients; check its options")
            model_key = (json.dumps(v["model"].as_dict(), sort_keys=True), key)
            if model_key not in fits:
                _check_model_fits(v, datasets[(key, seed)], seed, where_prefix(variants, v))
                fits.add(model_key)
    return Plan(base.name, variants, list(base.seeds), datasets)


def where_prefix(variants: list[ResolvedExperiment], v: ResolvedExperiment) -> str:
    """Key prefix naming the variant in errors (none for an experiment without variants)."""
    return "" if len(variants) == 1 and v.variant == "base" else f"variants[{v.variant}]."


def _check_model_fits(exp: ResolvedExperiment, data: FederatedDataset, seed: int, where: str) -> None:
    """Build the model and run it on two training samples: a model that does not fit the data is a config error."""
    comp = exp["model"]
    try:
        module = build_model(exp, data, seed).module.eval()
        with torch.no_grad():
            out = module(torch.from_numpy(np.ascontiguousarray(data.x_train[:2])))
    except (ValueError, IndexError, RuntimeError, TypeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{where}model.name", comp.name, f"does not fit dataset {data.name!r} "
                          f"(input_shape {tuple(data.input_shape)}, {data.num_classes} classes): {why}") from None
    if out.shape[-1] != data.num_classes:
        raise ConfigError(f"{where}model.name", comp.name,
                          f"outputs {out.shape[-1]} scores but dataset {data.name!r} has {data.num_classes} classes")


@dataclass(frozen=True)
class Unit:
    """One (variant, seed) of a plan, with its place in the run folder's ``units/``."""

    index: int  # the variant's position in the experiment
    exp: ResolvedExperiment
    seed: int

    @property
    def variant(self) -> str:
        return self.exp.variant


def units_of(plan: Plan) -> list[Unit]:
    """The plan's units in run order: variant by variant, seed by seed."""
    return [Unit(i, exp, seed) for i, exp in enumerate(plan.variants) for seed in plan.seeds]


def check_buildable(plan: Plan) -> None:
    """Build every simulation once (model init and population arrays: cheap), so that checks needing
    the dataset — e.g. K <= number of clients — fail before any unit runs."""
    for exp in plan.variants:
        for seed in plan.seeds:
            try:
                Simulation(exp, plan.dataset_for(exp, seed), seed).release()
            except ConfigError as exc:
                raise ConfigError(where_prefix(plan.variants, exp) + exc.key, exc.value, exc.allowed) from None


def centralized_reference(unit: Unit, data: FederatedDataset, cache: dict, shared: Path | None = None) -> float | None:
    """The unit's centralised reference accuracy (``None`` when not asked for), computed once per
    (data, model, training, epochs, seed): in ``cache`` (this process), and across processes in the
    folder ``shared`` when given (see :func:`shared_value`)."""
    exp = unit.exp
    if not exp.config.eval.centralized_baseline or exp.config.no_train:
        return None
    key = (data_key(exp), json.dumps(exp["model"].as_dict(), sort_keys=True), exp.train.model_dump_json(),
           exp.config.eval.centralized_epochs, unit.seed)
    if key not in cache:
        def compute() -> float:
            return centralized_accuracy(build_model(exp, data, unit.seed), data, exp.train,
                                        exp.config.eval.centralized_epochs, unit.seed, exp.config.eval.batch_size)[0]

        cache[key] = compute() if shared is None else shared_value(shared, key, compute)
    return cache[key]


def shared_value(folder: Path, key: tuple, compute: Callable[[], float]) -> float:
    """``compute()`` at most once per ``key`` for every process that can reach ``folder`` (a run folder's
    ``baselines/``): the first to ask computes under an exclusive lock on the key's lock file and stores the
    value; the others wait on the lock and read it. The stored value is kept, so a resumed run reuses it."""
    folder.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:16]
    path = folder / f"{name}.json"
    with open(folder / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if path.is_file():
            return float(json.loads(path.read_text())["value"])
        value = float(compute())
        atomic_write_text(path, json.dumps({"key": list(key), "value": value}) + "\n")
        return value
