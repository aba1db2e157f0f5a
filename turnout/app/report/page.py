"""The results page: the markdown file and its figures, from run folders (see the package's docstring)."""

from __future__ import annotations

from pathlib import Path

from ...core.errors import ConfigError, DataError
from ...recorders.plots import axis_label, plot_curve_panels, plot_selection_counts
from .curves import curve_panels, selection_counts
from .folders import comparisons, merged_runs, merged_targets
from .tables import (
    CONFIDENCE,
    LOWER_IS_BETTER,
    NEUTRAL,
    PAIRED_BY_DEFAULT,
    PAIRING,
    Footnotes,
    metric_table,
    paired_table,
)
from .targets import check_target, retarget, targets_section

#: what an empty to-target cell did not reach under ``--target reached_by_all`` (every variant that was
#: evaluated and did not diverge reaches its seed's target)
COMMON_TARGET = "its seed's common target (a diverged run, or one never evaluated, has none)"


def write_report(folders: list[Path], out: Path, metrics: list[str], title: str, command: str | None = None,
                 elapsed_s: float | None = None, curve: str | None = "loss", notes: str | None = None,
                 percent_of: str | None = None, counts: list[str] | None = None, baseline: str | None = None,
                 paired: list[str] | None = None, curve_x: list[str] | None = None,
                 provenance: dict[str, str] | None = None, target: str = "config") -> Path:
    """Write the markdown page ``out`` (and its plots beside it) for the run ``folders``.

    ``counts`` names settings (folder names) whose per-client selection counts are drawn as well.
    ``curve_x`` lists the x axes the ``curve`` is drawn against, one figure each (default: the round; see
    :func:`~turnout.app.report.curves.curves` for cumulative columns such as bytes or client-seconds).
    ``provenance`` (e.g. the commit and config hash the runs were made from) is printed under the versions line.
    ``paired`` metrics (default: those of :data:`PAIRED_BY_DEFAULT` the page tabulates) get per-seed
    differences from ``baseline`` (default: the first variant of the first folder).
    ``target`` chooses what the ``*_to_target`` metrics count to (:data:`~turnout.app.report.targets.TARGETS`).
    """
    check_target(target)
    columns, kept_apart = comparisons(folders)
    summaries = {name: merged_runs(members) for name, members in columns.items()}
    targets = {name: merged_targets(members) for name, members in columns.items()}
    target_lines: list[str] = []
    if target != "config":  # the runs' own targets are set aside: recount from the rounds tables
        common = {}
        for name, members in columns.items():
            summaries[name], common[name] = retarget(members, summaries[name])
        target_lines = targets_section(common, targets)
        variants_of = {name: {r["variant"] for r in s["runs"]} for name, s in summaries.items()}
        targets = {name: {v: COMMON_TARGET for v in vs} for name, vs in variants_of.items()}
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
    lines += target_lines
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
        img = plot_curve_panels(curve_panels(columns, curve, x), curve, out.with_suffix("") / f"{stem}.png", x)
        against = "rounds" if x == "round" else axis_label(x)[0]
        band = "band: ± std" if x == "round" else "each seed interpolated onto common x values, band: ± std"
        lines += [f"## Server test {curve} against {against} (mean over seeds, {band}; seeds per variant in the "
                  "legend)", "", f"![]({out.stem}/{img.name})", ""]
    for name in counts or []:
        img = plot_selection_counts(selection_counts(by_name[name]), name, out.with_suffix("") / f"counts_{name}.png")
        lines += [f"## Selection counts per client, {name}", "", f"![]({out.stem}/{img.name})", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    return out
