"""Tidy tables as CSV (default) or JSON Lines."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from ..config.base import NoOptions
from .base import RECORDERS, Recorder, format_value


def _as_lists(columns: dict[str, Sequence]) -> tuple[list[str], list[list]]:
    names = list(columns)
    return names, [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in columns.values()]


@RECORDERS.register("csv")
class CsvRecorder(Recorder):
    """Tables as CSV files (rounds.csv, clients.csv, comparison.csv); floats in round-trip precision."""

    Config = NoOptions

    def write_table(self, folder: Path, name: str, columns: dict[str, Sequence]) -> Path:
        path = folder / f"{name}.csv"
        names, lists = _as_lists(columns)
        with open(path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(names)
            for row in zip(*lists):
                w.writerow([format_value(v) for v in row])
        return path


@RECORDERS.register("jsonl")
class JsonlRecorder(Recorder):
    """Tables as JSON Lines (one object per row; NaN written as null)."""

    Config = NoOptions

    def write_table(self, folder: Path, name: str, columns: dict[str, Sequence]) -> Path:
        path = folder / f"{name}.jsonl"
        names, lists = _as_lists(columns)
        with open(path, "w") as f:
            for row in zip(*lists):
                clean = [None if isinstance(v, float) and math.isnan(v) else v for v in row]
                f.write(json.dumps(dict(zip(names, clean))) + "\n")
        return path
