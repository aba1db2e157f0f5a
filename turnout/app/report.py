"""Results pages: one markdown table per metric across run folders, plus curves, from finished runs.

A reproduction runs the same variants in several settings (availability modes, partitions), one
run folder each; the page puts the settings side by side (columns) for every variant (rows), as
the seed papers' tables do, with mean ± std over seeds and the best entry of each column in bold.
Everything is read back from the run folders' ``summary.json``, ``config.yaml`` and rounds table, so
a page can be rebuilt without re-running anything.

Variants of one experiment are compared seed by seed: for a given seed they share the population
(data partition, initial model, device profiles, availability draws), so the page also gives each
variant's per-seed difference from a baseline variant with a paired t interval over the seeds. Run
folders of the same experiment run a variant at a time (``turnout run ... --variant NAME``) are one
comparison, one column; folders that share no variant but are not of the same experiment stay apart,
and the page says why.
Every empty cell ("—") carries a footnote saying why it is empty.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ..core.errors import ConfigError, DataError
from ..recorders.base import read_run_table
from ..runs.rundir import CONFIG, EXPERIMENT, SUMMARY, UNIT_GLOB, UNIT_IDENTITY, UNIT_ROWS, UNIT_SUMMARY, UNITS
from ..runs.unit import read_rows

#: which way is better, for bolding the best entry of a column
LOWER_IS_BETTER = {"best_loss", "final_loss", "bytes_up", "bytes_down", "bytes_down_to_target", "bytes_up_to_target",
                   "rounds_to_target", "sim_time_to_target_s", "download_time_to_target_s", "download_time_s",
                   "sim_time_s", "resource_s", "wasted_s", "tau_max", "tau_avg", "selection_count_var",
                   "never_selected", "tail_accuracy_std", "dp_epsilon", "dp_epsilon_client_max",
                   "dp_epsilon_client_median", "dp_epsilon_over_budget", "dp_epsilon_amplified_max",
                   "dp_epsilon_amplified_median", "secagg_failed_rounds", "secagg_s"}

#: metrics with no better direction (shares of a whole): never bolded
NEUTRAL = {"download_share", "compute_share", "upload_share", "stale_per_round", "dp_clipped_frac", "dp_norm_median"}

#: metrics counted up to the first evaluation at or above ``eval.target_accuracy`` (empty when never reached)
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

#: top-level experiment keys that choose which units run or how they are shown and stored, never a
#: unit's numbers (``--seed`` and ``--quiet`` land here): ignored when asking whether two run folders
#: hold the same experiment
NOT_THE_EXPERIMENT = {"seeds", "output", "recorder", "loggers"}


def load_runs(folder: Path) -> dict:
    """``summary.json`` of a run folder; for an unfinished one (``DIR.partial``), its finished units'
    summaries plus ``incomplete``: the units still running or interrupted, with their rounds on disk."""
    folder = Path(folder)
    path = folder / SUMMARY
    if path.is_file():
        return json.loads(path.read_text())
    units = folder / UNITS
    if not units.is_dir():
        raise DataError(f"{folder}: not a turnout run folder (no summary.json, no units/); run `turnout run` first")
    import yaml

    config = yaml.safe_load((folder / CONFIG).read_text()) if (folder / CONFIG).is_file() else {}
    runs, on_disk = [], {}
    for unit in sorted(units.glob("*/seed-*")):
        if (unit / UNIT_SUMMARY).is_file():
            runs.append(json.loads((unit / UNIT_SUMMARY).read_text()))
        else:
            ident = _identity(unit)
            on_disk[(ident.get("variant"), ident.get("seed"))] = len(_unit_rows(unit))
    finished = {(r["variant"], r["seed"]) for r in runs}
    incomplete = [{"unit": f"{variant} seed {seed}", "rounds_done": on_disk.get((variant, seed), 0),
                   "rounds": cfg.get("rounds")}
                  for variant, cfg in (config.get("variants") or {}).items() for seed in config.get("seeds", [])
                  if (variant, seed) not in finished]
    return {"runs": runs, "incomplete": incomplete, "versions": config.get("turnout", {})}


def experiment_identity(folder: Path) -> dict | None:
    """What makes a run folder's units comparable seed by seed with another's: the experiment as given
    (file and ``--set`` overrides, from ``experiment.json``) less :data:`NOT_THE_EXPERIMENT` and the
    ``--variant`` choice (None: no ``experiment.json``)."""
    path = Path(folder) / EXPERIMENT
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    return {"file": {k: v for k, v in (doc.get("raw") or {}).items() if k not in NOT_THE_EXPERIMENT},
            "--set": {k: v for k, v in (doc.get("overrides") or {}).items()
                      if k.split(".")[0] not in NOT_THE_EXPERIMENT}}


def _flat(doc, prefix: str = "") -> dict[str, object]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (lists stay whole)."""
    if not isinstance(doc, dict) or (not doc and prefix):
        return {prefix: doc}
    return {k: v for key, value in doc.items() for k, v in _flat(value, f"{prefix}.{key}" if prefix else key).items()}


def _short_value(value) -> str:
    text = "(unset)" if value is _UNSET else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


_UNSET = object()


def why_not_one_experiment(a: Path, b: Path) -> str:
    """Why the run folders ``a`` and ``b`` are not the same experiment ("" when they are)."""
    ids = {f: experiment_identity(f) for f in (a, b)}
    missing = [Path(f).name for f, i in ids.items() if i is None]
    if missing:
        return (f"{' and '.join(missing)} {'has' if len(missing) == 1 else 'have'} no {EXPERIMENT} (made before "
                "turnout recorded it), so they are not known to be the same experiment")
    for part, where in (("file", "in the file"), ("--set", "set by --set")):
        fa, fb = _flat(ids[a][part]), _flat(ids[b][part])
        for key in dict.fromkeys([*fa, *fb]):
            va, vb = fa.get(key, _UNSET), fb.get(key, _UNSET)
            if va != vb:
                return (f"they are not the same experiment (`{key}` {where}: {_short_value(va)} in {Path(a).name}, "
                        f"{_short_value(vb)} in {Path(b).name})")
    return ""


def _units(summary: dict) -> set[str]:
    """A run folder's units, finished or not, as ``"VARIANT seed N"``."""
    finished = {f"{r['variant']} seed {r['seed']}" for r in summary["runs"]}
    return finished | {u["unit"] for u in summary.get("incomplete", [])}


def comparisons(folders: list[Path]) -> tuple[dict[str, list[Path]], list[str]]:
    """The run folders as the page's columns, and a sentence for each column kept apart from another.

    Folders of the same experiment (:func:`experiment_identity`) whose units (variant, seed) do not overlap
    are one comparison: one column named ``A + B``, their variants paired seed by seed. Folders that share
    a unit stay apart (two runs of one experiment, e.g. before and after a change). A folder that shares
    no variant with any earlier column (it looks like the rest of a comparison) but is not of the first
    column's experiment stays apart too, and a sentence says why.
    """
    groups: list[tuple[list[Path], set[str]]] = []
    for folder in map(Path, folders):
        summary, ident = load_runs(folder), experiment_identity(folder)
        for members, units in groups:
            if ident is not None and experiment_identity(members[0]) == ident and not units & _units(summary):
                members.append(folder)
                units |= _units(summary)
                break
        else:
            groups.append(([folder], _units(summary)))
    columns = {" + ".join(f.name for f in members): members for members, _ in groups}
    lines = [f"{name}: run folders of one experiment (the same config but for the variants each ran), compared "
             "as one." for name, members in columns.items() if len(members) > 1]
    variants = {name: {r["variant"] for f in members for r in load_runs(f)["runs"]}
                for name, members in columns.items()}
    names = list(columns)
    for j, later in enumerate(names[1:], 1):
        if variants[later] and not any(variants[later] & variants[earlier] for earlier in names[:j]):
            why = why_not_one_experiment(columns[names[0]][0], columns[later][0])
            lines.append(f"{later} shares no variant with {names[0]}, but {why}: their variants are not "
                         "compared seed by seed, and each folder is its own column.")
    return columns, lines


def _merged_runs(members: list[Path]) -> dict:
    """:func:`load_runs` of several run folders of one experiment, as if they were one folder."""
    parts = [load_runs(f) for f in members]
    return {"runs": [r for p in parts for r in p["runs"]],
            "incomplete": [u for p in parts for u in p.get("incomplete", [])],
            "versions": parts[0].get("versions", {})}


def _merged_targets(members: list[Path]) -> dict[str, float | None] | None:
    parts = [t for t in map(load_targets, members) if t is not None]
    return {k: v for t in parts for k, v in t.items()} if parts else None


def _unit_rows(unit: Path) -> list[dict]:
    return read_rows(unit / UNIT_ROWS)


def _identity(unit: Path) -> dict:
    path = unit / UNIT_IDENTITY
    return json.loads(path.read_text()) if path.is_file() else {}


def _rows(folder: Path):
    """Every round's row of a run folder: its rounds table when finished (whichever recorder wrote it),
    the units' streamed rows otherwise."""
    if (folder / SUMMARY).is_file() or not (folder / UNITS).is_dir():
        yield from read_run_table(folder, "rounds")
        return
    for unit in sorted((folder / UNITS).glob(UNIT_GLOB)):
        ident = _identity(unit)
        for row in _unit_rows(unit):
            yield {"variant": ident.get("variant"), "seed": ident.get("seed"), **row}


def load_targets(folder: Path) -> dict[str, float | None] | None:
    """Each variant's ``eval.target_accuracy`` from the run folder's ``config.yaml`` (None: no readable config)."""
    path = Path(folder) / CONFIG
    try:
        cfg = yaml.safe_load(path.read_text()) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return None
    variants = cfg.get("variants") if isinstance(cfg, dict) else None
    if not isinstance(variants, dict):
        return None
    return {str(name): (v.get("eval") or {}).get("target_accuracy") for name, v in variants.items()
            if isinstance(v, dict)}


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


def _target_text(target: float | None) -> str:
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
    the variant's seeds get a footnote saying why (``targets``: each setting's :func:`load_targets`).
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


#: columns the report derives from a rounds table: communication counted in model-sized vectors, as FedSUM's
#: Fig. 1(b) counts it — the cumulative bytes divided by the bytes of one dense model vector (the run summary's
#: ``vector_bytes``), whatever the algorithm sends (FedSUM's two downlink vectors show as two, a compressed
#: upload as a fraction of one)
VECTOR_COLUMNS = {"cum_vectors_up": "cum_bytes_up", "cum_vectors_down": "cum_bytes_down"}


def _with_vectors(folder: Path, rows: list[dict], names: list[str]) -> list[dict]:
    """``rows`` with the :data:`VECTOR_COLUMNS` among ``names`` added (bytes / the run's ``vector_bytes``)."""
    wanted = [n for n in names if n in VECTOR_COLUMNS]
    if not wanted or not rows:
        return rows
    size = {(r["variant"], r["seed"]): r.get("vector_bytes") for r in load_runs(folder)["runs"]}
    out = []
    for row in rows:
        vb = size.get((row["variant"], _seed(row["seed"])))
        if not vb:
            raise DataError(f"{folder}: the run summary of {row['variant']} seed {row['seed']} has no vector_bytes "
                            f"(runs made before turnout recorded it); re-run it to plot against {', '.join(wanted)}")
        out.append({**row, **{n: float(row[VECTOR_COLUMNS[n]]) / vb for n in wanted}})
    return out


def _seed(value) -> object:
    """A rounds-table seed (a string in CSV tables) as the summary spells it (an int)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def _x_value(row: dict, x: str) -> float | None:
    """The x coordinate of a rounds-table row: ``round`` (1-based), one column, or a sum ``a+b`` of columns."""
    if x == "round":
        return int(row["round"]) + 1
    total = 0.0
    for part in x.split("+"):
        value = row.get(part)
        if value is None or value == "":
            return None
        total += float(value)
    return total


def _check_columns(folder: Path, row: dict, flag: str, names: list[str]) -> None:
    for name in names:
        if name != "round" and name not in row:
            raise ConfigError(flag, name, f"not a column of {folder}'s rounds table; choose one of: "
                                          f"{', '.join(k for k in row if k not in ('variant', 'seed'))}")


def _curves(folder: Path | list[Path], column: str, x: str = "round", points: int = 100
            ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """Per variant: x values, mean and std of ``column`` over seeds at each x, and the number of seeds.

    ``x = "round"`` averages the seeds round by round. Any other ``x`` (a rounds-table column such as
    ``cum_bytes_down`` or ``cum_resource_s``, or a sum ``cum_bytes_up+cum_bytes_down``) differs from seed to
    seed, so each seed's curve is interpolated linearly onto ``points`` common x values spanning the range
    every seed covers, and the mean and std are taken there. Several folders (of one experiment) are read as one.
    """
    x_columns = x.split("+") if x != "round" else []
    rows = []
    for one in folder if isinstance(folder, list) else [folder]:
        mine = list(_rows(one))
        if mine:
            _check_columns(one, mine[0], "--curve", [column])
            _check_columns(one, {**mine[0], **dict.fromkeys(VECTOR_COLUMNS)}, "--curve-x", x_columns)
            rows += _with_vectors(one, mine, x_columns)
    per: dict[str, dict[object, list[tuple[float, float]]]] = {}
    for row in rows:
        value = row[column]
        if value is None or value == "" or math.isnan(float(value)):
            continue
        xv = _x_value(row, x)
        if xv is None or math.isnan(xv):
            continue
        per.setdefault(row["variant"], {}).setdefault(row["seed"], []).append((xv, float(value)))
    out = {}
    for v, by_seed in per.items():
        if x == "round":
            by_round: dict[float, list[float]] = {}
            for pts in by_seed.values():
                for xv, yv in pts:
                    by_round.setdefault(xv, []).append(yv)
            xs = np.array(sorted(by_round))
            vals = [np.array(by_round[i]) for i in xs]
            out[v] = (xs, np.array([a.mean() for a in vals]), np.array([a.std() for a in vals]), len(by_seed))
            continue
        curves = [np.array(sorted(pts)) for pts in by_seed.values()]
        lo, hi = max(c[0, 0] for c in curves), min(c[-1, 0] for c in curves)
        if hi < lo:  # the seeds' ranges do not overlap: nothing common to average
            continue
        grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
        ys = np.stack([np.interp(grid, c[:, 0], c[:, 1]) for c in curves])
        out[v] = (grid, ys.mean(axis=0), ys.std(axis=0), len(by_seed))
    return out


def _x_label(x: str) -> tuple[str, float]:
    """Axis label and scale of an x column (bytes in MB)."""
    if x == "round":
        return "round", 1.0
    if "vectors" in x:
        return f"model-sized vectors sent, {x.replace('cum_vectors_', '').replace('+', ' + ')}", 1.0
    if "bytes" in x:
        return f"{x.replace('+', ' + ')} (MB)", 1e-6
    if x.endswith("resource_s"):
        return f"{x} (client-seconds)", 1.0
    return x.replace("+", " + "), 1.0


def plot_curves(folders: dict[str, Path | list[Path]], column: str, out: Path, x: str = "round") -> Path:
    """One panel per setting: ``column`` against ``x`` (the round by default, see :func:`_curves`), mean over seeds
    with a ± std band, one line per variant.

    A variant keeps its colour in every panel, and one legend below the panels names them all with their
    number of seeds (settings may run different variants, e.g. FedSUM's Cases 1–4 beside P1–P3).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_setting = {name: list(dict.fromkeys(r["variant"] for f in (folder if isinstance(folder, list) else [folder])
                                            for r in load_runs(f)["runs"]))
                   for name, folder in folders.items()}
    every = list(dict.fromkeys(v for vs in per_setting.values() for v in vs))
    cmap = plt.get_cmap("tab10" if len(every) <= 10 else "tab20")
    colour = {v: cmap(i % cmap.N) for i, v in enumerate(every)}
    n = len(folders)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    lines, n_seeds = {}, {}
    xlabel, scale = _x_label(x)
    for ax, (name, folder) in zip(axes[0], folders.items()):
        curves = _curves(folder, column, x)
        for v in per_setting[name]:
            if v not in curves:
                continue
            xs, mean, std, k = curves[v]
            lines[v], = ax.plot(xs * scale, mean, lw=1.1, color=colour[v])
            ax.fill_between(xs * scale, mean - std, mean + std, color=colour[v], alpha=0.2, lw=0)
            n_seeds.setdefault(v, set()).add(k)
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"server test {column}\n(mean ± std over seeds)")
    shown = [v for v in every if v in lines]
    labels = [_legend_label(v, n_seeds[v]) for v in shown]
    ncol = max(1, min(len(shown), max(2, 2 * n)))
    fig.legend([lines[v] for v in shown], labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    rows = math.ceil(max(1, len(shown)) / ncol)
    fig.tight_layout(rect=(0, 0.06 * rows + 0.02, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _legend_label(variant: str, seed_counts: set[int]) -> str:
    """``K=5 (3 seeds)``; a variant run with different numbers of seeds in different panels shows the range."""
    lo, hi = min(seed_counts), max(seed_counts)
    return f"{variant} ({lo if lo == hi else f'{lo}–{hi}'} seed{'s' * (hi > 1)})"


def _selection_counts(folder: Path) -> dict[str, np.ndarray]:
    """Per variant: every client's ``times_selected``, averaged over seeds (from the clients table)."""
    acc: dict[str, dict[int, list[float]]] = {}
    for row in read_run_table(folder, "clients"):
        acc.setdefault(row["variant"], {}).setdefault(int(row["client"]), []).append(float(row["times_selected"]))
    return {v: np.array([np.mean(per[c]) for c in sorted(per)]) for v, per in acc.items()}


def plot_selection_counts(folder: Path, out: Path) -> Path:
    """FedGS Fig. 4: one bar chart per variant of how often each client was selected (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = _selection_counts(folder)
    n = len(counts)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 2.6 * rows), squeeze=False, sharey=True)
    for ax, (v, c) in zip(axes.flat, counts.items()):
        ax.bar(np.arange(len(c)), c, width=1.0)
        ax.set_title(f"{v} (var {np.var(c):.1f})", fontsize=9)
        ax.set_xlabel("client")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    for r in range(rows):
        axes[r][0].set_ylabel("times selected")
    fig.suptitle(f"{folder.name}: selection counts per client (mean over seeds)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def write_report(folders: list[Path], out: Path, metrics: list[str], title: str, command: str | None = None,
                 elapsed_s: float | None = None, curve: str | None = "loss", notes: str | None = None,
                 percent_of: str | None = None, counts: list[str] | None = None, baseline: str | None = None,
                 paired: list[str] | None = None, curve_x: list[str] | None = None,
                 provenance: dict[str, str] | None = None) -> Path:
    """Write the markdown page ``out`` (and its plots beside it) for the run ``folders``.

    ``counts`` names settings (folder names) whose per-client selection counts are drawn as well.
    ``curve_x`` lists the x axes the ``curve`` is drawn against, one figure each (default: the round; see
    :func:`_curves` for cumulative columns such as bytes or client-seconds). ``provenance`` (e.g. the commit
    and config hash the runs were made from) is printed under the versions line.
    ``paired`` metrics (default: those of :data:`PAIRED_BY_DEFAULT` the page tabulates) get per-seed
    differences from ``baseline`` (default: the first variant of the first folder).
    """
    columns, kept_apart = comparisons(folders)
    summaries = {name: _merged_runs(members) for name, members in columns.items()}
    by_name = {Path(f).name: Path(f) for f in folders}
    for name in counts or []:
        if name not in by_name:
            raise DataError(f"--counts {name}: not one of the run folders ({', '.join(by_name)})")
    variants = list(dict.fromkeys(r["variant"] for s in summaries.values() for r in s["runs"]))
    if baseline is not None and baseline not in variants:
        raise ConfigError("--baseline", baseline, f"not a variant of these run folders; choose one of: "
                                                  f"{', '.join(variants)}")
    baseline = baseline if baseline is not None else (variants[0] if variants else None)
    paired = [m for m in metrics if m in PAIRED_BY_DEFAULT] if paired is None else paired
    targets = {name: _merged_targets(members) for name, members in columns.items()}
    first = next(iter(summaries.values()))
    seeds = sorted({r["seed"] for s in summaries.values() for r in s["runs"]})
    cpu_s = sum(r.get("wall_s", 0.0) for s in summaries.values() for r in s["runs"])
    lines = [f"# {title}", ""]
    if command:
        lines += ["Regenerate (from a clean clone, after the README's set-up):", "", "```", command, "```", ""]
    v = first.get("versions", {})
    lines += [f"turnout {v.get('turnout', '?')}, torch {v.get('torch', '?')}, numpy {v.get('numpy', '?')}, "
              f"python {v.get('python', '?')}; seeds {', '.join(map(str, seeds))}; "
              + (f"wall-clock {elapsed_s / 60:.1f} min for the whole page on this machine; " if elapsed_s else "")
              + f"{cpu_s / 60:.1f} min summed over the runs.", ""]
    if provenance:
        lines += ["Made from " + "; ".join(f"{k} `{v}`" if " " not in v else f"{k}: {v}" for k, v in provenance.items())
                  + ".", ""]
    if notes:
        lines += [notes.strip(), ""]
    lines += [line for text in kept_apart for line in (text, "")]
    for name, s in summaries.items():
        if s.get("incomplete"):
            left = ", ".join(f"{u['unit']} ({u['rounds_done']} of {u['rounds']} rounds on disk)"
                             for u in s["incomplete"])
            lines += [f"**{name} is an incomplete run** ({len(s['runs'])} of {len(s['runs']) + len(s['incomplete'])} "
                      f"units finished; tables show the finished ones). Unfinished: {left}.", ""]
    for m in metrics:
        marks = Footnotes()
        better = "" if m in NEUTRAL else f"{'lower' if m in LOWER_IS_BETTER else 'higher'} is better; "
        lines += [f"## {m} ({better}mean ± std over seeds)", "",
                  metric_table(summaries, m, percent_of, marks, targets), marks.markdown()]
    if paired and len(variants) > 1:
        from scipy import stats

        lines += [f"## Paired differences from {baseline} (per seed, {100 * CONFIDENCE:g} % paired t interval)", "",
                  PAIRING.format(baseline=baseline, pct=100 * CONFIDENCE, q=(1 + CONFIDENCE) / 2), ""]
        if max(len({r["seed"] for r in s["runs"]}) for s in summaries.values()) == 1:
            t3 = stats.t.ppf((1 + CONFIDENCE) / 2, 2)
            lines += ["These run folders hold one seed each, so no interval can be given: run more seeds "
                      f"(e.g. `--set seeds=[0,1,2]`; the t quantile for 3 seeds is {t3:.3f}).", ""]
        for m in paired:
            marks = Footnotes()
            lines += [f"### {m}: variant − {baseline} ({'lower' if m in LOWER_IS_BETTER else 'higher'} is better)", "",
                      paired_table(summaries, m, baseline, marks, targets), marks.markdown()]
    for x in (curve_x or ["round"]) if curve else []:
        stem = curve if x == "round" else f"{curve}_vs_{x.replace('+', '_plus_')}"
        img = plot_curves(columns, curve, out.with_suffix("") / f"{stem}.png", x)
        against = "rounds" if x == "round" else _x_label(x)[0]
        band = "band: ± std" if x == "round" else "each seed interpolated onto common x values, band: ± std"
        lines += [f"## Server test {curve} against {against} (mean over seeds, {band}; seeds per variant in the "
                  "legend)", "", f"![]({out.stem}/{img.name})", ""]
    for name in counts or []:
        img = plot_selection_counts(by_name[name], out.with_suffix("") / f"counts_{name}.png")
        lines += [f"## Selection counts per client, {name}", "", f"![]({out.stem}/{img.name})", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    return out
