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
import math
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import yaml

from ..config.loader import ResolvedExperiment
from ..core.environment import recorded_environment, version_changes
from ..core.errors import ConfigError, ConfigWarning, TurnoutError
from ..core.metrics import comparison_rows, cumulate
from ..executors.base import EXECUTORS
from ..recorders.base import rows_to_columns
from ..recorders.plots import plot_accuracy
from ..sim import plugins
from ..sim.system_only import PROXY_NOTE
from .plan import Plan, check_buildable, prepare, units_of, versions
from .progress import ProgressBar
from .rundir import CONFIG, EXPERIMENT, SCRATCH, SUMMARY, UNIT_ROWS, RunFolder, atomic_write_text
from .sweep import BACKENDS, Backend, BackendLost, SweepState, UnitsFailed, pending_jobs
from .unit import StopFlag, jsonable, read_clients, read_rows, read_summary


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
    return {"turnout": recorded_environment(), "name": plan.name, "seeds": plan.seeds,
            "plugins": plugins.records(plan.variants[0].config.plugins),
            "variants": {v.variant: v.as_dict() for v in plan.variants}}


def start_folder(folder: RunFolder, plan: Plan, experiment: dict) -> None:
    """Record what is being run: the experiment as given (for resume) and the resolved config."""
    folder.write_json(EXPERIMENT, experiment)
    atomic_write_text(folder.path / CONFIG, yaml.safe_dump(resolved_config(plan), sort_keys=False))


@dataclass
class UnitTables:
    """A finished unit read back from disk (what the plots and tables are built from)."""

    variant: str
    seed: int
    rounds: list[dict]
    clients: dict[str, list]
    summary: dict


def read_units(plan: Plan, folder: RunFolder) -> list[UnitTables]:
    out = []
    for unit in units_of(plan):
        d = folder.unit_dir(unit.index, unit.variant, unit.seed)
        rows = read_rows(d / UNIT_ROWS)
        cumulate(rows)
        out.append(UnitTables(unit.variant, unit.seed, rows, read_clients(d), read_summary(d)))
    return out


def tables(units: list[UnitTables]) -> dict[str, dict[str, list]]:
    """``rounds``, ``clients`` and ``comparison`` as columns, from units read back from disk.

    The run folder's tables and :func:`turnout.load`'s DataFrames are both made here, so they
    have the same columns in the same order.
    """
    rounds = [{"variant": u.variant, "seed": u.seed, **row} for u in units for row in u.rounds]
    clients: dict[str, list] = {}
    done = 0  # rows so far: a column a unit lacks (a privacy variant's ε beside one without DP) is NaN there
    for u in units:
        if not u.clients:
            continue
        n = len(next(iter(u.clients.values())))
        for k, v in {"variant": [u.variant] * n, "seed": [u.seed] * n, **u.clients}.items():
            clients.setdefault(k, [math.nan] * done).extend(v)
        done += n
        for v in clients.values():
            v.extend([math.nan] * (done - len(v)))
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
        summary["system_only"] = PROXY_NOTE
    atomic_write_text(work / SUMMARY, json.dumps(jsonable(summary), indent=2) + "\n")
    if plan.variants[0].config.output.plots and not plan.variants[0].config.no_train:
        plot_accuracy(units, work, plan.name)
    for u in units_of(plan):
        shutil.rmtree(folder.unit_dir(u.index, u.variant, u.seed) / SCRATCH, ignore_errors=True)
    folder.complete()
    return summary


# ---- starting and resuming -------------------------------------------------------------------------
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


#: the config block a resumed run may change: *how* a round's clients are trained, never what they compute
EXECUTOR = "executor"


def open_resume(given: Path, expected_variants: list[ResolvedExperiment] | None, expand,
                experiment: dict | None = None, executor: dict | None = None) -> tuple[RunFolder, list, Callable]:
    """Lock an unfinished run folder and rebuild its variants from what it stored.

    ``expected_variants`` (from ``turnout run CONFIG --resume DIR``, with its ``experiment``) must resolve to
    the stored config; a difference is one line naming the first differing key. The ``executor`` block is
    the exception: a run started on a Ray cluster that is gone resumes on this machine's cores (``turnout
    resume DIR --set executor.name=sequential``, the ``executor`` overrides here). The sequential, parallel
    and Ray executors give bitwise the same numbers, so the tables do not change; a change to or from one
    that does not (``vectorized``, ``auto``, Ray's ``partial_sums``) is a warning. The third value records the
    new executor in the folder; the caller calls it once the plan is prepared, so a resume that fails leaves the
    folder as it was.
    """
    folder = RunFolder.reopen(given)
    try:
        stored = folder.read_json(EXPERIMENT)
        config = yaml.safe_load((folder.path / CONFIG).read_text())
        saved = config["variants"]
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        folder.release()
        raise ConfigError("resume", str(given), f"its experiment.json/config.yaml cannot be read ({exc})") from None
    changed = version_changes(config.get("turnout") or {})
    if changed:
        warnings.warn(ConfigWarning(f"{folder.path} was started with other package versions or CPU kernels "
                                    f"({', '.join(changed)}); "
                                    "the resumed rounds may differ in their last digits from an uninterrupted run"),
                      stacklevel=2)
    try:
        if executor:
            stored = {**stored, "overrides": {**(stored.get("overrides") or {}), **executor}}
        variants = expand_experiment(stored, expand) if expected_variants is None else expected_variants
        _same_plugins(config.get("plugins") or [], variants[0].config.plugins)
        now = {v.variant: v.as_dict() for v in variants}
        diff = first_difference(_without_executor(saved), _without_executor(now))
        if diff is not None:
            why = ("differs from the config the run was started with" if expected_variants is not None else
                   "resolves differently with this turnout version than when the run started")
            raise ConfigError(diff, _lookup(now, diff), f"{why} (stored in {folder.path / 'config.yaml'}); "
                                                        "resume with the original config")
        record = (lambda: None) if first_difference(saved, now) is None else \
            (lambda: _record_executor(folder, config, saved, now, experiment or stored))
    except BaseException:
        folder.release()
        raise
    return folder, variants, record


def _without_executor(variants: dict) -> dict:
    return {name: {k: v for k, v in cfg.items() if k != EXECUTOR} if isinstance(cfg, dict) else cfg
            for name, cfg in variants.items()}


def _record_executor(folder: RunFolder, config: dict, saved: dict, now: dict, experiment: dict) -> None:
    """The resumed run trains with another executor: warn if numbers may move, and record it in the folder."""
    def bitwise(block: dict) -> bool:
        return EXECUTORS.get(block.get("name")).bitwise_with(block)

    for name, cfg in now.items():
        was = saved.get(name, {}).get(EXECUTOR) or {}
        if not (bitwise(was) and bitwise(cfg[EXECUTOR])):
            warnings.warn(ConfigWarning(f"{folder.path}: the run continues with executor {cfg[EXECUTOR].get('name')}"
                                        f" (it started with {was.get('name')}); `vectorized` (and `auto`, which may "
                                        "pick it) and the `ray` executor's `partial_sums` agree with the others within "
                                        "float tolerance, not bitwise: the resumed rounds may differ in their last "
                                        "digits from an uninterrupted run"),
                          stacklevel=3)
            break
    history = config.setdefault("executor_history", [])
    history.append({"resumed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "was": {n: (v.get(EXECUTOR) or {}) for n, v in saved.items()}})
    for name, cfg in now.items():
        config["variants"][name][EXECUTOR] = cfg[EXECUTOR]
    folder.write_json(EXPERIMENT, experiment)
    atomic_write_text(folder.path / CONFIG, yaml.safe_dump(config, sort_keys=False))


def _same_plugins(recorded: list[dict], specs: list[str]) -> None:
    """A resumed run must load the plugin files it started with (their sha256 are in ``config.yaml``)."""
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
class OpenExperiment:
    """An experiment ready to run: its plan (datasets built) and its locked run folder."""

    plan: Plan
    folder: RunFolder
    experiment: dict
    created: bool  # a new folder (False: an unfinished one reopened)


def open_experiment(variants: list[ResolvedExperiment] | None, experiment: dict | None, out: Path | None = None,
                    resume: Path | None = None, expand=None, executor: dict | None = None) -> OpenExperiment:
    """Create (``out``) or reopen (``resume``) the run folder of an experiment and prepare its plan.

    ``executor``: ``--set executor.KEY=VALUE`` overrides for a resumed run (see :func:`open_resume`).

    ``experiment`` is ``{"raw": dict, "overrides": {key: value}, "only": [names] | None}``: what resume
    re-expands. A new run that fails before its first unit starts leaves no folder behind.
    """
    if resume is not None:
        folder, variants, record_executor = open_resume(resume, variants, expand, experiment, executor)
        try:
            plan = prepare(variants)
            record_executor()
            return OpenExperiment(plan, folder, folder.read_json(EXPERIMENT), created=False)
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
    return OpenExperiment(plan, folder, experiment, created=True)


def run_sweep(experiments: list, backend: Backend, stop: StopFlag, progress=None) -> list[dict]:
    """Run every unfinished unit of ``experiments`` ((plan, folder, experiment dict) each) on ``backend``,
    then build each experiment's tables; returns their summaries.

    Raises :class:`UnitsFailed` when units failed (the rest is kept) and
    :class:`RunInterrupted` when ``stop`` was requested.
    """
    jobs, sinks = pending_jobs(experiments, stop)
    state = SweepState(sinks)
    if progress is not None:
        every = {(e, i): (f"{u.variant} s{u.seed}", u.exp.config.rounds)
                 for e, (plan, _, _) in enumerate(experiments) for i, u in enumerate(units_of(plan))}
        progress.start(every, set(every) - {j.key for j in jobs})
    prepared = {(e, i): (u.exp, plan.dataset_for(u.exp, u.seed))
                for e, (plan, _, _) in enumerate(experiments) for i, u in enumerate(units_of(plan))}
    folders = [folder for _, folder, _ in experiments]
    try:
        backend.run(jobs, state, stop, progress, resolve=lambda job: prepared[job.key])
    except BackendLost as lost:
        for sink in sinks.values():
            sink.close()
        raise BackendLost(lost.why, [f.path for f in folders]) from None
    for sink in sinks.values():
        sink.close()
    if state.failed:
        labels = {j.key: j.label for j in jobs}
        raise UnitsFailed({labels[k]: why for k, why in state.failed.items()}, [f.path for f in folders])
    if stop.requested or state.stopped:
        total = sum(len(units_of(plan)) for plan, _, _ in experiments)
        unfinished = [j for j in jobs if j.key not in state.done]
        checkpointed = [f"{j.label} checkpointed at round {state.stopped[j.key][0]}/{state.stopped[j.key][1]}"
                        for j in unfinished if j.key in state.stopped]
        raise RunInterrupted(folders, stop, total - len(unfinished), total, checkpointed)
    return [finalize(plan, folder) for plan, folder, _ in experiments]


def make_backend(name: str, jobs: int = 1, retries: int = 2, address: str | None = None):
    """The backend for ``--backend NAME --jobs N`` (``inline`` when one local job)."""
    if name == "local":
        name = "inline" if jobs <= 1 else "processes"
    if name == "ray":
        from . import ray_backend  # noqa: F401  # optional extra: registers "ray" (a missing Ray is a one-line error there)
    if name not in BACKENDS:
        raise ConfigError("--backend", name, f"choose one of: local, {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name](jobs=jobs, retries=retries, address=address)


def run_opened(opened: list[OpenExperiment], backend=None, progress: ProgressBar | None = None,
               stop: StopFlag | None = None) -> list[tuple[Path, dict]]:
    """Run every unit of the opened experiments as one sweep; returns (run folder, summary) per experiment."""
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
