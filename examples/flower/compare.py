"""Compare a Flower deployment's run folders with `turnout run` of the same experiment and seed.

Two things are compared per variant:

* the tables: `turnout run` writes its run folder, and each round's bytes down / up, the number
  of launched and aggregated clients and the evaluated accuracy are set side by side with the
  deployment's ``rounds.csv``;
* the cohorts: a simulation's tables do not list who was launched, so the variant is simulated
  once more by the same engine with its selector wrapped to record each round's cohort and what
  became of it (aggregated, late), and that is set beside the deployment's ``cohorts.csv``.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np


class RecordingSelector:
    """The configured selector, recording each round's cohort and its fate (aggregated, late)."""

    def __init__(self, inner):
        self.inner, self.rounds = inner, []

    def target(self):
        return self.inner.target()

    def select(self, ctx):
        cohort = self.inner.select(ctx)
        self.rounds.append({"clients": cohort.clients.copy()})
        return cohort

    def settle_weights(self, cohort, feedback):
        return self.inner.settle_weights(cohort, feedback)

    def observe(self, feedback):
        self.rounds[-1].update(aggregated=np.asarray(feedback.aggregated).copy(), late=np.asarray(feedback.late).copy())
        self.inner.observe(feedback)

    def round_metrics(self):
        return self.inner.round_metrics()


def simulated_cohorts(exp, seed: int) -> list[dict]:
    """Each round's cohort (sorted client ids) and aggregated / late flags, as the simulator decides them."""
    from turnout.sim.engine import Simulation

    data = exp["data"].cls.build(exp["data"].cfg, seed)
    recorder: list[RecordingSelector] = []

    def build(ctx):
        recorder.append(RecordingSelector(ctx.exp["selector"].build(ctx.world)))
        return recorder[0]

    Simulation(exp, data, seed, components={"selector": build}).run()
    out = []
    for r in recorder[0].rounds:
        order = np.argsort(r["clients"], kind="stable")
        out.append({"clients": r["clients"][order], "aggregated": r["aggregated"][order], "late": r["late"][order]})
    return out


def deployed_cohorts(folder: Path, rounds: int) -> list[dict]:
    """The same from a deployment's ``cohorts.csv``."""
    by_round: list[list[dict]] = [[] for _ in range(rounds)]
    with open(Path(folder) / "cohorts.csv") as f:
        for row in csv.DictReader(f):
            by_round[int(row["round"])].append(row)
    out = []
    for rows in by_round:
        rows.sort(key=lambda r: int(r["client"]))
        out.append({"clients": np.array([int(r["client"]) for r in rows], dtype=np.int64),
                    "aggregated": np.array([r["aggregated"] == "True" for r in rows], dtype=bool),
                    "late": np.array([r["late"] == "True" for r in rows], dtype=bool)})
    return out


def read_rounds(folder: Path, variant: str) -> list[dict]:
    with open(Path(folder) / "rounds.csv") as f:
        return [row for row in csv.DictReader(f) if row["variant"] == variant]


def _num(v: str) -> float:
    return float(v) if v not in ("", "nan") else math.nan


def compare_variant(exp, seed: int, deployed: Path, simulated: Path) -> dict:
    """Per-variant comparison: rounds with identical cohorts, byte totals and per-round equality, accuracies."""
    rounds = exp.config.rounds
    sim_c, dep_c = simulated_cohorts(exp, seed), deployed_cohorts(deployed, rounds)
    same_cohort = sum(np.array_equal(a["clients"], b["clients"]) and np.array_equal(a["aggregated"], b["aggregated"])
                      and np.array_equal(a["late"], b["late"]) for a, b in zip(sim_c, dep_c))
    sim_r, dep_r = read_rounds(simulated, exp.variant), read_rounds(deployed, exp.variant)
    out = {"variant": exp.variant, "rounds": rounds, "same_cohorts": int(same_cohort)}
    for key in ("bytes_down", "bytes_up"):
        a = np.array([int(r[key]) for r in sim_r])
        b = np.array([int(r[key]) for r in dep_r])
        out[f"{key}_simulated"], out[f"{key}_deployed"] = int(a.sum()), int(b.sum())
        out[f"{key}_same_rounds"] = int((a == b).sum())
    out["payload_bytes_down"] = int(sum(int(r["payload_bytes_down"]) for r in dep_r))
    out["payload_bytes_up"] = int(sum(int(r["payload_bytes_up"]) for r in dep_r))
    acc_s = np.array([_num(r["accuracy"]) for r in sim_r])
    acc_d = np.array([_num(r["accuracy"]) for r in dep_r])
    both = ~np.isnan(acc_s) & ~np.isnan(acc_d)
    out["final_accuracy_simulated"] = float(acc_s[both][-1]) if both.any() else math.nan
    out["final_accuracy_deployed"] = float(acc_d[both][-1]) if both.any() else math.nan
    out["max_accuracy_difference"] = float(np.max(np.abs(acc_s[both] - acc_d[both]))) if both.any() else math.nan
    return out


def compare_with_simulation(raw: dict, overrides: dict, variants: list, seed: int, folders: dict[str, Path],
                            out: Path) -> str:
    """`turnout run` the variants into ``out``, compare each with its deployment, and return a table."""
    from turnout.runs.experiment import run_experiment
    from turnout.sim.composition import expand

    names = {v.variant for v in variants}
    one_seed = {**overrides, "seeds": [seed]}
    exps = [v for v in expand(raw, one_seed) if v.variant in names]
    sim_folder, _ = run_experiment(exps, {"raw": raw, "overrides": one_seed}, out=out, expand=expand)
    rows = [compare_variant(v, seed, folders[v.variant], sim_folder) for v in variants]
    head = ("variant", "same cohorts", "bytes down sim / deployed", "bytes up sim / deployed",
            "final acc sim / deployed", "max |Δacc|")
    lines = [" | ".join(head)]
    for r in rows:
        lines.append(" | ".join([
            r["variant"], f"{r['same_cohorts']}/{r['rounds']}",
            f"{r['bytes_down_simulated']:,} / {r['bytes_down_deployed']:,}",
            f"{r['bytes_up_simulated']:,} / {r['bytes_up_deployed']:,}",
            f"{r['final_accuracy_simulated']:.4f} / {r['final_accuracy_deployed']:.4f}",
            f"{r['max_accuracy_difference']:.4f}"]))
    return "\n".join(lines)
