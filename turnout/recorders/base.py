"""The recorder interface: write tidy tables (one row per round / per client) to a run folder."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from pydantic import BaseModel

from ..core.errors import DataError
from ..core.registry import Registry

RECORDERS: Registry = Registry("recorder", "where results go")


def format_value(v: object) -> object:
    """Deterministic text for a cell: shortest round-trip repr for floats, empty for NaN."""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return v


class Recorder(ABC):
    """Writes a table given as columns (name → equal-length sequence) into ``folder``.

    Columns, not row objects, because a per-client table over a million clients is a handful of
    arrays, not a million dicts.
    """

    Config: type[BaseModel]
    suffix: str  # file extension of its tables: ``rounds.<suffix>``

    def __init__(self, cfg: BaseModel):
        self.cfg = cfg

    @abstractmethod
    def write_table(self, folder: Path, name: str, columns: dict[str, Sequence]) -> Path:
        """Write the table and return the file written."""

    @classmethod
    @abstractmethod
    def read_table(cls, path: Path) -> list[dict[str, Any]]:
        """The rows of a table this recorder wrote; an empty (NaN) cell is None, CSV cells stay text."""


def columns_as_lists(columns: dict[str, Sequence]) -> tuple[list[str], list[list]]:
    """Column names and plain Python lists of their values (numpy arrays converted once, not per cell)."""
    return list(columns), [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in columns.values()]


def read_run_table(folder: Path, name: str) -> list[dict[str, Any]]:
    """Rows of the table ``name`` (``rounds``, ``clients``, ...) of a run folder, whichever recorder wrote it."""
    for _, cls in RECORDERS:
        path = Path(folder) / f"{name}.{cls.suffix}"
        if path.is_file():
            return cls.read_table(path)
    tried = ", ".join(f"{name}.{cls.suffix}" for _, cls in RECORDERS)
    raise DataError(f"{folder}: no {name} table ({tried}); is it a finished run folder?")


def rows_to_columns(rows: list[dict]) -> dict[str, list]:
    """Rows → columns over the union of their keys (first-seen order); a missing cell is NaN.

    Rows of different variants may carry different extra columns (a selector's own metrics).
    """
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k, math.nan) for r in rows] for k in keys}
