"""A deployment's run folder: the tables ``turnout run`` writes, so the two can be compared column by column.

``rounds.csv`` (the engine's row plus what was measured: payload and Flower record bytes, failed
devices, device training seconds, wall seconds), ``clients.csv``, ``comparison.csv``,
``summary.json`` and ``config.yaml`` are built with the simulator's own summariser and recorder;
``cohorts.csv`` adds one row per launched client and round (who, weight, aggregated / late /
failed, delivery seconds, bytes), which a simulation's tables do not carry.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from ..config.loader import ResolvedExperiment
from ..core.metrics import comparison_rows, cumulate, summarize
from ..recorders.base import rows_to_columns
from ..runs.experiment import versions
from ..runs.rundir import CONFIG, SCRATCH, SUMMARY, RunFolder, atomic_write_text
from ..runs.unit import jsonable
from ..sim.engine import RunResult


def write_run(folder: RunFolder, exp: ResolvedExperiment, seed: int, result: RunResult, cohort_log: list[dict],
              deployment: dict) -> Path:
    """Write every table into ``folder`` (a locked ``OUT.partial``) and complete it; returns the finished path."""
    rows = result.rounds
    cumulate(rows)
    summary = summarize(exp.variant, seed, rows, result.summary, exp.config.eval.target_accuracy)
    work = folder.path
    recorder = exp["recorder"].build()
    tag = {"variant": exp.variant, "seed": seed}
    recorder.write_table(work, "rounds", rows_to_columns([{**tag, **row} for row in rows]))
    n = len(next(iter(result.clients.values())))
    recorder.write_table(work, "clients", {"variant": [exp.variant] * n, "seed": [seed] * n, **result.clients})
    recorder.write_table(work, "comparison", rows_to_columns(comparison_rows([summary])))
    if cohort_log:
        recorder.write_table(work, "cohorts", rows_to_columns([{**tag, **c} for c in cohort_log]))
    vers = {**versions(), **({"flwr": deployment["flwr"]} if "flwr" in deployment else {})}
    doc = {"name": exp.config.name, "versions": vers, "deployment": deployment, "runs": [summary],
           "variants": [r for r in comparison_rows([summary]) if r["seed"] == "mean"]}
    atomic_write_text(work / SUMMARY, json.dumps(jsonable(doc), indent=2) + "\n")
    config = {"turnout": vers, "name": exp.config.name, "seeds": [seed], "deployment": deployment,
              "variants": {exp.variant: exp.as_dict()}}
    atomic_write_text(work / CONFIG, yaml.safe_dump(jsonable(config), sort_keys=False))
    shutil.rmtree(work / SCRATCH, ignore_errors=True)
    return folder.complete()


__all__ = ["write_run"]
