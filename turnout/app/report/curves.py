"""The page's curves as numbers: a rounds-table column against the round or a cumulative column, mean and std
over seeds per variant, and each client's selection count (the drawing is :mod:`turnout.recorders.plots`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ...core.errors import ConfigError, DataError
from ...recorders.base import read_run_table
from .folders import load_runs, round_rows

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


def curves(folder: Path | list[Path], column: str, x: str = "round", points: int = 100
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
        mine = list(round_rows(one))
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



def selection_counts(folder: Path) -> dict[str, np.ndarray]:
    """Per variant: every client's ``times_selected``, averaged over seeds (from the clients table)."""
    acc: dict[str, dict[int, list[float]]] = {}
    for row in read_run_table(folder, "clients"):
        acc.setdefault(row["variant"], {}).setdefault(int(row["client"]), []).append(float(row["times_selected"]))
    return {v: np.array([np.mean(per[c]) for c in sorted(per)]) for v, per in acc.items()}


def curve_panels(folders: dict[str, Path | list[Path]], column: str, x: str = "round"
                 ) -> dict[str, tuple[list[str], dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]]]:
    """Per setting (a page's column): its variants in order and their :func:`curves` of ``column`` against ``x``."""
    variants = {name: list(dict.fromkeys(r["variant"] for f in (folder if isinstance(folder, list) else [folder])
                                         for r in load_runs(f)["runs"]))
                for name, folder in folders.items()}
    return {name: (variants[name], curves(folder, column, x)) for name, folder in folders.items()}
