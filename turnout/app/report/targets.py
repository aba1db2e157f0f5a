"""The target a page's ``*_to_target`` metrics count to: each variant's ``eval.target_accuracy`` as the runs
recorded them (``config``), or GlueFL's "highest accuracy reached by all approaches" (``reached_by_all``),
recomputed from the rounds tables per setting and seed, so that every variant of a seed reaches it.

A fixed target set before the runs can be one that every method passes early (0.70 at round 27 of 150 on the
GlueFL page) or one that some never reach; the paper's target is read off the runs themselves, at the accuracy
the weakest method tops out at, and it compares the methods' costs to reach what all of them can reach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.errors import ConfigError
from ...core.metrics import SMOOTHING_ROUNDS, reached_by_all, smoothed_accuracy, to_target
from .folders import round_rows
from .tables import TARGET_METRICS

#: ``--target`` values (and a page's ``target:``): name → what the page says its target is
TARGETS = {
    "config": "each variant's eval.target_accuracy, as its run recorded it",
    "reached_by_all": (f"the paper's target (GlueFL §5, Table 2): per setting and seed, the highest "
                       f"{SMOOTHING_ROUNDS}-round-averaged test accuracy that every variant reached"),
}


@dataclass(frozen=True)
class SeedTarget:
    """One seed's common target in one setting and the variant whose best averaged accuracy set it."""

    seed: object
    target: float
    set_by: str


def check_target(name: str) -> str:
    if name not in TARGETS:
        raise ConfigError("--target", name, f"choose one of: {', '.join(TARGETS)}")
    return name


def _number(value) -> float:
    return math.nan if value is None or value == "" else float(value)


def _unit_rows(members: list[Path], finished: set[tuple[str, object]]) -> dict[tuple[str, object], list[dict]]:
    """Each finished unit's rounds-table rows, in round order (a CSV table's seeds are strings: made ints)."""
    out: dict[tuple[str, object], list[dict]] = {}
    for folder in members:
        for row in round_rows(folder):
            seed = row["seed"]
            key = (row["variant"], int(seed) if isinstance(seed, str) and seed.lstrip("-").isdigit() else seed)
            if key in finished:
                out.setdefault(key, []).append(row)
    return {k: sorted(rows, key=lambda r: int(r["round"])) for k, rows in out.items()}


def retarget(members: list[Path], summary: dict,
             window: int = SMOOTHING_ROUNDS) -> tuple[dict, list[SeedTarget]]:
    """``summary`` (:func:`~turnout.app.report.folders.merged_runs` of ``members``) with every ``*_to_target``
    metric of every run recounted to its seed's common target, and the targets.

    Per seed, each variant's best :func:`~turnout.core.metrics.smoothed_accuracy` over its run; the target is
    the lowest of them (:func:`~turnout.core.metrics.reached_by_all`), which every variant of the seed reaches, and
    each run's metrics are :func:`~turnout.core.metrics.to_target` of its smoothed accuracy. A diverged run or
    one with no evaluation takes no part in its seed's target and keeps no to-target metric.
    """
    runs = [dict(r) for r in summary["runs"]]
    usable = [r for r in runs if r.get("diverged_at_round") is None]
    rows = _unit_rows(members, {(r["variant"], r["seed"]) for r in usable})
    smoothed: dict[tuple[str, object], np.ndarray] = {}
    for key, unit in rows.items():
        acc = smoothed_accuracy(np.array([_number(r.get("accuracy")) for r in unit], dtype=float), window)
        if np.any(~np.isnan(acc)):
            smoothed[key] = acc
    targets = []
    for seed in dict.fromkeys(r["seed"] for r in usable):
        best = {v: float(np.nanmax(acc)) for (v, s), acc in smoothed.items() if s == seed}
        common = reached_by_all(best)
        if common is not None:
            targets.append(SeedTarget(seed, *common))
    at = {t.seed: t.target for t in targets}
    for r in runs:
        key = (r["variant"], r["seed"])
        r.update({m: math.nan for m in TARGET_METRICS})
        if key in smoothed:
            r.update(to_target(rows[key], smoothed[key], at[r["seed"]]))
    return {**summary, "runs": runs}, targets


def targets_section(targets: dict[str, list[SeedTarget]], fixed: dict[str, dict | None]) -> list[str]:
    """The page's lines saying which target each setting and seed used (``fixed``: the targets the runs recorded,
    set aside)."""
    recorded = sorted({v for t in fixed.values() if t for v in t.values() if v is not None})
    aside = (f" The runs' own eval.target_accuracy ({', '.join(f'{v:g}' for v in recorded)}, the target of their "
             "summary.json and comparison.csv) is set aside on this page.") if recorded else ""
    seeds = list(dict.fromkeys(t.seed for ts in targets.values() for t in ts))
    cell = {(name, t.seed): f"{t.target:.4f} ({t.set_by})" for name, ts in targets.items() for t in ts}
    lines = ["## Target accuracy per setting and seed", "",
             f"The target is {TARGETS['reached_by_all']}. "
             f"Every *_to_target metric below counts to the first evaluated round whose test accuracy averaged "
             f"over the evaluations of the last {SMOOTHING_ROUNDS} rounds is at or above the target of its setting "
             "and seed: the lowest, over the variants, of each variant's best averaged accuracy (in brackets: the "
             "variant it comes from), so every variant of a seed reaches it." + aside, "",
             "| seed | " + " | ".join(targets) + " |", "|---|" + "---|" * len(targets)]
    lines += ["| " + str(s) + " | " + " | ".join(cell.get((n, s), "—") for n in targets) + " |" for s in seeds]
    return lines + [""]
