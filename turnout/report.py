"""Results pages: one markdown table per metric across run folders, plus curves, from finished runs.

A reproduction runs the same variants in several settings (availability modes, partitions), one
run folder each; the page puts the settings side by side (columns) for every variant (rows), as
the seed papers' tables do, with mean ± std over seeds and the best entry of each column in bold.
Everything is read back from the run folders' ``summary.json`` and ``rounds.csv``, so a page can be
rebuilt without re-running anything.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from .errors import DataError

#: which way is better, for bolding the best entry of a column
LOWER_IS_BETTER = {"best_loss", "final_loss", "bytes_up", "bytes_down", "bytes_down_to_target", "bytes_up_to_target",
                   "rounds_to_target", "sim_time_to_target_s", "download_time_to_target_s", "download_time_s",
                   "sim_time_s", "resource_s", "wasted_s", "tau_max", "tau_avg", "selection_count_var",
                   "never_selected", "tail_accuracy_std"}


def load_runs(folder: Path) -> dict:
    """``summary.json`` of a run folder; for an unfinished one (``DIR.partial``), its finished units'
    summaries plus ``incomplete``: the units still running or interrupted, with their rounds on disk."""
    folder = Path(folder)
    path = folder / "summary.json"
    if path.is_file():
        return json.loads(path.read_text())
    units = folder / "units"
    if not units.is_dir():
        raise DataError(f"{folder}: not a turnout run folder (no summary.json, no units/); run `turnout run` first")
    import yaml

    config = yaml.safe_load((folder / "config.yaml").read_text()) if (folder / "config.yaml").is_file() else {}
    runs, on_disk = [], {}
    for unit in sorted(units.glob("*/seed-*")):
        if (unit / "summary.json").is_file():
            runs.append(json.loads((unit / "summary.json").read_text()))
        else:
            ident = _identity(unit)
            on_disk[(ident.get("variant"), ident.get("seed"))] = len(_unit_rows(unit))
    finished = {(r["variant"], r["seed"]) for r in runs}
    incomplete = [{"unit": f"{variant} seed {seed}", "rounds_done": on_disk.get((variant, seed), 0),
                   "rounds": cfg.get("rounds")}
                  for variant, cfg in (config.get("variants") or {}).items() for seed in config.get("seeds", [])
                  if (variant, seed) not in finished]
    return {"runs": runs, "incomplete": incomplete, "versions": config.get("turnout", {})}


def _unit_rows(unit: Path) -> list[dict]:
    from .unit import read_rows

    return read_rows(unit / "rounds.jsonl")


def _identity(unit: Path) -> dict:
    path = unit / "unit.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _rows(folder: Path):
    """Every round's row of a run folder: ``rounds.csv`` when finished, the units' streamed rows otherwise."""
    if (folder / "rounds.csv").is_file():
        with open(folder / "rounds.csv", newline="") as fh:
            yield from csv.DictReader(fh)
        return
    for unit in sorted((folder / "units").glob("*/seed-*")):
        variant = _identity(unit).get("variant")
        for row in _unit_rows(unit):
            yield {"variant": variant, **row}


def _stats(runs: list[dict], variant: str, metric: str) -> tuple[float, float, int]:
    vals = np.array([r.get(metric, math.nan) if r.get(metric) is not None else math.nan
                     for r in runs if r["variant"] == variant], dtype=float)
    ok = vals[~np.isnan(vals)]
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


def metric_table(summaries: dict[str, dict], metric: str, percent_of: str | None = None) -> str:
    """Markdown table: variants × settings of ``metric`` (mean ± std over seeds; best per column in bold).

    With ``percent_of``, byte metrics are shown as a percentage of that variant's mean in the same column
    (Adaptive-OU's "communication used").
    """
    settings = list(summaries)
    variants = list(dict.fromkeys(r["variant"] for s in summaries.values() for r in s["runs"]))
    lower = metric in LOWER_IS_BETTER
    cells: dict[tuple[str, str], str] = {}
    for col in settings:
        runs = summaries[col]["runs"]
        seeds = len({r["seed"] for r in runs})
        means = {v: _stats(runs, v, metric) for v in variants}
        finite = [m for m, _, n in means.values() if n]
        best = (min(finite) if lower else max(finite)) if finite else None
        ref = means.get(percent_of, (math.nan, 0, 0))[0] if percent_of and metric.startswith("bytes") else None
        for v, (m, sd, n) in means.items():
            text = _fmt(m, sd, n, seeds)
            if ref is not None and ref > 0 and n:
                text += f" ({100 * m / ref:.0f} %)"
            cells[(v, col)] = f"**{text}**" if n and best is not None and m == best else text
    head = "| method | " + " | ".join(settings) + " |\n|---|" + "---|" * len(settings) + "\n"
    return head + "".join("| " + v + " | " + " | ".join(cells[(v, c)] for c in settings) + " |\n" for v in variants)


def _mean_curve(folder: Path, variant: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    per_round: dict[int, list[float]] = {}
    for row in _rows(folder):
        value = row.get(column)
        if row["variant"] != variant or value in ("", "nan", None) or value != value:
            continue
        per_round.setdefault(int(row["round"]) + 1, []).append(float(value))
    x = np.array(sorted(per_round))
    return x, np.array([np.mean(per_round[i]) for i in x])


def plot_curves(folders: dict[str, Path], column: str, out: Path) -> Path:
    """One panel per setting: ``column`` (mean over seeds) against the round, one line per variant.

    A variant keeps its colour in every panel, and one legend below the panels names them all (settings
    may run different variants, e.g. FedSUM's Cases 1–4 beside P1–P3).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_setting = {name: list(dict.fromkeys(r["variant"] for r in load_runs(folder)["runs"]))
                   for name, folder in folders.items()}
    every = list(dict.fromkeys(v for vs in per_setting.values() for v in vs))
    cmap = plt.get_cmap("tab10" if len(every) <= 10 else "tab20")
    colour = {v: cmap(i % cmap.N) for i, v in enumerate(every)}
    n = len(folders)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), squeeze=False)
    lines = {}
    for ax, (name, folder) in zip(axes[0], folders.items()):
        for v in per_setting[name]:
            x, y = _mean_curve(folder, v, column)
            lines[v], = ax.plot(x, y, lw=1.1, color=colour[v], label=v)
        ax.set_title(name)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"server test {column} (mean over seeds)")
    ncol = min(len(every), max(2, 2 * n))
    fig.legend([lines[v] for v in every], every, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    rows = math.ceil(len(every) / ncol)
    fig.tight_layout(rect=(0, 0.06 * rows + 0.02, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _selection_counts(folder: Path) -> dict[str, np.ndarray]:
    """Per variant: every client's ``times_selected``, averaged over seeds (from ``clients.csv``)."""
    path = folder / "clients.csv"
    if not path.is_file():
        raise DataError(f"{folder}: no clients.csv; selection counts need a finished run folder")
    acc: dict[str, dict[int, list[float]]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
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
                 percent_of: str | None = None, counts: list[str] | None = None) -> Path:
    """Write the markdown page ``out`` (and its plots beside it) for the run ``folders``.

    ``counts`` names settings (folder names) whose per-client selection counts are drawn as well.
    """
    summaries = {Path(f).name: load_runs(Path(f)) for f in folders}
    by_name = {Path(f).name: Path(f) for f in folders}
    for name in counts or []:
        if name not in by_name:
            raise DataError(f"--counts {name}: not one of the run folders ({', '.join(by_name)})")
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
    if notes:
        lines += [notes.strip(), ""]
    for name, s in summaries.items():
        if s.get("incomplete"):
            left = ", ".join(f"{u['unit']} ({u['rounds_done']} of {u['rounds']} rounds on disk)"
                             for u in s["incomplete"])
            lines += [f"**{name} is an incomplete run** ({len(s['runs'])} of {len(s['runs']) + len(s['incomplete'])} "
                      f"units finished; tables show the finished ones). Unfinished: {left}.", ""]
    for m in metrics:
        lines += [f"## {m} ({'lower' if m in LOWER_IS_BETTER else 'higher'} is better; mean ± std over seeds)", "",
                  metric_table(summaries, m, percent_of), ""]
    if curve:
        img = plot_curves({Path(f).name: Path(f) for f in folders}, curve, out.with_suffix("") / f"{curve}.png")
        lines += [f"## Server test {curve} against rounds", "", f"![]({out.stem}/{img.name})", ""]
    for name in counts or []:
        img = plot_selection_counts(by_name[name], out.with_suffix("") / f"counts_{name}.png")
        lines += [f"## Selection counts per client, {name}", "", f"![]({out.stem}/{img.name})", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    return out
