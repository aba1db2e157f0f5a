"""The Python API: run an experiment from a notebook and get its tables as pandas DataFrames.

``turnout.run`` is ``turnout run`` without the shell — the same validation, the same durable run
folder, the same backends — and returns :class:`Results`, read back from that folder by
``turnout.load``, which also reads an unfinished folder (an interrupted run, or one still going).
The DataFrames are built from the units on disk by the code that writes the run folder's tables
(:func:`turnout.runs.experiment.tables`), so they have the CSVs' columns, ``cum_*`` totals included.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from ..config.loader import ResolvedExperiment, parse_override, read_yaml
from ..core.errors import ConfigError
from ..core.metrics import cumulate
from ..runs.experiment import UnitTables, expand_experiment, make_backend, open_experiment, run_opened, tables
from ..runs.progress import ProgressBar
from ..runs.rundir import CONFIG, PARTIAL, UNIT_ROWS, check_out, default_out_dir, partial_of, unit_path
from ..runs.sweep import units_in
from ..runs.unit import is_done, read_clients, read_rows, read_summary
from ..sim import plugins as plugmod
from ..sim.composition import expand
from . import bundled


@dataclass(frozen=True)
class Results:
    """A run folder's tables as DataFrames.

    ``rounds`` (one row per variant × seed × round), ``clients`` (per client, finished units),
    ``comparison`` (per variant × seed, then mean and std rows) have ``rounds.csv``'s,
    ``clients.csv``'s and ``comparison.csv``'s columns (``comparison.seed`` is text: ``"0"``, ``"mean"``,
    ``"std"``); ``summary`` has one row per finished unit
    (``summary.json``'s ``runs``). ``units`` says how far each (variant, seed) got; in an unfinished
    folder ``rounds`` also holds the rows the unfinished units streamed so far, and ``incomplete``
    names those units.
    """

    folder: Path
    rounds: Any  # pandas.DataFrame
    clients: Any
    summary: Any
    comparison: Any
    units: Any  # variant, seed, rounds_done, rounds, complete
    config: dict  # config.yaml: every variant's resolved config, seeds, versions, plugins

    @property
    def incomplete(self) -> list[tuple[str, int]]:
        """(variant, seed) of every unit that has not finished."""
        todo = self.units[~self.units["complete"]]
        return [(str(v), int(s)) for v, s in zip(todo["variant"], todo["seed"])]

    @property
    def complete(self) -> bool:
        return not self.incomplete

    def __repr__(self) -> str:
        done = int(self.units["complete"].sum())
        return (f"Results({str(self.folder)!r}: {done} of {len(self.units)} units finished, "
                f"{len(self.rounds)} round rows, variants {list(dict.fromkeys(self.units['variant']))})")


def run(experiment, overrides: Mapping[str, Any] | Iterable[str] | None = None, out: str | Path | None = None,
        jobs: int = 1, backend: str = "local", quiet: bool = False, plugins: Iterable[str] = (),
        no_train: bool = False, address: str | None = None, retries: int = 2,
        variants: Iterable[str] = ()) -> Results:
    """Run every variant × seed of ``experiment`` into a new run folder and return its :class:`Results`.

    ``experiment``: a YAML path, an experiment dict (as the file would hold), or a list of
    :class:`~turnout.config.loader.ResolvedExperiment` (``turnout.sim.composition.expand``'s result).
    ``overrides``: ``{"selector.clients_per_round": 20}`` or ``["selector.clients_per_round=20"]``
    (``--set``). ``out``: the new run folder (default ``runs/NAME-TIMESTAMP-xxxx``). ``jobs`` > 1 runs
    units in worker processes; ``backend="ray"`` on Ray. ``plugins`` and ``no_train`` are
    ``--plugin`` and ``--no-train``; ``variants`` names the variants to run (``--variant``; empty: all). Bad input
    raises :class:`~turnout.core.errors.ConfigError`.
    """
    if int(jobs) < 1:
        raise ConfigError("jobs", jobs, "must be >= 1")
    raw = _raw(experiment)
    extra = plugmod.anchor(list(plugins), Path.cwd())
    if extra:
        plugmod.load(extra, "plugins")
        listed = list(raw.get("plugins") or [])
        raw["plugins"] = listed + [p for p in extra if p not in listed]
    over = _overrides(overrides)
    if no_train:
        over["no_train"] = True
    doc = {"raw": raw, "overrides": over, "only": list(variants) or None}
    resolved = expand_experiment(doc, expand)
    target = Path(out) if out is not None else default_out_dir(resolved[0].config.name)
    check_out(target, "out")
    runner = make_backend(backend, int(jobs), int(retries), address)
    runner.warm(units_in(resolved))  # workers start while the datasets are built
    try:
        opened = open_experiment(resolved, doc, out=target, expand=expand)
    except BaseException:
        runner.close()
        raise
    quiet = quiet or not resolved[0].config.output.progress
    with ProgressBar(disable=quiet) as bar:
        (folder, _), = run_opened([opened], runner, bar)
    return load(folder)


def load(run_dir: str | Path) -> Results:
    """The tables of a run folder, finished or not (``DIR`` or ``DIR.partial``), as :class:`Results`."""
    import pandas as pd

    folder = _folder(Path(run_dir), PARTIAL, partial_of)
    try:
        config = yaml.safe_load((folder / CONFIG).read_text())
        variants, seeds = list(config["variants"]), list(config["seeds"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise ConfigError("run_dir", str(run_dir), f"its config.yaml cannot be read ({exc}); give a folder "
                                                   "`turnout run` wrote") from None
    units, status = [], []
    for index, variant in enumerate(variants):
        rounds_total = int(config["variants"][variant].get("rounds", 0))
        for seed in seeds:
            d = unit_path(folder, index, variant, seed)
            rows = read_rows(d / UNIT_ROWS)
            cumulate(rows)
            done = is_done(d)
            units.append(UnitTables(variant, seed, rows, read_clients(d) if done else {},
                                     read_summary(d) if done else {}))
            status.append({"variant": variant, "seed": seed, "rounds_done": len(rows), "rounds": rounds_total,
                           "complete": done})
    cols = tables(units)
    frames = {name: pd.DataFrame(columns) for name, columns in cols.items()}
    if "seed" in frames["comparison"]:  # seeds and the "mean"/"std" rows share the column: text, as in the CSV
        frames["comparison"]["seed"] = frames["comparison"]["seed"].astype(str)
    summary = pd.DataFrame([u.summary for u in units if u.summary])
    return Results(folder, frames["rounds"], frames["clients"], summary, frames["comparison"],
                   pd.DataFrame(status, columns=["variant", "seed", "rounds_done", "rounds", "complete"]), config)


def _folder(given: Path, partial: str, partial_of) -> Path:
    """The run folder to read: ``given``, or ``given.partial`` while it is unfinished."""
    for candidate in (given, partial_of(given)):
        if (candidate / CONFIG).is_file():
            return candidate
    if given.is_dir():
        inner = sorted(p.name for p in given.iterdir() if (p / CONFIG).is_file())
        if inner:
            raise ConfigError("run_dir", str(given), f"holds several run folders ({', '.join(inner[:5])}); load "
                                                     "each one")
    raise ConfigError("run_dir", str(given), "is not a turnout run folder (no config.yaml, nor in "
                                             f"{given.name}{partial})")


def _raw(experiment) -> dict[str, Any]:
    """The experiment as the dict an experiment file holds (what the run folder stores for resume and workers)."""
    if isinstance(experiment, (str, Path)):
        return read_yaml(bundled.resolve(experiment))
    if isinstance(experiment, Mapping):
        raw = copy.deepcopy(dict(experiment))
        if "plugins" in raw:
            raw["plugins"] = plugmod.anchor(raw["plugins"], Path.cwd())
        return raw
    if isinstance(experiment, ResolvedExperiment):
        experiment = [experiment]
    if isinstance(experiment, Sequence) and experiment and all(isinstance(v, ResolvedExperiment) for v in experiment):
        return _raw_of_resolved(list(experiment))
    raise ConfigError("experiment", experiment, "give a YAML file path, an experiment dict, or a list of resolved "
                                                "variants (turnout.sim.composition.expand)")


def _raw_of_resolved(variants: list[ResolvedExperiment]) -> dict[str, Any]:
    """An experiment dict that expands to exactly these variants (each variant sets every block it resolved)."""
    shared = ("name", "seeds", "plugins", "no_train")
    first = variants[0].config
    names = [v.variant for v in variants]
    differ = any(getattr(v.config, k) != getattr(first, k) for v in variants for k in shared)
    if len(set(names)) != len(names) or differ:
        raise ConfigError("experiment", f"<{len(variants)} resolved variants>",
                          "must come from one experiment (distinct variant names; the same name, seeds, plugins and "
                          "no_train); expand one experiment dict with turnout.sim.composition.expand")
    base = variants[0].as_dict()
    base.pop("grid", None)
    if len(variants) == 1 and variants[0].variant == "base":
        raw = base
    else:
        keys = [k for k in base if k not in ("name", "seeds", "plugins", "no_train")]
        raw = {**base, "variants": [{"name": v.variant, "set": {k: v.as_dict()[k] for k in keys}} for v in variants]}
    again = expand(copy.deepcopy(raw))
    if [v.variant for v in again] != [v.variant for v in variants] or any(
            a.as_dict() != b.as_dict() for a, b in zip(again, variants)):
        raise ConfigError("experiment", f"<{len(variants)} resolved variants>",
                          "must come from one experiment (the same name, seeds, plugins and no_train); expand one "
                          "experiment dict with turnout.sim.composition.expand")
    return raw


def _overrides(overrides) -> dict[str, Any]:
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return dict(overrides)
    if isinstance(overrides, str):
        overrides = [overrides]
    return dict(parse_override(o) for o in overrides)


__all__ = ["Results", "load", "run"]
