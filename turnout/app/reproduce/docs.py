"""The documentation's tables that are computed, not written: so a doc never says what the records do not.

In a checkout, ``turnout reproduce --docs`` rewrites, between their markers, the claim counts, claim tables and
cost table of ``docs/results/README.md`` (from every page's claim table, :mod:`.claims`, and record) and the horizon
tables of
``docs/determinism.md`` (from the pages' records and ``tests/golden/horizons.json``); ``tests/test_reproduce.py``
fails while any of them differs from what they are computed from.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...core.emulation import FAMILIES
from . import claims
from . import record as records
from .horizon import markdown_table
from .record import horizon_table
from .spec import load, names

PAGES_BLOCK = re.compile(r"(<!-- horizons:pages -->\n).*?(<!-- /horizons:pages -->)", re.S)
GOLDEN_BLOCK = re.compile(r"(<!-- horizons:golden -->\n).*?(<!-- /horizons:golden -->)", re.S)
TIMES_BLOCK = re.compile(r"(<!-- times -->\n).*?(<!-- /times -->)", re.S)


def times_table() -> str:
    """What each page cost when it was made, from its record: wall-clock and CPU minutes of its runs, and the
    machine's load average meanwhile (a shared machine stretches the wall-clock, not the CPU time)."""
    lines = ["| page | what it runs | wall-clock | CPU-minutes | load average (start → end) |",
             "|---|---|---|---|---|"]
    total = 0.0
    for name in names():
        rec = records.read(name) or {}
        cpu, load_avg = rec.get("cpu_s"), rec.get("load")
        total += cpu or 0.0
        cells = [f"{rec['elapsed_s'] / 60:.1f} min" if "elapsed_s" in rec else "no record",
                 f"{cpu / 60:.1f}" if cpu else "—",
                 f"{load_avg[0]:.1f} → {load_avg[1]:.1f}" if load_avg else "—"]
        lines.append(f"| [{name}]({name}.md) | {load(name).title} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\nAll pages: {total / 3600:.1f} CPU-hours.\n"


def render_results_readme(text: str, results_dir: Path) -> str:
    text = claims.render_readme(text, results_dir)
    return TIMES_BLOCK.sub(lambda m: m.group(1) + times_table() + m.group(2), text)


def golden_table(root: Path) -> str:
    """The golden cases that are cut (the others hold every round under every family), and how many hold."""
    path = root / "tests" / "golden" / "horizons.json"
    cuts = json.loads(path.read_text()) if path.is_file() else {}
    cut = {k: v for k, v in cuts.items() if v["rounds"] < v["asked"] or v["integers_only"]}
    intro = (f"{len(cuts) - len(cut)} of {len(cuts)} golden cases hold every round they run (10; seam matrix 6) "
             f"under every family; the {len(cut)} below are cut:\n\n")
    return intro + markdown_table(cut, FAMILIES, label="golden case")


def render_determinism(text: str, root: Path) -> str:
    text = PAGES_BLOCK.sub(lambda m: m.group(1) + horizon_table() + m.group(2), text)
    return GOLDEN_BLOCK.sub(lambda m: m.group(1) + golden_table(root) + m.group(2), text)


def problems(root: Path) -> list[str]:
    """Where the computed tables of the docs differ from what they are computed from (empty: current)."""
    out = [f"docs/results/{p}" for p in claims.readme_problems(root / "docs" / "results")]
    readme = (root / "docs" / "results" / claims.README).read_text()
    if not TIMES_BLOCK.search(readme):
        out.append(f"docs/results/{claims.README} lacks its <!-- times --> block")
    elif TIMES_BLOCK.sub(lambda m: m.group(1) + times_table() + m.group(2), readme) != readme:
        out.append(f"docs/results/{claims.README}'s cost table differs from the pages' records")
    det = (root / "docs" / "determinism.md").read_text()
    if not (PAGES_BLOCK.search(det) and GOLDEN_BLOCK.search(det)):
        out.append("docs/determinism.md lacks its <!-- horizons:pages --> or <!-- horizons:golden --> block")
    elif render_determinism(det, root) != det:
        out.append("docs/determinism.md's horizon tables differ from the records")
    return out


def update(root: Path) -> list[str]:
    """Rewrite the computed tables; the files changed."""
    changed = []
    readme = root / "docs" / "results" / claims.README
    for path, render in ((readme, lambda t: render_results_readme(t, readme.parent)),
                         (root / "docs" / "determinism.md", lambda t: render_determinism(t, root))):
        text = path.read_text()
        new = render(text)
        if new != text:
            path.write_text(new)
            changed.append(str(path.relative_to(root)))
    return changed
