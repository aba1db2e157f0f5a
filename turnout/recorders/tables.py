"""Tidy tables as CSV (default) or JSON Lines."""

from __future__ import annotations

import csv
import json
import math
from abc import abstractmethod
from pathlib import Path
from typing import Any, Iterable, Sequence, TextIO

from ..config.base import NoOptions
from .base import RECORDERS, Recorder, columns_as_lists, format_value


class TextRecorder(Recorder):
    """A table as a text file written row by row, ``\\n`` ending every line on every platform."""

    def write_table(self, folder: Path, name: str, columns: dict[str, Sequence]) -> Path:
        path = folder / f"{name}.{self.suffix}"
        names, lists = columns_as_lists(columns)
        with open(path, "w", newline="") as f:
            self.write_rows(f, names, zip(*lists))
        return path

    @abstractmethod
    def write_rows(self, f: TextIO, names: list[str], rows: Iterable[tuple]) -> None:
        """Write the header (if the format has one) and the rows, each a tuple of plain values."""


@RECORDERS.register("csv")
class CsvRecorder(TextRecorder):
    """Tables as CSV files (rounds.csv, clients.csv, comparison.csv); floats in round-trip precision."""

    Config = NoOptions
    suffix = "csv"

    def write_rows(self, f: TextIO, names: list[str], rows: Iterable[tuple]) -> None:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(names)
        for row in rows:
            w.writerow([format_value(v) for v in row])

    @classmethod
    def read_table(cls, path: Path) -> list[dict[str, Any]]:
        with open(path, newline="") as f:
            return [{k: (v if v != "" else None) for k, v in row.items()} for row in csv.DictReader(f)]


@RECORDERS.register("jsonl")
class JsonlRecorder(TextRecorder):
    """Tables as JSON Lines (one object per row; NaN written as null)."""

    Config = NoOptions
    suffix = "jsonl"

    def write_rows(self, f: TextIO, names: list[str], rows: Iterable[tuple]) -> None:
        for row in rows:
            clean = [None if isinstance(v, float) and math.isnan(v) else v for v in row]
            f.write(json.dumps(dict(zip(names, clean))) + "\n")

    @classmethod
    def read_table(cls, path: Path) -> list[dict[str, Any]]:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
