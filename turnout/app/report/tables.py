"""The page's statistics and tables: mean ± std over seeds per variant and setting, paired per-seed differences
from a baseline with a t interval, and a footnote for every empty or partial cell saying why."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: which way is better, for bolding the best entry of a column
LOWER_IS_BETTER = {"best_loss", "final_loss", "bytes_up", "bytes_down", "bytes_down_to_target", "bytes_up_to_target",
                   "rounds_to_target", "sim_time_to_target_s", "download_time_to_target_s", "download_time_s",
                   "sim_time_s", "resource_s", "wasted_s", "tau_max", "tau_avg", "selection_count_var",
                   "never_selected", "tail_accuracy_std", "dp_epsilon", "dp_epsilon_client_max",
                   "dp_epsilon_client_median", "dp_epsilon_over_budget", "dp_epsilon_amplified_max",
                   "dp_epsilon_amplified_median", "secagg_failed_rounds", "secagg_s"}

#: metrics with no better direction (shares of a whole): never bolded
NEUTRAL = {"download_share", "compute_share", "upload_share", "stale_per_round", "dp_clipped_frac", "dp_norm_median"}

#: metrics counted up to the first evaluation at or above the target (``eval.target_accuracy``, or the report's
#: ``--target``: :mod:`turnout.app.report.targets`; empty when never reached)
TARGET_METRICS = {"rounds_to_target", "sim_time_to_target_s", "download_time_to_target_s", "bytes_down_to_target",
                  "bytes_up_to_target"}

#: metrics that get paired differences when the page tabulates them (``--paired`` chooses others)
PAIRED_BY_DEFAULT = ("final_accuracy", "rounds_to_target", "sim_time_to_target_s", "bytes_down_to_target",
                     "bytes_up_to_target")

#: why a metric can be empty in every seed, beyond the target rules
EMPTY_BECAUSE = {"centralized_accuracy": "eval.centralized_baseline was off",
                 "final_accuracy": "no evaluation ran", "best_accuracy": "no evaluation ran",
                 "final_loss": "no evaluation ran", "best_loss": "no evaluation ran"}

CONFIDENCE = 0.95


class Footnotes:
    """Numbered reasons for empty or partial cells, listed under their table (a repeated reason keeps its number)."""

    _DIGITS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")

    def __init__(self):
        self.reasons: list[str] = []

    def mark(self, reason: str) -> str:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return str(self.reasons.index(reason) + 1).translate(self._DIGITS)

    def markdown(self) -> str:
        return "".join(f"- {self.mark(r)} {r}\n" for r in self.reasons)


def _per_seed(runs: list[dict], variant: str, metric: str) -> dict[int, float]:
    """Seed → finite value of ``metric`` for ``variant`` (seeds without a value are left out)."""
    out = {}
    for r in runs:
        v = r.get(metric)
        if r["variant"] == variant and v is not None and not (isinstance(v, float) and math.isnan(v)):
            out[r["seed"]] = float(v)
    return out


def _seeds_of(runs: list[dict], variant: str) -> list:
    return [r["seed"] for r in runs if r["variant"] == variant]


def _seeds_text(seeds: list) -> str:
    return f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}"


def _target_text(target: float | str | None) -> str:
    """A fixed target as a number; a target given as words (a report's ``--target``) as they are."""
    if isinstance(target, str):
        return target
    return f"the target accuracy {target:g}" if target is not None else "the target accuracy"


def why_empty(runs: list[dict], variant: str, metric: str, setting: str, targets: dict | None) -> str:
    """Why ``variant`` has no value of ``metric`` in any seed of the run folder ``setting``."""
    mine = [r for r in runs if r["variant"] == variant]
    if not mine:
        return f"{variant} was not run in {setting}"
    if not any(metric in r for r in mine):
        return f"{metric} is absent from {setting}'s summary.json"
    if metric in TARGET_METRICS:
        if targets is not None and variant in targets and targets[variant] is None:
            return f"no target: eval.target_accuracy is unset for {variant} in {setting}"
        target = None if targets is None else targets.get(variant)
        unset = "" if target is not None else " (or eval.target_accuracy was unset)"
        return f"{variant} did not reach {_target_text(target)} with any of its {len(mine)} seeds in {setting}{unset}"
    because = EMPTY_BECAUSE.get(metric, "no seed recorded a value")
    return f"{metric} of {variant} is empty in every seed in {setting}: {because}"


def why_partial(runs: list[dict], variant: str, metric: str, setting: str, targets: dict | None) -> str:
    """Which seeds of ``variant`` have no value of ``metric`` in ``setting`` (and why, for target metrics)."""
    missing = [s for s in _seeds_of(runs, variant) if s not in _per_seed(runs, variant, metric)]
    if metric in TARGET_METRICS:
        target = None if targets is None else targets.get(variant)
        return f"{variant} did not reach {_target_text(target)} with {_seeds_text(missing)} in {setting}"
    return f"{metric} of {variant} is empty for {_seeds_text(missing)} in {setting}"


def _stats(runs: list[dict], variant: str, metric: str) -> tuple[float, float, int]:
    ok = np.array(list(_per_seed(runs, variant, metric).values()), dtype=float)
    if len(ok) == 0:
        return math.nan, math.nan, 0
    return float(ok.mean()), float(ok.std()), len(ok)


def _fmt(mean: float, std: float, n: int, total: int) -> str:
    if n == 0:
        return "—"
    mag = max(abs(mean), 1e-12)
    digits = 3 if mag < 10 else (1 if mag < 1000 else 0)
    if mag >= 1e5:
        text = f"{mean:.3g} ± {std:.2g}"
    else:
        text = f"{mean:.{digits}f} ± {std:.{digits}f}"
    return text + (f" ({n}/{total})" if n < total else "")


def metric_table(summaries: dict[str, dict], metric: str, percent_of: str | None = None,
                 notes: Footnotes | None = None, targets: dict[str, dict | None] | None = None) -> str:
    """Markdown table: variants × settings of ``metric`` (mean ± std over seeds; best per column in bold).

    With ``percent_of``, byte metrics are shown as a percentage of that variant's mean in the same column
    (Adaptive-OU's "communication used"). With ``notes``, an empty cell ("—") and a cell missing some of
    the variant's seeds get a footnote saying why (``targets``: each setting's
    :func:`~turnout.app.report.folders.load_targets`).
    """
    settings = list(summaries)
    variants = list(dict.fromkeys(r["variant"] for s in summaries.values() for r in s["runs"]))
    lower = metric in LOWER_IS_BETTER
    neutral = metric in NEUTRAL
    cells: dict[tuple[str, str], str] = {}
    for col in settings:
        runs = summaries[col]["runs"]
        seeds = len({r["seed"] for r in runs})
        means = {v: _stats(runs, v, metric) for v in variants}
        finite = [m for m, _, n in means.values() if n]
        best = (min(finite) if lower else max(finite)) if finite and not neutral else None
        ref = means.get(percent_of, (math.nan, 0, 0))[0] if percent_of and metric.startswith("bytes") else None
        for v, (m, sd, n) in means.items():
            text = _fmt(m, sd, n, seeds)
            if ref is not None and ref > 0 and n:
                text += f" ({100 * m / ref:.0f} %)"
            text = f"**{text}**" if n and best is not None and m == best else text
            tgt = (targets or {}).get(col)
            if notes is not None and n == 0:
                text += notes.mark(why_empty(runs, v, metric, col, tgt))
            elif notes is not None and n < len(_seeds_of(runs, v)):
                text += notes.mark(why_partial(runs, v, metric, col, tgt))
            cells[(v, col)] = text
    head = "| method | " + " | ".join(settings) + " |\n|---|" + "---|" * len(settings) + "\n"
    return head + "".join("| " + v + " | " + " | ".join(cells[(v, c)] for c in settings) + " |\n" for v in variants)


@dataclass(frozen=True)
class PairedDifference:
    """Mean of the per-seed differences (variant − baseline) and its paired t interval (None with one seed)."""

    n: int
    mean: float
    low: float | None
    high: float | None


def paired_difference(baseline: dict, other: dict, confidence: float = CONFIDENCE) -> PairedDifference | None:
    """Paired t interval over the seeds both ``{seed: value}`` maps hold (None when they share no seed).

    mean ± t_{(1+confidence)/2, n−1} · s / √n, with s the sample standard deviation (n − 1) of the differences.
    """
    from scipy import stats

    seeds = [s for s in baseline if s in other]
    if not seeds:
        return None
    d = np.array([other[s] - baseline[s] for s in seeds], dtype=float)
    mean = float(d.mean())
    if len(d) < 2:
        return PairedDifference(1, mean, None, None)
    half = float(stats.t.ppf((1 + confidence) / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return PairedDifference(len(d), mean, mean - half, mean + half)


def _fmt_signed(x: float, scale: float) -> str:
    if scale >= 1e5:
        return f"{x:+.3g}"
    digits = 4 if scale < 1 else 3 if scale < 10 else 1 if scale < 1000 else 0
    return f"{x:+.{digits}f}"


def _fmt_difference(d: PairedDifference) -> str:
    scale = max(abs(d.mean), abs(d.low or 0.0), abs(d.high or 0.0), 1e-12)
    if d.low is None:
        return f"{_fmt_signed(d.mean, scale)} (1 seed: no interval)"
    return f"{_fmt_signed(d.mean, scale)} [{_fmt_signed(d.low, scale)}, {_fmt_signed(d.high, scale)}] (n={d.n})"


def paired_table(summaries: dict[str, dict], metric: str, baseline: str, notes: Footnotes,
                 targets: dict[str, dict | None] | None = None) -> str:
    """Markdown table: variants × settings of the per-seed difference ``metric``(variant) − ``metric``(baseline)."""
    variants = [v for v in dict.fromkeys(r["variant"] for s in summaries.values() for r in s["runs"]) if v != baseline]
    rows = []
    for v in variants:
        cells = []
        for col, summary in summaries.items():
            runs, tgt = summary["runs"], (targets or {}).get(col)
            base, other = _per_seed(runs, baseline, metric), _per_seed(runs, v, metric)
            d = paired_difference(base, other)
            if not _seeds_of(runs, baseline):
                cells.append("—" + notes.mark(f"the baseline {baseline} was not run in {col}"))
            elif not _seeds_of(runs, v):
                cells.append("—" + notes.mark(f"{v} was not run in {col}"))
            elif not base:
                cells.append("—" + notes.mark(why_empty(runs, baseline, metric, col, tgt)))
            elif not other:
                cells.append("—" + notes.mark(why_empty(runs, v, metric, col, tgt)))
            elif d is None:
                cells.append("—" + notes.mark(f"{v} and {baseline} have {metric} for no common seed in {col}"))
            else:
                text = _fmt_difference(d)
                ran = set(_seeds_of(runs, v)) & set(_seeds_of(runs, baseline))
                if d.n < len(ran):
                    left = [s for s in _seeds_of(runs, v) if s in ran and (s not in base or s not in other)]
                    who = [w for w, vals in ((v, other), (baseline, base)) if any(s not in vals for s in left)]
                    text += notes.mark(f"{_seeds_text(left)} left out in {col}: "
                                       f"no {metric} for {' and '.join(who)}"
                                       + (" (target not reached)" if metric in TARGET_METRICS else ""))
                cells.append(text)
        rows.append("| " + v + " | " + " | ".join(cells) + " |\n")
    head = "| variant | " + " | ".join(summaries) + " |\n|---|" + "---|" * len(summaries) + "\n"
    return head + "".join(rows)


PAIRING = ("Each cell: the mean over seeds of the per-seed difference (variant − {baseline}), the {pct:g} % "
           "confidence interval of a paired t test in brackets (mean ± t · s/√n, t the {q:g} quantile of Student's "
           "t with n − 1 degrees of freedom, s the standard deviation of the n differences), and n, the number of "
           "seeds. The pairing holds by construction: for a given seed, every variant of a run folder runs on the "
           "same population — the same data partition, initial model, device profiles and availability draws — "
           "so a per-seed difference leaves out what the seeds' populations add to the spread. With one seed "
           "there is no interval. For metrics where lower is better (rounds, time, bytes to the target) a "
           "negative difference favours the variant.")

