"""Runs one fuzz case through the ``turnout`` CLI and checks the bad-input contract.

A case is an argv for ``turnout`` plus the folder it may write to. The contract (docs/experiment-files.md,
"Input rules and limits"):

* refused: exit code 2, nothing on stdout, exactly one stderr line starting ``turnout: error:``,
  and nothing written — no run folder (``DIR`` or ``DIR.partial``), no output file, nothing new in
  the case's folder;
* accepted: exit code 0 and a complete output — a run folder with ``summary.json`` and the
  ``rounds``/``clients`` tables (``.csv``, or the format of the chosen recorder), or the imported file;
* never a traceback, never an internal-error line (``turnout: error: unexpected ...``, exit 1),
  bounded memory and time.

Cases run in this process (fast: torch and the datasets' code are imported once) under an
address-space limit of :data:`ADDRESS_SPACE` above what the process already maps and a wall-clock
alarm; every :data:`SUBPROCESS_EVERY`-th case also runs as ``python -m turnout`` in a subprocess
capped at :data:`ADDRESS_SPACE` bytes in all, as a user would run it. :data:`STATS` counts the
outcomes for the long profile's report.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

import turnout.app.cli as cli
import turnout.app.process as process

ROOT = Path(__file__).resolve().parents[2]
#: Address space of a case: in a subprocess in all, in-process on top of what pytest maps already.
ADDRESS_SPACE = 3 << 30
#: Wall-clock seconds a case may take (a tiny run takes a fraction of a second; a refusal less).
CASE_SECONDS = 60
#: Every n-th case of a kind also runs in a capped subprocess.
SUBPROCESS_EVERY = 25
#: Seconds a subprocess case may take (Python, numpy and torch start in a few seconds).
SUBPROCESS_SECONDS = 180

#: (kind, what) → count; "what" is cases, refused, completed, subprocess, tracebacks, memory_kills.
STATS: Counter = Counter()
#: Largest wall time of a case per kind, in seconds.
SLOWEST: dict[str, float] = {}


class CaseTimeout(BaseException):
    """Raised by the alarm in a case that runs too long (a BaseException: the CLI must not catch it)."""


@dataclass
class Result:
    rc: int
    out: str
    err: str
    seconds: float
    escaped: BaseException | None = None  # an exception that got out of ``main``


@dataclass
class Case:
    """One fuzz input: the ``turnout`` argv, the folder it lives in, and what a success must leave."""

    kind: str
    argv: list[str]
    folder: Path
    inputs: set[str]  # names in ``folder`` that exist before the run (the input files)
    outputs: list[Path]  # a run folder, or an output file
    must_refuse: bool = False  # the input is wrong by construction (an unknown key, a size beyond its bound)
    needles: tuple[str, ...] = ()  # what a refusal must name (e.g. the key) when must_refuse
    describe: str = ""  # shown when the case fails
    extra_checks: list = field(default_factory=list)  # callables(case) run after a success


def _python_default_warnings() -> None:
    """Warning filters as a plain ``python -m turnout`` has them (pytest's are stricter or quieter)."""
    warnings.resetwarnings()
    warnings.simplefilter("default")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.filterwarnings("ignore", category=category)


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


@contextlib.contextmanager
def _capped(seconds: float):
    """An address-space limit of :data:`ADDRESS_SPACE` above the current mapping, and an alarm."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_size() + ADDRESS_SPACE
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))

    def alarm(signum, frame):
        raise CaseTimeout(f"case ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_in_process(argv: list[str], seconds: float = CASE_SECONDS) -> Result:
    """``turnout ARGV`` in this process: exit code, stdout, stderr (as the CLI prints them)."""
    out, err = io.StringIO(), io.StringIO()
    escaped = None
    t0 = time.perf_counter()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        _python_default_warnings()
        warnings.showwarning = process._show_warning
        try:
            with _capped(seconds):
                rc = cli.main(argv)
        except SystemExit as exc:  # argparse
            rc = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # noqa: B036 - a timeout or anything main let out is a finding
            rc, escaped = -1, exc
        finally:
            torch.set_num_threads(1)  # a run sets runtime.torch_threads for this process
    return Result(rc, out.getvalue(), err.getvalue(), time.perf_counter() - t0, escaped)


def run_subprocess(argv: list[str], cwd: Path) -> Result:
    """``python -m turnout ARGV`` capped at :data:`ADDRESS_SPACE` bytes of address space."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "turnout", *argv], cwd=cwd, capture_output=True,
                              timeout=SUBPROCESS_SECONDS, preexec_fn=cap, env=env,
                              encoding="utf-8", errors="backslashreplace")
    except subprocess.TimeoutExpired as exc:
        return Result(-1, "", f"timed out after {SUBPROCESS_SECONDS} s", time.perf_counter() - t0, exc)
    return Result(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - t0)


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _table(folder: Path, name: str) -> Path | None:
    return next((p for p in (folder / f"{name}.{ext}" for ext in ("csv", "parquet", "jsonl")) if p.is_file()), None)


def is_traceback(res: Result) -> bool:
    """A Python traceback, an exception out of ``main``, or the CLI's internal-error line."""
    return (res.escaped is not None and not isinstance(res.escaped, (CaseTimeout, subprocess.TimeoutExpired))) \
        or "Traceback" in res.err or "Traceback" in res.out or res.rc == 1 \
        or any(line.startswith("turnout: error: unexpected ") for line in res.err.splitlines())


def is_memory_kill(res: Result) -> bool:
    """Killed by the OS or out of address space (MemoryError, a failed allocation)."""
    return res.rc in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT, 137) or isinstance(res.escaped, MemoryError) \
        or "MemoryError" in res.err or "std::bad_alloc" in res.err or "Cannot allocate memory" in res.err


def check(case: Case, res: Result, how: str) -> str:
    """Assert the contract for one run of ``case``; returns "refused" or "completed"."""
    where = f"[{case.kind} via {how}] {case.describe}\nargv={case.argv!r}\nrc={res.rc} ({res.seconds:.1f} s)\n" \
            f"stderr={res.err[-3000:]!r}\nstdout={res.out[-1000:]!r}"
    if is_memory_kill(res):
        STATS[case.kind, "memory_kills"] += 1
        raise AssertionError(f"out of memory or killed\n{where}")
    if is_traceback(res):
        STATS[case.kind, "tracebacks"] += 1
        raise AssertionError(f"a traceback or an internal error instead of the contract\n{where}") from res.escaped
    if isinstance(res.escaped, (CaseTimeout, subprocess.TimeoutExpired)):
        raise AssertionError(f"no answer within the time limit\n{where}")
    assert res.rc in (0, 2), f"exit code must be 0 or 2\n{where}"
    if res.rc == 2:
        assert res.out == "", f"a refusal prints nothing on stdout\n{where}"
        assert res.err.endswith("\n") and res.err.count("\n") == 1, f"a refusal is exactly one stderr line\n{where}"
        assert res.err.startswith("turnout: error: "), f"a refusal starts with 'turnout: error: '\n{where}"
        assert len(res.err) <= 2000, f"a refusal is one short line\n{where}"
        for needle in case.needles:
            assert needle in res.err, f"the refusal must name {needle!r}\n{where}"
        for out in case.outputs:
            partial = out.with_name(out.name + ".partial")
            assert not out.exists() and not partial.exists(), f"a refusal leaves no output ({out})\n{where}"
        left = _listing(case.folder) - case.inputs
        assert not left, f"a refusal writes nothing, found {sorted(left)[:5]}\n{where}"
        return "refused"
    assert not case.must_refuse, f"this input must be refused (exit 2)\n{where}"
    for out in case.outputs:
        assert out.exists(), f"a success leaves its output {out}\n{where}"
        assert not out.with_name(out.name + ".partial").exists(), f"a success leaves no .partial\n{where}"
        if out.is_dir():
            assert (out / "summary.json").is_file(), f"the run folder has summary.json\n{where}"
            for name in ("rounds", "clients"):
                table = _table(out, name)
                assert table is not None and table.stat().st_size > 0, f"the run folder has its {name} table\n{where}"
    for extra in case.extra_checks:
        extra(case)
    return "completed"


def run_case(case: Case, subprocess_every: int = SUBPROCESS_EVERY) -> str:
    """Run ``case`` in-process (and, every ``subprocess_every``-th case of its kind, in a capped
    subprocess too), check the contract each time and count the outcome."""
    import shutil

    n = STATS[case.kind, "cases"]
    STATS[case.kind, "cases"] += 1
    res = run_in_process(case.argv)
    SLOWEST[case.kind] = max(SLOWEST.get(case.kind, 0.0), res.seconds)
    outcome = check(case, res, "in-process")
    if n % subprocess_every == subprocess_every - 1:
        for out in case.outputs:  # start again from the inputs alone
            if out.is_dir():
                shutil.rmtree(out)
            elif out.exists():
                out.unlink()
        for name in _listing(case.folder) - case.inputs:
            p = case.folder / name
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
        sub = run_subprocess(case.argv, case.folder)
        STATS[case.kind, "subprocess"] += 1
        check(case, sub, "subprocess (3 GiB address space)")
    STATS[case.kind, outcome] += 1
    return outcome
