"""The logger interface: a per-round observer built, from config, inside the process that runs a unit.

``loggers: [tensorboard, mlflow, wandb]`` (names, or ``{name: ..., <options>}`` blocks) adds one
logger of each per unit. Loggers are observers (:mod:`turnout.core.observers`), so they see each
finished round's row and cannot change a number; they are built by :func:`open_loggers` where
the unit runs — this process, a ``--jobs`` worker or a Ray task — because a tracker's client
cannot be shipped between processes. Each unit is one tracker run named ``variant/seed``, its
step is the round, and the variant's resolved config is logged as its parameters. A resumed unit
reopens the same tracker run (its id is kept in the unit's folder) and logs again from its
checkpoint's round.
"""

from __future__ import annotations

import json
import math
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from ..core.errors import ConfigError
from ..core.metrics import CUMULATIVE
from ..core.observers import Observer, RoundRecord, RunEnd
from ..core.registry import Registry

LOGGERS: Registry = Registry("logger", "live per-round metrics to an experiment tracker (a list: loggers: [...])")

#: where a unit keeps its tracker run ids, so a resumed unit continues the same runs
IDS_FILE = "loggers.json"


@dataclass(frozen=True)
class LogRun:
    """The unit a logger reports on: names, its resolved config, where its run folder is, where it starts."""

    experiment: str
    variant: str
    seed: int
    config: dict[str, Any]  # the variant's resolved config, as config.yaml holds it
    run_dir: Path  # the run folder: relative logger paths are resolved against it
    unit_dir: Path
    start_round: int = 0  # > 0 when the unit resumes from a checkpoint
    totals: dict[str, float] = field(default_factory=dict)  # cum_* values at start_round

    @property
    def name(self) -> str:
        """The tracker run's name: ``variant/seed``."""
        return f"{self.variant}/{self.seed}"

    def params(self) -> dict[str, Any]:
        """The resolved config flattened to dotted keys (``selector.clients_per_round``), plus variant and seed.

        Values are scalars; lists and ``None`` become text, as trackers' parameter tables want.
        """
        out: dict[str, Any] = {"variant": self.variant, "seed": self.seed}
        todo = [("", self.config)]
        while todo:
            prefix, node = todo.pop(0)
            for k, v in node.items():
                if isinstance(v, dict) and v:
                    todo.append((f"{prefix}{k}.", v))
                elif isinstance(v, (bool, int, float, str)):
                    out[f"{prefix}{k}"] = v
                else:
                    out[f"{prefix}{k}"] = json.dumps(v)
        return out

    def path(self, given: str | None, default: str) -> Path:
        """A logger's folder option: absolute as given, relative to the run folder, or the default there."""
        p = Path(given if given is not None else default).expanduser()
        return p if p.is_absolute() else self.run_dir / p

    def recall(self, key: str) -> str | None:
        """A tracker run id this unit stored before (``None`` on its first start)."""
        try:
            return json.loads((self.unit_dir / IDS_FILE).read_text()).get(key)
        except (OSError, ValueError, AttributeError):
            return None

    def remember(self, key: str, value: str) -> None:
        path = self.unit_dir / IDS_FILE
        try:
            ids = json.loads(path.read_text())
        except (OSError, ValueError):
            ids = {}
        ids[key] = value
        self.unit_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(ids))


class Logger(Observer):
    """Streams each round's numeric row values (and running ``cum_*`` totals) to a tracker, step = round.

    Subclasses implement :meth:`log` and usually :meth:`close` (called once, by :meth:`end`); ``requires``
    names the packages they import (and the extra that installs them), checked when the experiment is validated.
    """

    Config: type[BaseModel]
    requires: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self, cfg: BaseModel, run: LogRun):
        self.cfg, self.run = cfg, run
        self.totals = {k: float(run.totals.get(f"cum_{k}", 0.0)) for k in CUMULATIVE}

    def after_round(self, round: int, record: RoundRecord) -> None:
        self.log(round, self.metrics(record.row))

    def metrics(self, row) -> dict[str, float]:
        """The row's finite numbers (``round`` itself is the step), plus the running ``cum_*`` totals."""
        out = {}
        for k, v in row.items():
            if k == "round" or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if math.isfinite(v):
                out[k] = float(v)
        for k in CUMULATIVE:
            if isinstance(row.get(k), (int, float)):
                self.totals[k] += row[k]
                out[f"cum_{k}"] = self.totals[k]
        return out

    @abstractmethod
    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Send one round's metrics."""

    def close(self, summary: dict | None) -> None:
        """End the tracker run; ``summary`` is the unit's summary when it finished (``None``: stopped)."""

    def end(self, end: RunEnd) -> None:
        """The unit ended: the tracker run is closed, with the unit's summary when it finished."""
        self.close(dict(end.summary) if end.finished and end.summary is not None else None)


def summary_metrics(summary: dict) -> dict[str, float]:
    """A unit summary's finite numbers (final accuracy, bytes, time to target, ...)."""
    return {k: float(v) for k, v in summary.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def open_loggers(exp, seed: int, unit_dir: Path, rows_done: list[dict]) -> list[Logger]:
    """Build the variant's loggers for one unit (``rows_done``: rows restored from its checkpoint)."""
    if not exp.loggers:
        return []
    unit_dir = Path(unit_dir)
    run = LogRun(exp.config.name, exp.variant, seed, exp.as_dict(), unit_dir.parents[2], unit_dir,
                 len(rows_done), _totals(rows_done))
    out: list[Logger] = []
    try:
        for i, comp in enumerate(exp.loggers):
            try:
                out.append(comp.build(run))
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001  (a tracker that cannot start: one line naming it)
                text = " ".join(str(exc).split())[:300] or type(exc).__name__
                raise ConfigError(f"loggers[{i}].name", comp.name, f"could not start: {type(exc).__name__}: "
                                                                   f"{text}") from None
    except BaseException:
        close_loggers(out, None)
        raise
    return out


def close_loggers(loggers: list[Logger], summary: dict | None) -> None:
    """Close each logger once (the list is emptied), with the unit's summary when it finished."""
    while loggers:
        loggers.pop(0).close(summary)


def _totals(rows: list[dict]) -> dict[str, float]:
    return {f"cum_{k}": float(sum(r.get(k, 0) for r in rows)) for k in CUMULATIVE}
