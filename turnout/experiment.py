"""Run every variant × seed of an experiment on shared populations and write the run folder.

Fair comparison is the point: for a given seed, every variant sees the same data partition,
the same initial model, the same device profiles and the same availability draws, because all
of them come from (seed, purpose) streams that no variant consumes differently. Datasets are
built once per (data config, seed) and shared.

Run folder::

    config.yaml       resolved config of every variant, with versions and seeds
    rounds.csv        one row per (variant, seed, round)
    clients.csv       one row per (variant, seed, client)
    comparison.csv    one row per (variant, seed) plus mean and std rows per variant
    summary.json      per-run and per-variant summaries
    accuracy_vs_*.png overlay plots

The folder is written as ``DIR.partial`` and renamed to ``DIR`` only when everything is done, so
a folder named ``DIR`` is always complete.
"""

from __future__ import annotations

import json
import math
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import yaml

from . import __version__
from .baselines import centralized_accuracy
from .config.loader import ResolvedExperiment
from .data.federated import FederatedDataset
from .engine import RunResult, Simulation, build_model
from .errors import ConfigError, DataError
from .metrics import comparison_rows, cumulate, summarize
from .observers import Callback
from .plots import plot_accuracy
from .preflight import check_resources
from .recorders.base import rows_to_columns


def versions() -> dict[str, str]:
    return {"turnout": __version__, "torch": str(torch.__version__), "numpy": str(np.__version__),
            "python": platform.python_version()}


@dataclass
class Plan:
    """Validated experiment: variants, seeds and the datasets they need (already built)."""

    name: str
    variants: list[ResolvedExperiment]
    seeds: list[int]
    datasets: dict[tuple[str, int], FederatedDataset]

    def dataset_for(self, exp: ResolvedExperiment, seed: int) -> FederatedDataset:
        return self.datasets[(_data_key(exp), seed)]

    @property
    def total_rounds(self) -> int:
        return sum(v.config.rounds for v in self.variants) * len(self.seeds)


def _data_key(exp: ResolvedExperiment) -> str:
    return json.dumps(exp["data"].as_dict(), sort_keys=True)


def prepare(variants: list[ResolvedExperiment]) -> Plan:
    """Build each distinct dataset once per seed (data errors surface here, before any output)."""
    check_resources(variants)
    base = variants[0].config
    for v in variants:
        if v.config.seeds != base.seeds:
            raise ConfigError(f"variants[{v.variant}].seeds", v.config.seeds,
                              "variants must share the experiment's seeds (compare on the same populations)")
    datasets: dict[tuple[str, int], FederatedDataset] = {}
    fits: set[tuple[str, str]] = set()
    for v in variants:
        key = _data_key(v)
        comp = v["data"]
        for seed in base.seeds:
            if (key, seed) not in datasets:
                try:
                    datasets[(key, seed)] = comp.cls.build(comp.cfg, seed)
                except ConfigError as exc:  # a dataset names keys relative to its own block
                    raise ConfigError(f"{_where(variants, v)}data.{exc.key}", exc.value, exc.allowed) from None
            n = datasets[(key, seed)].num_clients
            if n == 0:
                raise DataError(f"dataset {comp.name!r} produced no clients; check its options")
            model_key = (json.dumps(v["model"].as_dict(), sort_keys=True), key)
            if model_key not in fits:
                _check_model_fits(v, datasets[(key, seed)], seed, _where(variants, v))
                fits.add(model_key)
    return Plan(base.name, variants, list(base.seeds), datasets)


def _where(variants: list[ResolvedExperiment], v: ResolvedExperiment) -> str:
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


def default_out_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_out_dir(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError("--out", str(out), "already exists and is not empty; choose a new directory")
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)


def run_plan(plan: Plan, out: Path, progress: Callable[[str, int, int, dict], None] | None = None) -> dict:
    """Run every (variant, seed) and write the run folder; returns the summary dict."""
    check_out_dir(out)
    # Pre-flight: build every simulation once (cheap: model init and population arrays) so checks
    # that need the dataset, such as K <= number of clients, fail before the folder exists.
    for exp in plan.variants:
        for seed in plan.seeds:
            try:
                Simulation(exp, plan.dataset_for(exp, seed), seed)
            except ConfigError as exc:
                raise ConfigError(_where(plan.variants, exp) + exc.key, exc.value, exc.allowed) from None
    work = out.with_name(out.name + ".partial")
    work.mkdir(parents=True)
    first = plan.variants[0]
    torch.set_num_threads(first.config.runtime.torch_threads)
    results: list[RunResult] = []
    summaries = []
    centralized: dict[tuple, float] = {}  # the ceiling depends on data, model, train and seed only
    for exp in plan.variants:
        for seed in plan.seeds:
            data = plan.dataset_for(exp, seed)
            sim = Simulation(exp, data, seed, scratch_dir=work / "scratch")
            res = sim.run([] if progress is None else [Callback(progress)])
            cumulate(res.rounds)
            if exp.config.eval.centralized_baseline:
                key = (_data_key(exp), json.dumps(exp["model"].as_dict(), sort_keys=True),
                       exp.train.model_dump_json(), exp.config.eval.centralized_epochs, seed)
                if key not in centralized:
                    centralized[key], _ = centralized_accuracy(
                        build_model(exp, data, seed), data, exp.train, exp.config.eval.centralized_epochs, seed,
                        exp.config.eval.batch_size)
                res.summary["centralized_accuracy"] = centralized[key]
            results.append(res)
            summaries.append(summarize(res.variant, res.seed, res.rounds, res.summary, exp.config.eval.target_accuracy))

    recorder = first["recorder"].build()
    rounds = [{"variant": r.variant, "seed": r.seed, **row} for r in results for row in r.rounds]
    recorder.write_table(work, "rounds", rows_to_columns(rounds))
    clients: dict[str, list] = {}
    for r in results:
        n = len(next(iter(r.clients.values())))
        block = {"variant": [r.variant] * n, "seed": [r.seed] * n, **{k: v.tolist() for k, v in r.clients.items()}}
        for k, v in block.items():
            clients.setdefault(k, []).extend(v)
    recorder.write_table(work, "clients", clients)
    recorder.write_table(work, "comparison", rows_to_columns(comparison_rows(summaries)))
    resolved = {"turnout": versions(), "name": plan.name, "seeds": plan.seeds,
                "variants": {v.variant: v.as_dict() for v in plan.variants}}
    (work / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    summary = {"name": plan.name, "versions": versions(), "runs": summaries,
               "variants": [r for r in comparison_rows(summaries) if r["seed"] == "mean"]}
    (work / "summary.json").write_text(json.dumps(_jsonable(summary), indent=2) + "\n")
    if first.config.output.plots:
        plot_accuracy(results, work, plan.name)
    shutil.rmtree(work / "scratch", ignore_errors=True)
    if out.exists():
        out.rmdir()
    work.rename(out)
    return summary


def _jsonable(obj):
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return _jsonable(float(obj))
    return obj
