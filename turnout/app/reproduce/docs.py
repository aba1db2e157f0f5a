"""The documentation's tables that are computed, not written: so a doc never says what the records do not.

In a checkout, ``turnout reproduce --docs`` rewrites, between their markers, the claim counts and claim tables of
``docs/results/README.md`` (from every page's claim table, :mod:`.claims`) and the horizon tables of
``docs/determinism.md`` (from the pages' records and ``tests/golden/horizons.json``); ``tests/test_reproduce.py``
fails while any of them differs from what they are computed from.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...core.emulation import FAMILIES
from . import claims
from .horizon import markdown_table
from .record import horizon_table

PAGES_BLOCK = re.compile(r"(<!-- horizons:pages -->\n).*?(<!-- /horizons:pages -->)", re.S)
GOLDEN_BLOCK = re.compile(r"(<!-- horizons:golden -->\n).*?(<!-- /horizons:golden -->)", re.S)


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
    for path, render in ((readme, lambda t: claims.render_readme(t, readme.parent)),
                         (root / "docs" / "determinism.md", lambda t: render_determinism(t, root))):
        text = path.read_text()
        new = render(text)
        if new != text:
            path.write_text(new)
            changed.append(str(path.relative_to(root)))
    return changed
