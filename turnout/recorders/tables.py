"""Tidy tables as CSV (default) or JSON Lines."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Sequence

from ..config.base import NoOptions
from .base import RECORDERS, Recorder, columns_as_lists, format_value


@RECORDERS.register("csv")
class CsvRecorder(Recorder):
    """Tables as CSV files (rounds.csv, clients.csv, comparison.csv); floats in round-trip precision."""

    Config = NoOptions
    suffix = "csv"

    def write_table(self, folder: Path, name: str, columns: dict[str, Sequence]) -> Path:
        path = folder / f"{name}.csv"
        names, lists = columns_as_lists(columns)
        with open(path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(names)
            for row in zip(*lists):
                w.writerow([format_value(v) for v in row])
        return path

    @classmethod
    def read_table(cls, path: Path) -> list[dict[str, Any]]:
        with open(path, newline="") as f:
            return [{k: (v if v != "" else None) for k, v in row.items()} for row in csv.DictReader(f)]


@RECORDERS.register("jsonl")
class JsonlRecorder(Recorder):
    """Tables as JSON Lines (one object per row; NaN written as null)."""

    Config = NoOptions
    suffix = "jsonl"

    def write_table(self, folder: Path, name: str, columns: dict[str, Sequence]) -> Path:
        path = folder / f"{name}.jsonl"
        names, lists = columns_as_lists(columns)
        with open(path, "w") as f:
            for row in zip(*lists):
                clean = [None if isinstance(v, float) and math.isnan(v) else v for v in row]
                f.write(json.dumps(dict(zip(names, clean))) + "\n")
        return path

    @classmethod
    def read_table(cls, path: Path) -> list[dict[str, Any]]:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
