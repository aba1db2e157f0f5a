"""What the tables hold: a round's row of ``rounds.csv``, a run's summary, the comparison table.

General quantities (accuracy, loss, bytes, simulated seconds, resources) and the metrics the seed
papers define are kept apart: each paper's metric is a small named function here —
GlueFL's download time on the critical path (DT), Adaptive-OU's tail accuracy, FedGS's optimal
test loss — and the summariser only combines them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

#: Columns of ``comparison.csv`` (after ``variant`` and ``seed``), in order.
SUMMARY_KEYS = ("final_accuracy", "best_accuracy", "tail_accuracy", "tail_accuracy_std", "final_loss", "best_loss",
                "rounds_to_target", "sim_time_to_target_s", "download_time_to_target_s", "bytes_down_to_target",
                "bytes_up_to_target", "bytes_up", "bytes_down", "sim_time_s", "download_time_s",
                "compute_time_s", "upload_time_s", "download_share", "compute_share", "upload_share",
                "stale_per_round", "reports_aggregated", "staleness_mean", "resource_s", "wasted_s", "tau_max",
                "tau_avg", "selection_count_var",
                "centralized_accuracy", "wall_s", "diverged_at_round",
                # client-level DP (turnout.privacy): the standard ε, the per-client ε for the participation that
                # happened, reports clipped; secure aggregation's failed rounds and extra seconds
                "dp_epsilon", "dp_epsilon_client_max", "dp_epsilon_client_median", "dp_epsilon_over_budget",
                "dp_epsilon_amplified_max", "dp_epsilon_amplified_median", "dp_clipped_frac", "dp_norm_median",
                "secagg_failed_rounds", "secagg_s")

#: Results a diverged run does not have: an accuracy measured before the model blew up is no final result.
DIVERGED_UNREPORTED = ("final_accuracy", "best_accuracy", "tail_accuracy", "tail_accuracy_std", "final_loss",
                       "best_loss", "rounds_to_target", "sim_time_to_target_s", "download_time_to_target_s",
                       "bytes_down_to_target", "bytes_up_to_target")

#: Per-round quantities that ``rounds.csv`` also carries as running totals (``cum_<name>``).
CUMULATIVE = ("bytes_up", "bytes_down", "resource_s", "wasted_s", "download_s", "compute_s", "upload_s")


# ---- the seed papers' metrics ------------------------------------------------------------------
def critical_client(finish_s: np.ndarray, aggregated: np.ndarray) -> int | None:
    """Cohort index of the round's critical client: the last on-time report the round waited for."""
    if not aggregated.any():
        return None
    return int(np.flatnonzero(aggregated)[np.argmax(finish_s[aggregated])])


def critical_download_s(download_s: np.ndarray, finish_s: np.ndarray, aggregated: np.ndarray) -> float:
    """GlueFL's download time (DT): the download part of the round's critical path.

    The critical path ends with the last on-time report the round waited for; its download time,
    summed over rounds, is the time the run spent synchronising the model.
    """
    critical = critical_client(finish_s, aggregated)
    return 0.0 if critical is None else float(download_s[critical])


def critical_path_s(download_s: np.ndarray, compute_s: np.ndarray, upload_s: np.ndarray, finish_s: np.ndarray,
                    aggregated: np.ndarray) -> tuple[float, float, float]:
    """GlueFL Fig. 9: the critical client's (download, compute, upload) seconds; zeros when nothing was aggregated.

    The download part is :func:`critical_download_s` (DT); the three add up to that client's delivery time.
    """
    critical = critical_client(finish_s, aggregated)
    if critical is None:
        return 0.0, 0.0, 0.0
    return float(download_s[critical]), float(compute_s[critical]), float(upload_s[critical])


def time_shares(download_s: float, compute_s: float, upload_s: float) -> tuple[float, float, float]:
    """GlueFL Fig. 9's shares of the critical path spent downloading, computing and uploading (NaN when empty)."""
    total = download_s + compute_s + upload_s
    if total <= 0:
        return math.nan, math.nan, math.nan
    return download_s / total, compute_s / total, upload_s / total


def tail_accuracy(acc: np.ndarray) -> tuple[float, float]:
    """Adaptive-OU's Table 3 metric: mean and std of the accuracy over the last quarter of the evaluations."""
    evaluated = np.flatnonzero(~np.isnan(acc))
    if not len(evaluated):
        return math.nan, math.nan
    tail = acc[evaluated[-max(1, len(evaluated) // 4):]]
    return float(np.mean(tail)), float(np.std(tail))


def optimal_test_loss(losses: np.ndarray) -> float:
    """FedGS's Table 2 metric: the lowest server test loss over the evaluations."""
    return float(np.nanmin(losses)) if np.any(~np.isnan(losses)) else math.nan


def to_target(rows: list[dict], acc: np.ndarray, target: float) -> dict:
    """The ``*_to_target`` metrics: rounds, simulated and download seconds, bytes down and up counted to the first
    row whose ``acc`` is at or above ``target`` (empty dict when none is): one definition for the fixed
    ``eval.target_accuracy`` (``acc`` as evaluated) and for a report's target (``acc`` smoothed, see
    :func:`smoothed_accuracy`). ``rows`` carry the ``cum_*`` columns; numbers may be CSV strings."""
    hit = np.flatnonzero(acc >= target)
    if not len(hit):
        return {}
    row = rows[hit[0]]
    return {"rounds_to_target": int(hit[0]) + 1, "sim_time_to_target_s": float(row["sim_time_s"]),
            "download_time_to_target_s": float(row["cum_download_s"]),
            "bytes_down_to_target": int(row["cum_bytes_down"]), "bytes_up_to_target": int(row["cum_bytes_up"])}


#: GlueFL §5 (after Oort): the test accuracy is averaged over 5 rounds before it is compared with the target
SMOOTHING_ROUNDS = 5


def smoothed_accuracy(acc: np.ndarray, window: int = SMOOTHING_ROUNDS) -> np.ndarray:
    """GlueFL's averaged accuracy: at each evaluated round r (``acc[r]`` not NaN), the mean of the evaluations at
    rounds r − window + 1 … r — every evaluation of the last ``window`` rounds, at least r's own (with ``eval.every``
    ≥ ``window`` it is the evaluation itself); NaN at rounds that were not evaluated."""
    out = np.full(len(acc), np.nan)
    for r in np.flatnonzero(~np.isnan(acc)):
        recent = acc[max(0, r - window + 1):r + 1]
        out[r] = float(np.mean(recent[~np.isnan(recent)]))
    return out


def reached_by_all(best: Mapping[str, float]) -> tuple[float, str] | None:
    """GlueFL Table 2's target, "the highest achievable accuracy by all approaches": the lowest of the variants'
    best (smoothed) accuracies, and the variant it comes from (the first on a tie; None when ``best`` is empty)."""
    if not best:
        return None
    name = min(best, key=lambda v: best[v])
    return float(best[name]), name


# ---- rows ----------------------------------------------------------------------------------------
def cumulate(rows: list[dict]) -> None:
    """Add the running ``cum_*`` totals to each row, in place."""
    totals: dict[str, Any] = {"bytes_up": 0, "bytes_down": 0, "resource_s": 0.0, "wasted_s": 0.0, "download_s": 0.0,
                              "compute_s": 0.0, "upload_s": 0.0}
    for row in rows:
        for k in totals:
            totals[k] += row[k]
            row[f"cum_{k}"] = totals[k]


# ---- summaries -----------------------------------------------------------------------------------
def summarize(variant: str, seed: int, rows: list[dict], extra: Mapping[str, Any], target: float | None) -> dict:
    """One run's summary from its rows (with ``cum_*`` columns) and the engine's own figures."""
    acc = np.array([r["accuracy"] for r in rows], dtype=float)
    evaluated = np.flatnonzero(~np.isnan(acc))
    last = rows[-1]
    tail, tail_std = tail_accuracy(acc)
    s = {
        "variant": variant, "seed": seed, "rounds": len(rows),
        "final_accuracy": float(acc[evaluated[-1]]) if len(evaluated) else math.nan,
        "best_accuracy": float(np.nanmax(acc)) if len(evaluated) else math.nan,
        "final_loss": float(rows[evaluated[-1]]["loss"]) if len(evaluated) else math.nan,
        "tail_accuracy": tail, "tail_accuracy_std": tail_std,
        "best_loss": optimal_test_loss(np.array([rows[i]["loss"] for i in evaluated], dtype=float)),
        "bytes_up": int(last["cum_bytes_up"]), "bytes_down": int(last["cum_bytes_down"]),
        "sim_time_s": float(last["sim_time_s"]), "resource_s": float(last["cum_resource_s"]),
        "wasted_s": float(last["cum_wasted_s"]),
        "download_time_s": float(last["cum_download_s"]),
        "compute_time_s": float(last["cum_compute_s"]), "upload_time_s": float(last["cum_upload_s"]),
        "rounds_to_target": math.nan, "sim_time_to_target_s": math.nan, "download_time_to_target_s": math.nan,
        "bytes_down_to_target": math.nan, "bytes_up_to_target": math.nan,
    }
    s["stale_per_round"] = float(np.mean([r["n_stale"] for r in rows]))  # late reports used, per round (REFL)
    n_agg = np.array([r["n_aggregated"] for r in rows], dtype=float)
    s["reports_aggregated"] = int(n_agg.sum())  # client updates that reached the model: what async runs are paced by
    if "staleness_mean" in last:  # asynchronous rounds: mean staleness over every report aggregated
        tau = np.array([r["staleness_mean"] for r in rows], dtype=float)
        s["staleness_mean"] = float(np.nansum(tau * n_agg) / n_agg.sum()) if n_agg.sum() else math.nan
    else:
        s["staleness_mean"] = math.nan
    if "dp_clipped_frac" in last:  # client-level DP: the mean share of reports clipped, the median raw norm
        for col in ("dp_clipped_frac", "dp_norm_median"):
            vals = np.array([r[col] for r in rows], dtype=float)
            s[col] = float(np.nanmean(vals)) if np.any(~np.isnan(vals)) else math.nan
    if "secagg_failed" in last:  # secure aggregation: rounds that failed, seconds its exchanges added
        s["secagg_failed_rounds"] = int(sum(r["secagg_failed"] for r in rows))
        s["secagg_s"] = float(sum(r["secagg_setup_s"] + r["secagg_unmask_s"] for r in rows))
    s["download_share"], s["compute_share"], s["upload_share"] = time_shares(
        s["download_time_s"], s["compute_time_s"], s["upload_time_s"])
    if target is not None:
        s.update(to_target(rows, acc, target))
    s.update(extra)
    if s.get("diverged_at_round") is not None:
        s.update({k: math.nan for k in DIVERGED_UNREPORTED})
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
