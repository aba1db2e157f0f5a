"""Run every variant × seed of an experiment on shared populations, durably, into a run folder.

Fair comparison is the point: for a given seed, every variant sees the same data partition,
the same initial model, the same device profiles and the same availability draws, because all
of them come from (seed, purpose) streams that no variant consumes differently. Datasets are
built once per (data config, seed) and shared.

Each (variant, seed) is a *unit* (:mod:`turnout.runs.unit`) with its own place in the run folder
(:mod:`turnout.runs.rundir`): rows stream to disk as rounds finish, checkpoints are taken as the run
goes, a finished unit is never recomputed, and the experiment's tables and plots are built from
what is on disk once every unit is done (:func:`finalize`). Interrupted (Ctrl-C, SIGTERM, a
crash), ``turnout resume DIR`` continues every unfinished unit from its last checkpoint.
"""

from __future__ import annotations

import json
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from .. import __version__
from ..sim.baselines import centralized_accuracy
from ..config.loader import ResolvedExperiment
from ..data.federated import FederatedDataset
from ..sim.engine import build_model
from ..core.errors import ConfigError, DataError, TurnoutError
from ..core.metrics import comparison_rows, cumulate
from ..recorders.plots import plot_accuracy
from .preflight import check_resources
from .progress import ProgressBar
from ..recorders.base import rows_to_columns
from .rundir import RunFolder, atomic_write_text
from .unit import StopFlag, jsonable, read_clients, read_rows, read_summary


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


class RunInterrupted(TurnoutError):
    """A run stopped on request (SIGINT/SIGTERM) after checkpointing; the message says how to resume."""

    def __init__(self, folders: list[RunFolder], stop: StopFlag, done: int, total: int, checkpointed: list[str]):
        self.folders, self.stop_signal, reason = folders, stop.signal, stop.reason or "stopped"
        where = f"; {', '.join(checkpointed[:3])}" + (f" and {len(checkpointed) - 3} more" if len(checkpointed) > 3
                                                      else "") if checkpointed else ""
        saved = ", ".join(str(f.path) for f in folders)
        resume = " and ".join(f"turnout resume {f.out}" for f in folders)
        super().__init__(f"{reason}: {done} of {total} units finished{where}, saved in {saved}; resume with: {resume}")


def resolved_config(plan: Plan) -> dict:
    """What ``config.yaml`` holds: every variant's resolved config, the seeds, the versions and the plugins
    (module, file, sha256 of each)."""
    from ..config import plugins

    return {"turnout": versions(), "name": plan.name, "seeds": plan.seeds,
            "plugins": plugins.records(plan.variants[0].config.plugins),
            "variants": {v.variant: v.as_dict() for v in plan.variants}}


def start_folder(folder: RunFolder, plan: Plan, experiment: dict) -> None:
    """Record what is being run: the experiment as given (for resume) and the resolved config."""
    folder.write_json("experiment.json", experiment)
    atomic_write_text(folder.path / "config.yaml", yaml.safe_dump(resolved_config(plan), sort_keys=False))


def _centralized(unit: Unit, data: FederatedDataset, cache: dict) -> float | None:
    exp = unit.exp
    if not exp.config.eval.centralized_baseline or exp.config.no_train:
        return None
    key = (_data_key(exp), json.dumps(exp["model"].as_dict(), sort_keys=True), exp.train.model_dump_json(),
           exp.config.eval.centralized_epochs, unit.seed)
    if key not in cache:
        cache[key], _ = centralized_accuracy(build_model(exp, data, unit.seed), data, exp.train,
                                             exp.config.eval.centralized_epochs, unit.seed, exp.config.eval.batch_size)
    return cache[key]


@dataclass
class _UnitTables:
    """A finished unit read back from disk (what the plots and tables are built from)."""

    variant: str
    seed: int
    rounds: list[dict]
    clients: dict[str, list]
    summary: dict


def read_units(plan: Plan, folder: RunFolder) -> list[_UnitTables]:
    out = []
    for unit in units_of(plan):
        d = folder.unit_dir(unit.index, unit.variant, unit.seed)
        rows = read_rows(d / "rounds.jsonl")
        cumulate(rows)
        out.append(_UnitTables(unit.variant, unit.seed, rows, read_clients(d), read_summary(d)))
    return out


def tables(units: list[_UnitTables]) -> dict[str, dict[str, list]]:
    """``rounds``, ``clients`` and ``comparison`` as columns, from units read back from disk.

    The run folder's tables and :func:`turnout.load`'s DataFrames are both made here, so they
    have the same columns in the same order.
    """
    rounds = [{"variant": u.variant, "seed": u.seed, **row} for u in units for row in u.rounds]
    clients: dict[str, list] = {}
    for u in units:
        if not u.clients:
            continue
        n = len(next(iter(u.clients.values())))
        for k, v in {"variant": [u.variant] * n, "seed": [u.seed] * n, **u.clients}.items():
            clients.setdefault(k, []).extend(v)
    comparison = rows_to_columns(comparison_rows([u.summary for u in units if u.summary]))
    return {"rounds": rows_to_columns(rounds), "clients": clients, "comparison": comparison}


def finalize(plan: Plan, folder: RunFolder) -> dict:
    """Build the experiment's tables, summary and plots from the finished units, then complete the folder."""
    units = read_units(plan, folder)
    work = folder.path
    recorder = plan.variants[0]["recorder"].build()
    for name, columns in tables(units).items():
        recorder.write_table(work, name, columns)
    summaries = [u.summary for u in units]
    summary = {"name": plan.name, "versions": versions(), "runs": summaries,
               "variants": [r for r in comparison_rows(summaries) if r["seed"] == "mean"]}
    if plan.variants[0].config.no_train:
        from ..sim.system_only import PROXY_NOTE

        summary["system_only"] = PROXY_NOTE
    atomic_write_text(work / "summary.json", json.dumps(jsonable(summary), indent=2) + "\n")
    if plan.variants[0].config.output.plots and not plan.variants[0].config.no_train:
        plot_accuracy(units, work, plan.name)
    for u in units_of(plan):
        shutil.rmtree(folder.unit_dir(u.index, u.variant, u.seed) / "scratch", ignore_errors=True)
    folder.complete()
    return summary


# ---- starting and resuming -------------------------------------------------------------------------
def check_buildable(plan: Plan) -> None:
    """Build every simulation once (model init and population arrays: cheap), so that checks needing
    the dataset — e.g. K <= number of clients — fail before any unit runs."""
    from ..sim.engine import Simulation

    for exp in plan.variants:
        for seed in plan.seeds:
            try:
                Simulation(exp, plan.dataset_for(exp, seed), seed).close()
            except ConfigError as exc:
                raise ConfigError(_where(plan.variants, exp) + exc.key, exc.value, exc.allowed) from None


def first_difference(a, b, path: str = "") -> str | None:
    """The first dotted key at which two config trees differ (``None`` when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}{k}"
            d = first_difference(a[k], b[k], f"{path}{k}.")
            if d is not None:
                return d
        return None
    return None if a == b else path.rstrip(".") or "(whole config)"


def open_resume(given: Path, expected_variants: list[ResolvedExperiment] | None, expand) -> tuple[RunFolder, list]:
    """Lock an unfinished run folder and rebuild its variants from what it stored.

    ``expected_variants`` (from ``turnout run CONFIG --resume DIR``) must resolve to the stored
    config; a difference is one line naming the first differing key.
    """
    folder = RunFolder.reopen(given)
    try:
        stored = folder.read_json("experiment.json")
        config = yaml.safe_load((folder.path / "config.yaml").read_text())
        saved = config["variants"]
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        folder.release()
        raise ConfigError("resume", str(given), f"its experiment.json/config.yaml cannot be read ({exc})") from None
    try:
        variants = expand_experiment(stored, expand) if expected_variants is None else expected_variants
        _same_plugins(config.get("plugins") or [], variants[0].config.plugins)
        now = {v.variant: v.as_dict() for v in variants}
        diff = first_difference(saved, now)
        if diff is not None:
            why = ("differs from the config the run was started with" if expected_variants is not None else
                   "resolves differently with this turnout version than when the run started")
            raise ConfigError(diff, _lookup(now, diff), f"{why} (stored in {folder.path / 'config.yaml'}); "
                                                        "resume with the original config")
    except BaseException:
        folder.release()
        raise
    return folder, variants


def _same_plugins(recorded: list[dict], specs: list[str]) -> None:
    """A resumed run must load the plugin files it started with (their sha256 are in ``config.yaml``)."""
    from ..config import plugins

    for i, (was, now) in enumerate(zip(recorded, plugins.records(specs))):
        if was.get("sha256") != now["sha256"]:
            before, after = str(was.get("sha256"))[:12], now["sha256"][:12]
            raise ConfigError(f"plugins[{i}]", now["spec"], f"changed since the run started (sha256 {before}…, now "
                                                            f"{after}…); restore that version to resume")


def _lookup(tree, dotted: str):
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def expand_experiment(experiment: dict, expand) -> list[ResolvedExperiment]:
    """The variants of a stored experiment: ``raw`` expanded with ``overrides``, kept to ``only`` (names) if set."""
    variants = expand(experiment["raw"], experiment.get("overrides") or {})
    return select_variants(variants, experiment.get("only"))


def select_variants(variants: list[ResolvedExperiment], only: list[str] | None) -> list[ResolvedExperiment]:
    """The variants named in ``only`` (``--variant``), in the experiment's order; all when ``only`` is empty."""
    if not only:
        return variants
    names = [v.variant for v in variants]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ConfigError("--variant", unknown[0], f"no such variant; choose from: {', '.join(names)}")
    return [v for v in variants if v.variant in only]


@dataclass
class Opened:
    """An experiment ready to run: its plan (datasets built) and its locked run folder."""

    plan: Plan
    folder: RunFolder
    experiment: dict
    created: bool  # a new folder (False: an unfinished one reopened)


def open_experiment(variants: list[ResolvedExperiment] | None, experiment: dict | None, out: Path | None = None,
                    resume: Path | None = None, expand=None) -> Opened:
    """Create (``out``) or reopen (``resume``) the run folder of an experiment and prepare its plan.

    ``experiment`` is ``{"raw": dict, "overrides": {key: value}, "only": [names] | None}``: what resume
    re-expands. A new run that fails before its first unit starts leaves no folder behind.
    """
    if resume is not None:
        folder, variants = open_resume(resume, variants, expand)
        try:
            plan = prepare(variants)
            return Opened(plan, folder, folder.read_json("experiment.json"), created=False)
        except BaseException:
            folder.release()
            raise
    folder = RunFolder.create(out)
    try:
        plan = prepare(variants)
        check_buildable(plan)
        start_folder(folder, plan, experiment)
    except BaseException:
        folder.discard()
        raise
    return Opened(plan, folder, experiment, created=True)


def run_opened(opened: list[Opened], backend=None, progress: ProgressBar | None = None,
               stop: StopFlag | None = None) -> list[tuple[Path, dict]]:
    """Run every unit of the opened experiments as one sweep; returns (run folder, summary) per experiment."""
    from .sweep import make_backend, run_sweep

    torch.set_num_threads(opened[0].plan.variants[0].config.runtime.torch_threads)
    try:
        summaries = run_sweep([(o.plan, o.folder, o.experiment) for o in opened], backend or make_backend("inline"),
                              stop or StopFlag(), progress)
    finally:
        for o in opened:
            o.folder.release()
    return [(o.folder.path, s) for o, s in zip(opened, summaries)]


def run_experiment(variants: list[ResolvedExperiment] | None, experiment: dict | None, out: Path | None = None,
                   resume: Path | None = None, expand=None, progress: ProgressBar | None = None,
                   stop: StopFlag | None = None, backend=None) -> tuple[Path, dict]:
    """Start (``out``) or resume (``resume``) one experiment durably; returns (run folder, summary)."""
    return run_opened([open_experiment(variants, experiment, out, resume, expand)], backend, progress, stop)[0]
