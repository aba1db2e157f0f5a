"""Whether a page still matches the code: its configs' hash and its check slice's numbers, on any CPU.

A page is *ok* (the code gives what the page shows), *stale* (a config or a number moved: regenerate it), or *not
checked* (the slice could not run here — a missing optional package or dataset — named in one line, and the
other pages are still checked).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...core.environment import CROSS_CPU_RTOL, agree_across_cpus
from ...core.errors import TurnoutError
from . import record as records
from .run import SLICE_METRICS, SliceFailed, config_hash, run_slice, slice_numbers
from .spec import load

#: what an integers-only slice compares (the floats of such a slice drift within two rounds on another CPU)
INTEGER_METRICS = ("bytes_up", "bytes_down")


@dataclass
class Verdict:
    page: str
    status: str  # "ok" | "STALE" | "not checked"
    problems: list[str] = field(default_factory=list)
    compared: int = 0  # numbers compared

    def line(self) -> str:
        tag = {"ok": "ok   ", "STALE": "STALE", "not checked": "SKIP "}[self.status]
        if self.status == "ok":
            return f"{tag} {self.page} ({self.compared} numbers)"
        return f"{tag} {self.page}: " + "\n  ".join(["", *self.problems]) if len(self.problems) > 1 \
            else f"{tag} {self.page}: {self.problems[0]}"


def compare(recorded: dict[str, dict], now: dict[str, dict], metrics: tuple[str, ...]) -> tuple[list[str], int]:
    """Problems of ``now`` against ``recorded`` slice numbers (variant → metric → value), and how many compared."""
    problems, n = [], 0
    for v in sorted(set(now) | set(recorded)):
        if v not in recorded or v not in now:
            problems.append(f"variant {v!r} is {'not on the page' if v not in recorded else 'no longer run'}")
            continue
        for m in metrics:
            n += 1
            if not agree_across_cpus(recorded[v].get(m), now[v].get(m)):
                problems.append(f"{v}: {m} is {now[v].get(m)!r} now, the page records {recorded[v].get(m)!r}")
    return problems, n


def check(name: str, record_file: Path | None = None, here: bool = False) -> Verdict:
    """Check page ``name`` against its record (default: the bundled one); its slice runs in a child process, or
    in this one when ``here``."""
    try:
        page = load(name)
        record = records.read(name, record_file if record_file and record_file.is_file() else None)
        if record is None:
            return Verdict(name, "STALE", [f"no record: make the page with `turnout reproduce {name}`"])
        try:
            records.validate(record)
        except TurnoutError as e:  # a record past its own horizon (or unmeasured) is a stale page, not a skipped one
            return Verdict(name, "STALE", [str(e)])
        problems = []
        now = config_hash(page, record.get("tuned", {}))
        if now != record["config_hash"]:
            problems.append(f"the resolved configs changed since the page was made (config hash {now}, the page "
                            f"records {record['config_hash']}): regenerate it with `turnout reproduce {name}`")
        sl = record["slice"]
        spec = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(page.slice).items()}
        got = {"setting": sl["setting"], "rounds": sl["asked_rounds"], "variants": sl["variants"]}
        if spec != got:
            why = (f"the check slice changed ({spec} vs the record's {got}): record it again with "
                   f"`turnout reproduce --record-slice {name}`")
            return Verdict(name, "STALE", [*problems, why])
        with tempfile.TemporaryDirectory(prefix=f"turnout-check-{name}-") as tmp:
            numbers = slice_numbers(run_slice(page, record.get("tuned", {}), sl["rounds"], Path(tmp) / "run",
                                              every=sl["rounds"], here=here))  # evaluated after the last round
        more, n = compare(sl["numbers"], numbers, INTEGER_METRICS if sl["integers_only"] else SLICE_METRICS)
        problems += more
        return Verdict(name, "STALE" if problems else "ok", problems, n)
    except SliceFailed as e:
        return Verdict(name, "not checked", [str(e)])
    except TurnoutError as e:
        return Verdict(name, "not checked", [str(e)])


def tolerance_line() -> str:
    return f"integers exactly, NaN equal to NaN, floats within relative {CROSS_CPU_RTOL:g}"


def check_share(conn, names: list[str], records: str | None) -> None:
    """A check worker's part (:class:`~turnout.core.worker_process.WorkerProcess`): check ``names`` here, one
    after another, and send each :class:`Verdict` back as it is known. ``records``: the folder of the pages'
    records made with ``--out`` (None: the bundled ones)."""
    for n in names:
        conn.send(check(n, Path(records) / f"{n}.record.json" if records else None, here=True))
    conn.close()


def check_all(names: list[str], records: Path | None, jobs: int) -> list[Verdict]:
    """Every page's verdict, in ``names``' order: their slices run in this process (``jobs`` 1) or shared out
    over ``jobs`` worker processes, each running its pages one after another."""
    from ...core.worker_process import WorkerProcess  # imported here: only a parallel check starts workers

    record = (lambda n: records / f"{n}.record.json") if records else (lambda n: None)
    if jobs <= 1 or len(names) <= 1:
        return [check(n, record(n), here=True) for n in names]
    shares = [names[i::jobs] for i in range(min(jobs, len(names)))]
    workers = [WorkerProcess(check_share, (share, str(records) if records else None), name="turnout-check")
               for share in shares]
    got: dict[str, Verdict] = {}
    for share, w in zip(shares, workers):
        try:
            while len([n for n in share if n in got]) < len(share):
                v = w.conn.recv()
                got[v.page] = v
        except (EOFError, OSError):  # the worker died: its remaining pages were not checked
            w.join(5)
            for n in share:
                got.setdefault(n, Verdict(n, "not checked", [f"its check worker {w.describe_exit()}"]))
        w.join()
    return [got[n] for n in names]
