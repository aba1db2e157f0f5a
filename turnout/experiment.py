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
from .plots import plot_accuracy
from .recorders.base import rows_to_columns

SUMMARY_KEYS = ("final_accuracy", "best_accuracy", "tail_accuracy", "tail_accuracy_std", "final_loss", "best_loss",
                "rounds_to_target", "sim_time_to_target_s", "download_time_to_target_s", "bytes_down_to_target",
                "bytes_up_to_target", "bytes_up", "bytes_down", "sim_time_s", "download_time_s",
                "resource_s", "wasted_s", "tau_max", "tau_avg", "selection_count_var", "centralized_accuracy",
                "wall_s")


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


def _cumulate(rows: list[dict]) -> None:
    totals = {"bytes_up": 0, "bytes_down": 0, "resource_s": 0.0, "wasted_s": 0.0, "download_s": 0.0}
    for row in rows:
        for k in totals:
            totals[k] += row[k]
            row[f"cum_{k}"] = totals[k]


def summarize(res: RunResult, target: float | None) -> dict:
    rows = res.rounds
    acc = np.array([r["accuracy"] for r in rows], dtype=float)
    evaluated = np.flatnonzero(~np.isnan(acc))
    last = rows[-1]
    s = {
        "variant": res.variant, "seed": res.seed, "rounds": len(rows),
        "final_accuracy": float(acc[evaluated[-1]]) if len(evaluated) else math.nan,
        "best_accuracy": float(np.nanmax(acc)) if len(evaluated) else math.nan,
        "final_loss": float(rows[evaluated[-1]]["loss"]) if len(evaluated) else math.nan,
        # Adaptive-OU's Table 3 metric: accuracy over the last quarter of the evaluations, mean and std over rounds
        "tail_accuracy": float(np.mean(acc[evaluated[-max(1, len(evaluated) // 4):]])) if len(evaluated) else math.nan,
        "tail_accuracy_std": float(np.std(acc[evaluated[-max(1, len(evaluated) // 4):]])) if len(evaluated)
        else math.nan,
        # FedGS's Table 2 metric: the lowest server test loss over the evaluations ("optimal testing loss")
        "best_loss": float(np.nanmin([rows[i]["loss"] for i in evaluated])) if len(evaluated) else math.nan,
        "bytes_up": int(last["cum_bytes_up"]), "bytes_down": int(last["cum_bytes_down"]),
        "sim_time_s": float(last["sim_time_s"]), "resource_s": float(last["cum_resource_s"]),
        "wasted_s": float(last["cum_wasted_s"]),
        "download_time_s": float(last["cum_download_s"]),
        "rounds_to_target": math.nan, "sim_time_to_target_s": math.nan, "download_time_to_target_s": math.nan,
        "bytes_down_to_target": math.nan, "bytes_up_to_target": math.nan,
    }
    if target is not None:
        hit = np.flatnonzero(acc >= target)
        if len(hit):
            row = rows[hit[0]]
            s.update(rounds_to_target=int(hit[0]) + 1, sim_time_to_target_s=float(row["sim_time_s"]),
                     download_time_to_target_s=float(row["cum_download_s"]),
                     bytes_down_to_target=int(row["cum_bytes_down"]), bytes_up_to_target=int(row["cum_bytes_up"]))
    s.update(res.summary)
    return s


def comparison_rows(summaries: list[dict]) -> list[dict]:
    """One row per (variant, seed), then a ``mean`` and a ``std`` row per variant (over seeds)."""
    out = []
    variants = list(dict.fromkeys(s["variant"] for s in summaries))
    for v in variants:
        runs = [s for s in summaries if s["variant"] == v]
        for s in runs:
            out.append({"variant": v, "seed": s["seed"], **{k: s.get(k, math.nan) for k in SUMMARY_KEYS}})
        for stat, fn in (("mean", np.nanmean), ("std", np.nanstd)):
            row = {"variant": v, "seed": stat}
            for k in SUMMARY_KEYS:
                vals = np.array([np.nan if s.get(k) is None else s.get(k, np.nan) for s in runs], dtype=float)
                row[k] = float(fn(vals)) if np.any(~np.isnan(vals)) else math.nan
            out.append(row)
    return out


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
            res = sim.run(None if progress is None else
                          (lambda r, row, _v=exp.variant, _s=seed: progress(_v, _s, r, row)))
            _cumulate(res.rounds)
            if exp.config.eval.centralized_baseline:
                key = (_data_key(exp), json.dumps(exp["model"].as_dict(), sort_keys=True),
                       exp.train.model_dump_json(), exp.config.eval.centralized_epochs, seed)
                if key not in centralized:
                    centralized[key], _ = centralized_accuracy(
                        build_model(exp, data, seed), data, exp.train, exp.config.eval.centralized_epochs, seed,
                        exp.config.eval.batch_size)
                res.summary["centralized_accuracy"] = centralized[key]
            results.append(res)
            summaries.append(summarize(res, exp.config.eval.target_accuracy))

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
