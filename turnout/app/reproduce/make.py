"""Making a page: run its tuning grid and settings, record the slice, write the Markdown page.

``turnout reproduce PAGE`` runs every setting into ``runs/reproduce/PAGE/SETTING`` and writes the page with
:func:`turnout.app.report.write_report`, the page's notes (``docs/results/notes/PAGE.md`` in a checkout) and a
check-slice section; the record goes to ``turnout/pages/records/PAGE.json`` in a checkout, beside the page
elsewhere (``PAGE.record.json``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ... import __version__
from ...core.emulation import FAMILIES
from ...core.environment import CROSS_CPU_RTOL
from . import record as records
from .run import (
    SLICE_METRICS,
    children_cpu_s,
    choose,
    config_hash,
    package_parent,
    run_setting,
    run_slice,
    slice_numbers,
    tuned_sets,
)
from .spec import Page, load


def checkout() -> Path | None:
    """The git checkout this turnout is imported from (``None``: an installed package)."""
    root = package_parent()
    return root if (root / "docs" / "results").is_dir() and (root / "pyproject.toml").is_file() else None


def default_out() -> Path:
    """Where pages are written: the checkout's ``docs/results``, else ``./reproduce``."""
    root = checkout()
    return root / "docs" / "results" if root else Path("reproduce")


def record_file(name: str, out: Path) -> Path:
    """The record to write beside page ``out``: the bundled one in a checkout, else ``NAME.record.json``."""
    root = checkout()
    if root and out.resolve().parent == (root / "docs" / "results").resolve():
        return records.record_path(name)
    return out.with_name(f"{name}.record.json")


def git_commit() -> str:
    """HEAD's short hash, with a note when code or experiment files differ from it."""
    root = checkout()
    if root is None:
        return f"turnout {__version__} (installed package)"
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "turnout", "scripts"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" with uncommitted changes" if dirty else "")


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, int) or float(x).is_integer() and abs(x) >= 1000:
        return f"{int(x):,}"
    return f"{x:.6g}"


def slice_section(name: str, record: dict) -> str:
    """The page's last section: what ``--check`` re-runs, its measured horizons and its numbers."""
    sl = record["slice"]
    kind = ("its integers only (bytes): under some CPU family its floats drift within two rounds"
            if sl["integers_only"] else f"integers exactly, floats within relative {CROSS_CPU_RTOL:g}")
    head = ("## Check slice\n\n"
            f"`turnout reproduce --check {name}` re-resolves this page's configs (hash above) and re-runs a slice of "
            f"it — setting {sl['setting']}, seed 0, {sl['rounds']} rounds, every variant, evaluated after every "
            f"round — and fails when a number below is no longer what the code produces ({kind}); the default test "
            "suite runs it for every page, natively and under two emulated CPUs.\n\n"
            f"The slice was asked for {sl['asked_rounds']} rounds and cut at the horizon measured when it was "
            "recorded: the rounds for which every float of every variant stayed within a tenth of the tolerance "
            "under each emulated CPU family (docs/determinism.md)")
    hz = " · ".join(f"{f}: {'≥ ' + str(sl['asked_rounds']) if sl['horizons'].get(f) is None else sl['horizons'][f]}"
                    for f in FAMILIES)
    head += f" — {hz} (measured on {sl['measured_on']['cpu']}, torch {sl['measured_on']['torch_cpu']}).\n\n"
    cols = SLICE_METRICS
    lines = ["| variant | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for v, nums in sl["numbers"].items():
        lines.append(f"| {v} | " + " | ".join(_fmt(nums.get(m)) for m in cols) + " |")
    return head + "\n".join(lines) + f"\n\nRecord: `turnout/pages/records/{name}.json`.\n"


def replace_slice_section(text: str, name: str, record: dict) -> str:
    """``text`` (a page) with its check-slice section, and any old embedded record, replaced by the current one."""
    at = text.find("## Check slice")
    body = text[:at] if at >= 0 else text
    return body.rstrip("\n") + "\n\n" + slice_section(name, record)


def render(page: Page, folder: Path, record: dict, out: Path) -> Path:
    from ..report import write_report  # imported here: plotting (matplotlib) loads only to write a page

    root = checkout()
    notes_file = (root / "docs" / "results" / "notes" / f"{page.name}.md") if root else None
    notes = notes_file.read_text() if notes_file and notes_file.is_file() else ""
    if page.tune:
        notes += ("\n\n## Tuning: " + page.tune.why + "\n\n"
                  f"FedAvg, {page.tune.metric} (mean ± std over seeds) for each {page.tune.key} of the grid; the "
                  f"chosen value is passed to every setting below (`--set {tuned_sets(record['tuned'])[0]}`).\n\n"
                  + record["tune_table"])
    load_avg, cpu = record.get("load"), record.get("cpu_s")
    machine = (f"{os.cpu_count()} CPU cores shared with other jobs (load average {load_avg[0]:.1f} at the start, "
               f"{load_avg[1]:.1f} at the end)") if load_avg else "unrecorded"
    if cpu:
        machine += (f"; the runs used {cpu / 60:.1f} CPU-minutes, i.e. about {cpu / 60 / 2:.0f} minutes of wall-clock "
                    "on an idle 2-core machine")
    provenance = {"commit": record["commit"], "config hash": record["config_hash"], "machine": machine}
    write_report([folder / s.name for s in page.settings], out, list(page.metrics), page.title,
                 f"turnout reproduce {page.name}", record["elapsed_s"], page.curve, notes, page.percent_of,
                 list(page.counts), page.baseline, None, list(page.curve_x), provenance, page.target)
    out.write_text(replace_slice_section(out.read_text(), page.name, record))
    return out


def make(name: str, jobs: int, folder: Path | None = None, out: Path | None = None) -> dict:
    """Run every setting of page ``name``, record its slice and write the page; returns the record."""
    page = load(name)
    folder = folder or Path("runs") / "reproduce" / name
    out = out or default_out() / f"{name}.md"
    start, load0, cpu0, commit = time.time(), os.getloadavg()[0], children_cpu_s(), git_commit()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    tuned, tune_table = {}, ""
    if page.tune:
        (folder / "tune").mkdir()
        for s in page.tune.settings:
            run_setting(s, folder / "tune" / s.name, jobs)
        tuned, tune_table = choose(page, folder)
        print(f"tuned: {tuned}", flush=True)
    for s in page.settings:
        run_setting(s, folder / s.name, jobs, tuned_sets(tuned))
    elapsed = time.time() - start  # the page's runs; the slice below takes seconds
    record = {"page": name, "commit": commit, "config_hash": config_hash(page, tuned), "tuned": tuned,
              "tune_table": tune_table, "elapsed_s": elapsed, "cpu_s": children_cpu_s() - cpu0,
              "load": [load0, os.getloadavg()[0]], "slice": records.measure_slice(page, tuned, jobs=jobs)}
    (folder / "page.json").write_text(json.dumps(record, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    render(page, folder, record, out)
    records.write(record, record_file(name, out))
    print(f"wrote {out} ({elapsed / 60:.1f} min)", flush=True)
    return record


def record_slice(name: str, jobs: int, rounds: int | None = None, out: Path | None = None) -> dict:
    """Measure page ``name``'s slice again (horizons and numbers) on an unchanged page: its tables stay."""
    page = load(name)
    old = records.read(name)
    if old is None:
        raise SystemExit(f"{name} has no record: make the page with `turnout reproduce {name}`")
    now = config_hash(page, old.get("tuned", {}))
    if now != old["config_hash"]:
        raise SystemExit(f"{name}: the resolved configs changed since the page was made (config hash {now}, the "
                         f"record's {old['config_hash']}): regenerate the page with `turnout reproduce {name}`, or, "
                         "when only defaults were added that change no number, `--rehash` it")
    record = {**old, "slice": records.measure_slice(page, old.get("tuned", {}), rounds, jobs)}
    records.write(record, records.record_path(name))
    out = out or default_out() / f"{name}.md"
    if out.is_file():
        out.write_text(replace_slice_section(out.read_text(), name, record))
    return record


def rehash(name: str, out: Path | None = None) -> str:
    """Accept page ``name``'s new config hash where its resolved configs changed but its numbers did not: a new
    option whose default changes nothing (a refactor, a new block). The slice must give the record's numbers
    bit for bit, here, where they were recorded; the golden cases (every experiment file and setting) vouch for
    the rest. Anything else is refused: regenerate the page."""
    page = load(name)
    old = records.read(name)
    now = config_hash(page, old.get("tuned", {}))
    if now == old["config_hash"]:
        return f"{name}: config hash {now} unchanged"
    same_machine = old["slice"]["measured_on"]["cpu"] == records.cpu_model()
    with tempfile.TemporaryDirectory(prefix=f"turnout-rehash-{name}-") as tmp:
        numbers = slice_numbers(run_slice(page, old.get("tuned", {}), old["slice"]["rounds"], Path(tmp) / "run"))
    if not same_machine or numbers != old["slice"]["numbers"]:
        why = "the slice's numbers moved" if same_machine else "the record was measured on another CPU"
        raise SystemExit(f"{name}: config hash {old['config_hash']} → {now}, and {why}: regenerate the page with "
                         f"`turnout reproduce {name}`")
    record = {**old, "config_hash": now, "rehashed": [*old.get("rehashed", []), old["config_hash"]]}
    records.write(record, records.record_path(name))
    out = out or default_out() / f"{name}.md"
    if out.is_file():  # the page's provenance line names the hash its record now holds
        out.write_text(out.read_text().replace(f"`{old['config_hash']}`", f"`{now}` (rehashed from "
                                               f"`{old['config_hash']}`: new defaults, the same numbers)"))
    return f"{name}: config hash {old['config_hash']} → {now}; the slice's numbers are bit-identical"


def report(name: str, folder: Path | None = None, out: Path | None = None) -> Path:
    """Write page ``name`` again from its run folders (after editing its notes)."""
    folder = folder or Path("runs") / "reproduce" / name
    if not (folder / "page.json").is_file():
        raise SystemExit(f"{name}: no runs to write the page from ({folder / 'page.json'} does not exist): run "
                         f"`turnout reproduce {name}` first, in this folder")
    record = json.loads((folder / "page.json").read_text())
    return render(load(name), folder, record, out or default_out() / f"{name}.md")


def check_full(name: str, jobs: int) -> list[str]:
    """Run page ``name`` completely (in a temporary folder) and compare every table line with the page's."""
    path = default_out() / f"{name}.md"
    if not path.is_file():
        return [f"{path} does not exist"]
    with tempfile.TemporaryDirectory(prefix=f"turnout-page-{name}-") as tmp:
        fresh = Path(tmp) / f"{name}.md"
        make(name, jobs, Path(tmp) / "runs", fresh)
        new, old = (_tables(p.read_text()) for p in (fresh, path))
    diff = [f"page: {a}\nnow:  {b}" for a, b in zip(old, new) if a != b]
    if len(new) != len(old):
        diff.append(f"the page has {len(old)} table lines, a fresh run {len(new)}")
    return diff


def _tables(text: str) -> list[str]:
    at = text.find("## Check slice")
    return [line for line in (text[:at] if at >= 0 else text).splitlines() if line.startswith("|")]
