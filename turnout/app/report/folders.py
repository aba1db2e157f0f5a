"""Reading run folders back for a results page: their summaries (finished or not), their rounds tables, their
targets, and which folders are one experiment (one column, paired seed by seed) and which stay apart."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ...core.errors import DataError
from ...recorders.base import read_run_table
from ...runs.rundir import CONFIG, EXPERIMENT, SUMMARY, UNIT_GLOB, UNIT_IDENTITY, UNIT_ROWS, UNIT_SUMMARY, UNITS
from ...runs.unit import read_rows

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


def merged_runs(members: list[Path]) -> dict:
    """:func:`load_runs` of several run folders of one experiment, as if they were one folder."""
    parts = [load_runs(f) for f in members]
    return {"runs": [r for p in parts for r in p["runs"]],
            "incomplete": [u for p in parts for u in p.get("incomplete", [])],
            "versions": parts[0].get("versions", {})}


def merged_targets(members: list[Path]) -> dict[str, float | None] | None:
    parts = [t for t in map(load_targets, members) if t is not None]
    return {k: v for t in parts for k, v in t.items()} if parts else None


def _unit_rows(unit: Path) -> list[dict]:
    return read_rows(unit / UNIT_ROWS)


def _identity(unit: Path) -> dict:
    path = unit / UNIT_IDENTITY
    return json.loads(path.read_text()) if path.is_file() else {}


def round_rows(folder: Path):
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
