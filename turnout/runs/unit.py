"""One unit of work — an experiment variant on one seed — run durably in its own folder.

A unit streams each finished round to ``rounds.jsonl`` (appended and flushed: a crash keeps every
completed round, ``tail -f`` shows progress), checkpoints the whole simulation every
``runtime.checkpoint_every_rounds`` rounds and/or ``runtime.checkpoint_every_s`` seconds and when
asked to stop, and writes ``clients.jsonl`` and ``summary.json`` when it finishes (``summary.json``
marks it done; its checkpoints are then removed). Started again on the same folder, a unit
continues from its last checkpoint — the rows after it are dropped and recomputed, identically,
because every random draw is keyed by (seed, purpose, round, client) — so a resumed unit's
tables are byte-identical to an uninterrupted one's.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..config.loader import ResolvedExperiment
from ..core import faults
from ..core.metrics import cumulate, summarize
from ..core.observers import Observer, Observers, RoundRecord, RunEnd, RunStart
from ..data.federated import FederatedDataset
from ..loggers.base import open_loggers
from ..sim.engine import RunResult, Simulation
from . import checkpoint
from .rundir import SCRATCH, UNIT_CLIENTS, UNIT_IDENTITY, UNIT_ROWS, UNIT_SUMMARY, atomic_write_text

ROWS, CLIENTS, SUMMARY, IDENTITY = UNIT_ROWS, UNIT_CLIENTS, UNIT_SUMMARY, UNIT_IDENTITY
#: clients encoded at a time when clients.jsonl is written
CHUNK = 65536


class StopFlag:
    """Set from a signal handler (or another thread) to ask the running unit to checkpoint and stop.

    ``event`` may be a ``multiprocessing`` event shared with worker processes.
    """

    def __init__(self, event=None):
        self._event = event if event is not None else threading.Event()
        self.reason = ""
        self.signal = None  # the signal that asked (SIGINT → exit 130, SIGTERM → 143)

    def request(self, reason: str) -> None:
        self.reason = reason
        self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()


@dataclass
class UnitOutcome:
    """What became of a unit: finished (with its summary), or stopped at a checkpoint."""

    done: bool
    summary: dict | None = None
    next_round: int = 0
    rounds: int = 0
    result: RunResult | None = field(default=None, repr=False)


def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not a table value")


def dump_row(row: dict) -> str:
    return json.dumps(row, default=_json_default)


def read_rows(path: Path) -> list[dict]:
    """Complete rows of a ``rounds.jsonl`` (a line cut by a crash is ignored)."""
    if not path.is_file():
        return []
    rows = []
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # the last line was being written when the process died
            rows.append(json.loads(line))
    return rows


def is_done(unit_dir: Path) -> bool:
    return (Path(unit_dir) / SUMMARY).is_file()


def read_summary(unit_dir: Path) -> dict:
    return json.loads((Path(unit_dir) / SUMMARY).read_text())


def read_clients(unit_dir: Path) -> dict[str, list]:
    """``clients.jsonl`` as columns (every line holds the same keys in the same order: :func:`client_lines`)."""
    cols: dict[str, list] = {}
    decode = json.JSONDecoder().decode
    with open(Path(unit_dir) / CLIENTS) as f:
        for line in f:
            row = decode(line)
            if len(row) != len(cols):  # the first line (a writer's lines all share its keys and their order)
                for k, v in row.items():
                    cols.setdefault(k, []).append(v)
                continue
            for column, v in zip(cols.values(), row.values()):
                column.append(v)
    return cols


def client_lines(clients: dict[str, list]) -> str:
    """``clients.jsonl``'s text: one JSON object per client, as ``json.dumps`` writes each.

    A column of plain numbers (what the engine's arrays become) is encoded with one ``json.dumps``
    of the whole list — the same text per value, ``NaN`` included — instead of one call per cell.
    """
    line = "{" + ", ".join(json.dumps(k).replace("%", "%%") + ": %s" for k in clients) + "}\n"
    columns = list(clients.values())
    n = len(columns[0]) if columns else 0
    plain = [all(type(v) in (int, float, bool) for v in column) for column in columns]
    out = []
    for a in range(0, n, CHUNK):  # a chunk at a time: a million clients' cells never exist at once
        cells = [json.dumps(column[a:a + CHUNK])[1:-1].split(", ") if numbers
                 else [json.dumps(v) for v in column[a:a + CHUNK]] for column, numbers in zip(columns, plain)]
        out.append("".join([line % row for row in zip(*cells)]))
    return "".join(out)


class FileSink:
    """Writes a unit's folder: ``unit.json``, ``rounds.jsonl`` as rows arrive, the tables when it finishes.

    This is the side that owns the run folder. A unit run in this process writes through it
    directly; a unit run by a worker (another process, a Ray task) sends the same calls as messages
    and the owner applies them here, so the files are the same either way.
    """

    def __init__(self, unit_dir: Path):
        self.unit_dir = Path(unit_dir)
        self.f = None

    def begin(self, identity: dict, rows: list[dict]) -> None:
        """A (re)start from the unit's checkpoint: ``rows`` are the rounds it has done."""
        self.unit_dir.mkdir(parents=True, exist_ok=True)
        if not (self.unit_dir / IDENTITY).is_file():
            atomic_write_text(self.unit_dir / IDENTITY, json.dumps(identity))
        atomic_write_text(self.unit_dir / ROWS, "".join(dump_row(r) + "\n" for r in rows))
        self.close()
        self.f = open(self.unit_dir / ROWS, "a")

    def row(self, row: dict) -> None:
        self.f.write(dump_row(row) + "\n")
        self.f.flush()

    def finish(self, clients: dict[str, list], summary: dict) -> None:
        self.close()
        atomic_write_text(self.unit_dir / CLIENTS, client_lines(clients))
        faults.point("unit-done")
        atomic_write_text(self.unit_dir / SUMMARY, json.dumps(jsonable(summary), indent=1) + "\n")
        checkpoint.remove(self.unit_dir)

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


class RowStream(Observer):
    """The unit's row sink as an observer: begins the unit's files, keeps its rows (for its checkpoints) and
    passes each new one to the sink, and writes the unit's tables when it finished."""

    def __init__(self, rows: list[dict], sink):
        self.rows, self.sink = rows, sink

    def begin(self, start: RunStart) -> None:
        self.sink.begin({"variant": start.variant, "seed": start.seed, "rounds": start.rounds}, self.rows)

    def after_round(self, round: int, record: RoundRecord) -> None:
        row = dict(record.row)
        self.rows.append(row)
        self.sink.row(row)
        faults.point("round")  # where the round was computed: a worker, or this process

    def end(self, end: RunEnd) -> None:
        if end.finished:
            self.sink.finish({k: np.asarray(v).tolist() for k, v in end.clients.items()}, dict(end.summary))


class Checkpointer(Observer):
    """Checkpoints the simulation when the policy says so, and when a stop is requested (then stops it)."""

    def __init__(self, sim: Simulation, unit_dir: Path, rows: list[dict], stop: StopFlag, wall0: float,
                 wall_before: float):
        rc = sim.exp.config.runtime
        self.sim, self.unit_dir, self.rows, self.stop = sim, unit_dir, rows, stop
        self.every_rounds, self.every_s = rc.checkpoint_every_rounds, rc.checkpoint_every_s
        self.wall0, self.wall_before = wall0, wall_before
        self.last = time.perf_counter()

    def after_round(self, round: int, record: RoundRecord) -> bool:
        due = ((self.every_rounds is not None and (round + 1) % self.every_rounds == 0)
               or (self.every_s is not None and time.perf_counter() - self.last >= self.every_s))
        last_round = round + 1 >= self.sim.exp.config.rounds
        if self.stop.requested or (due and not last_round):
            self.save()
        return self.stop.requested

    def save(self) -> None:
        info = {"next_round": self.sim.next_round, "wall_s": self.wall_before + time.perf_counter() - self.wall0}
        checkpoint.save(self.unit_dir, self.sim.state_dict(), info, "".join(dump_row(r) + "\n" for r in self.rows))
        self.last = time.perf_counter()


def run_unit(exp: ResolvedExperiment, data: FederatedDataset, seed: int, unit_dir: Path, sink, stop: StopFlag,
             observers: list[Observer] = (), centralized: Callable[[], float | None] | None = None) -> UnitOutcome:
    """Run (or continue, from its checkpoint in ``unit_dir``) one unit, reporting to ``sink``.

    ``sink`` receives ``begin(identity, rows_done)``, ``row(row)`` per round and, when the unit
    finishes, ``finish(clients, summary)`` (see :class:`FileSink`), through :class:`RowStream`.
    The row stream, the checkpointer, the live loggers and ``observers`` are ended exactly once,
    with the unit's summary when it finished. Returns whether it finished.
    """
    unit_dir = Path(unit_dir)
    unit_dir.mkdir(parents=True, exist_ok=True)
    cfg = exp.config
    sim = Simulation(exp, data, seed, scratch_dir=unit_dir / SCRATCH)
    wall0, wall_before, rows = time.perf_counter(), 0.0, []
    saved = checkpoint.load(unit_dir)
    if saved is not None:
        state, info, rows_text = saved
        sim.load_state_dict(state)
        wall_before = float(info.get("wall_s", 0.0))
        rows = [json.loads(line) for line in rows_text.splitlines()]
    ckpt = Checkpointer(sim, unit_dir, rows, stop, wall0, wall_before)
    watching = Observers([RowStream(rows, sink), ckpt])
    start = RunStart(variant=exp.variant, seed=seed, rounds=cfg.rounds, next_round=sim.next_round)
    with watching.running(start):
        with sim:  # workers and spill files are released when the rounds are done
            if stop.requested:  # asked to stop before this unit did anything new
                ckpt.save()
                return UnitOutcome(False, None, sim.next_round, cfg.rounds)
            watching.add(*open_loggers(exp, seed, unit_dir, rows), *observers)  # built here: this process runs it
            sim.advance(observers=[watching])
            if stop.requested:
                return UnitOutcome(False, None, sim.next_round, cfg.rounds)
            sim.finish()
            result = sim.result(rows, wall_s=wall_before + time.perf_counter() - wall0)
        result = RunResult(result.variant, result.seed, [dict(r) for r in rows], result.clients, result.summary,
                           result.final_params)
        cumulate(result.rounds)
        if centralized is not None:
            value = centralized()
            if value is not None:
                result.summary["centralized_accuracy"] = value
        summary = summarize(result.variant, result.seed, result.rounds, result.summary, cfg.eval.target_accuracy)
        watching.end(RunEnd(finished=True, summary=summary, clients=result.clients))
    return UnitOutcome(True, summary, cfg.rounds, cfg.rounds, result)


def jsonable(obj):
    """NaN → None, numpy scalars → Python, recursively (summary.json is strict JSON)."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return jsonable(float(obj))
    return obj


__all__ = ["run_unit", "FileSink", "StopFlag", "UnitOutcome", "read_rows", "read_summary", "read_clients",
           "is_done"]
