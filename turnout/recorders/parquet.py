"""Tidy tables as Apache Parquet: typed, compressed columns for analysis in pandas, polars or DuckDB.

pyarrow is an optional dependency (``pip install 'turnout[parquet]'``): it is imported only when this
recorder is configured, and its absence is a config error at validation, before any run starts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import Field, model_validator

from ..config.base import StrictModel
from ..core.errors import ConfigError
from .base import RECORDERS, Recorder, columns_as_lists, format_value

INSTALL = "pip install 'turnout[parquet]'"


def _pyarrow():
    import pyarrow
    import pyarrow.parquet  # noqa: F401  (the submodule the recorder writes with)

    return pyarrow


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def arrow_column(values: list, pa) -> Any:
    """One typed Arrow column: bool, int64, float64 or string; NaN and missing cells are nulls.

    A column mixing numbers and text (``comparison``'s ``seed``: 0, 1, ``mean``, ``std``) is stored as
    text, written as the CSV recorder writes each cell.
    """
    cells = [None if _missing(v) else v for v in values]
    present = [v for v in cells if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(cells, type=pa.bool_())
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.array(cells, type=pa.int64() if present else pa.float64())
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.array([None if v is None else float(v) for v in cells], type=pa.float64())
    return pa.array([None if v is None else str(format_value(v)) for v in cells], type=pa.string())


@RECORDERS.register("parquet")
class ParquetRecorder(Recorder):
    """Tables as Parquet files (rounds.parquet, ...): typed columns, NaN as null; pip install 'turnout[parquet]'."""

    class Config(StrictModel):
        compression: Literal["zstd", "snappy", "gzip", "none"] = Field("zstd", description="column compression codec")

        @model_validator(mode="after")
        def _pyarrow_installed(self):
            """A missing optional dependency stops the run at validation, not after the simulation."""
            try:
                _pyarrow()
            except ImportError:
                raise ConfigError("name", "parquet", f"needs pyarrow, which is not installed: {INSTALL}") from None
            return self

    suffix = "parquet"

    def write_table(self, folder: Path, name: str, columns: dict[str, Sequence]) -> Path:
        pa = _pyarrow()
        path = folder / f"{name}.parquet"
        names, lists = columns_as_lists(columns)
        table = pa.table({n: arrow_column(values, pa) for n, values in zip(names, lists)})
        pa.parquet.write_table(table, path, compression=self.cfg.compression)
        return path

    @classmethod
    def read_table(cls, path: Path) -> list[dict[str, Any]]:
        return _pyarrow().parquet.read_table(path).to_pylist()
