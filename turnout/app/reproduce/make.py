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
    setting_state,
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
        # the pages' records are what pages write, not what runs read: `turnout reproduce A B` leaves A's record
        # uncommitted when B starts, and B was made from the same code
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "turnout", "scripts",
                                ":(exclude)turnout/pages/records"], cwd=root,
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
    commit = record["commit"]
    if record.get("resumed"):  # a page made over several sessions names each commit it ran from
        commit = f"`{commit}` (resumed at " + ", ".join(f"`{c}`" for c in record["resumed"]) + ")"
    provenance = {"commit": commit, "config hash": record["config_hash"], "machine": machine}
    write_report([folder / s.name for s in page.settings], out, list(page.metrics), page.title,
                 f"turnout reproduce {page.name}", record["elapsed_s"], page.curve, notes, page.percent_of,
                 list(page.counts), page.baseline, None if page.paired is None else list(page.paired),
                 list(page.curve_x), provenance, page.target)
    out.write_text(replace_slice_section(out.read_text(), page.name, record))
    return out


class Progress:
    """A page's progress beside its run folders (``progress.json``): what it started from and the time spent so
    far, saved while it runs, so that an interrupted page continues (``--resume``) and its record counts every
    session's time (a session killed outright loses what it spent since its last save)."""

    FILE = "progress.json"

    def __init__(self, page: Page, folder: Path, resume: bool):
        self.file = folder / self.FILE
        configs = config_hash(page, {})  # before tuning: any change of the page's experiment files or settings
        if not resume:
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            self.state = {"page": page.name, "commit": git_commit(), "configs": configs, "elapsed_s": 0.0,
                          "cpu_s": 0.0, "load0": os.getloadavg()[0], "resumed": []}
        elif not self.file.is_file():
            why = "it has finished" if (folder / "page.json").is_file() else "no page was started there"
            raise SystemExit(f"{page.name}: nothing to resume in {folder} ({why}): run `turnout reproduce "
                             f"{page.name}`")
        else:
            self.state = json.loads(self.file.read_text())
            if self.state["configs"] != configs:
                raise SystemExit(f"{page.name}: the resolved configs changed since the page was started (config "
                                 f"hash {configs}, the page's {self.state['configs']}): start it again with "
                                 f"`turnout reproduce {page.name}`")
            self.state["resumed"].append(git_commit())
        self.since, self.cpu_since = time.time(), children_cpu_s()
        self.save()

    def save(self) -> None:
        """Add the wall-clock (and the finished runs' CPU) time spent since the last save, and write the file."""
        now, cpu = time.time(), children_cpu_s()
        self.state["elapsed_s"] += now - self.since
        self.state["cpu_s"] += cpu - self.cpu_since
        self.since, self.cpu_since = now, cpu
        self.file.write_text(json.dumps(self.state, indent=1))


def make(name: str, jobs: int, folder: Path | None = None, out: Path | None = None, resume: bool = False) -> dict:
    """Run every setting of page ``name``, record its slice and write the page; returns the record.

    With ``resume``, continue the page an interruption stopped: finished settings are kept, an interrupted one
    continues from its checkpoints, and the configs must still resolve to the hash the page started with."""
    page = load(name)
    folder = folder or Path("runs") / "reproduce" / name
    out = out or default_out() / f"{name}.md"
    progress = Progress(page, folder, resume)
    tuned, tune_table = {}, ""
    if page.tune:
        (folder / "tune").mkdir(exist_ok=True)
        for s in page.tune.settings:
            if setting_state(folder / "tune" / s.name) != "done":
                try:
                    run_setting(s, folder / "tune" / s.name, jobs, tick=progress.save, page=name)
                finally:  # a stopped or failed run's time counts too
                    progress.save()
        tuned, tune_table = choose(page, folder)
        print(f"tuned: {tuned}", flush=True)
    for s in page.settings:
        if setting_state(folder / s.name) == "done":
            print(f"kept: {s.name} (finished before)", flush=True)
            continue
        try:
            run_setting(s, folder / s.name, jobs, tuned_sets(tuned), tick=progress.save, page=name)
        finally:  # a stopped or failed run's time counts too
            progress.save()
    st = progress.state
    record = {"page": name, "commit": st["commit"], "config_hash": config_hash(page, tuned), "tuned": tuned,
              "tune_table": tune_table,
              "elapsed_s": st["elapsed_s"], "cpu_s": st["cpu_s"], "load": [st["load0"], os.getloadavg()[0]],
              "slice": records.measure_slice(page, tuned, jobs=jobs)}
    if st["resumed"]:
        record["resumed"] = st["resumed"]
    (folder / "page.json").write_text(json.dumps(record, indent=1))
    progress.file.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    render(page, folder, record, out)
    records.write(record, record_file(name, out))
    print(f"wrote {out} ({record['elapsed_s'] / 60:.1f} min)", flush=True)
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
