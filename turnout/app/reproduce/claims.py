"""The results pages' claim tables, read and counted: the overview's counts line and claim tables come from here.

A page's claim table is the Markdown table whose header has a ``claim`` and a ``verdict`` column. A row's
verdict is the first bold span of its verdict cell (the headline; what follows qualifies it), one of
:data:`VERDICTS`: ``**reproduced** (was partly)`` is reproduced, ``**not reproduced** (DV); TV and DT lower``
not reproduced, ``**≈ SCAFFOLD; not testable under the reconstruction**`` not testable.

A *distinct claim* is one row of one page's claim table, except a row that repeats another page's claim:
a row whose cells link to another results page holding a row with the same claim text, compared without
parenthesised qualifiers, markup and case (FedSUM's "Smaller delays (…, App. H.4)" row points to the
Cases page, whose own row carries the ten-seed evidence). A repeat is counted once, on the page it links
to, and must agree with that row's verdict. The same words on two pages without such a link are two
settings of a claim (Adaptive-OU's claims on the seed code's task and on FedProx's), counted twice.

``docs/results/README.md`` carries the counts line and every page's claim table between markers that
:func:`render_readme` fills; ``python -m turnout.app.reproduce.claims docs/results --write`` rewrites them,
and ``tests/test_claim_counts.py`` fails when they disagree with the pages.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

#: the verdicts, in the order the counts line gives them
VERDICTS = ("reproduced", "partly", "not reproduced", "not testable")

README = "README.md"
#: the overview's blocks (what lies between a block's markers is rewritten, and cannot hold another block)
COUNTS_BLOCK = re.compile(r"(<!-- claims:counts -->\n)(?:(?!<!-- /?claims).)*?(<!-- /claims:counts -->)", re.S)
TABLE_BLOCK = re.compile(r"(<!-- claims: ([\w-]+) -->\n)(?:(?!<!-- /?claims).)*?(<!-- /claims -->)", re.S)


@dataclass(frozen=True)
class Claim:
    """One row of a page's claim table."""

    page: str  #: the page's file stem, e.g. ``gluefl_k10``
    text: str  #: the claim cell as written
    verdict: str  #: one of :data:`VERDICTS`
    links: tuple[str, ...]  #: the results pages (stems) the row's cells link to
    repeats: str | None = None  #: the page whose row this one repeats (it is counted there)


@dataclass(frozen=True)
class Counts:
    """Distinct claims per verdict over ``pages`` pages (``repeats``: rows counted on another page)."""

    by_verdict: dict[str, int]
    pages: int
    repeats: int = 0
    claims: list[Claim] = field(default_factory=list, compare=False, repr=False)

    @property
    def total(self) -> int:
        return sum(self.by_verdict.values())


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells (``\\|`` is a pipe inside a cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def claim_table(text: str) -> tuple[int, int] | None:
    """(first, end) line numbers of the page's claim table, header included (None: the page has none)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and {"claim", "verdict"} <= {c.lower() for c in _cells(line)}:
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            return i, end
    return None


def verdict_of(cell: str, where: str) -> str:
    """The row's verdict: the first bold span of its verdict cell, read as one of :data:`VERDICTS`."""
    bold = re.search(r"\*\*(.+?)\*\*", cell)
    head = bold.group(1).lower() if bold else ""
    for verdict in ("not testable", "not reproduced", "partly", "reproduced"):
        if verdict in head:
            return verdict
    raise ValueError(f"{where}: verdict cell {cell!r} does not start with a bold verdict "
                     f"({', '.join(VERDICTS)})")


def page_claims(path: Path) -> list[Claim]:
    """The rows of the page's claim table (none when it has no claim table)."""
    text = path.read_text()
    span = claim_table(text)
    if span is None:
        return []
    lines = text.splitlines()
    header = [c.lower() for c in _cells(lines[span[0]])]
    col_claim, col_verdict = header.index("claim"), header.index("verdict")
    out = []
    for n in range(span[0] + 2, span[1]):
        cells = _cells(lines[n])
        where = f"{path.name} line {n + 1}"
        if len(cells) != len(header):
            raise ValueError(f"{where}: {len(cells)} cells where the claim table's header has {len(header)}")
        links = tuple(dict.fromkeys(m for m in re.findall(r"\]\(([\w-]+)\.md(?:#[^)]*)?\)", lines[n])
                                    if m != path.stem))
        out.append(Claim(path.stem, cells[col_claim], verdict_of(cells[col_verdict], where), links))
    return out


def _key(text: str) -> str:
    """A claim's words without links, markup, parenthesised qualifiers and case."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*`]", "", text)
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\s*\([^()]*\)", "", text)
    return " ".join(text.lower().split()).strip(" .;:")


def pages(results_dir: Path) -> list[Path]:
    """The results pages: every ``*.md`` of ``results_dir`` but the overview."""
    return sorted(p for p in Path(results_dir).glob("*.md") if p.name != README)


def read_claims(results_dir: Path) -> list[Claim]:
    """Every page's claim rows, a repeat marked with the page it repeats (see the module's docstring)."""
    rows = [c for p in pages(results_dir) for c in page_claims(p)]
    by_page: dict[str, dict[str, Claim]] = {}
    for c in rows:
        by_page.setdefault(c.page, {}).setdefault(_key(c.text), c)
    out = []
    for c in rows:
        home = next((by_page[p][_key(c.text)] for p in c.links if _key(c.text) in by_page.get(p, {})), None)
        # two rows linking to each other: the first (in page order) is the claim, the other its repeat
        if home is not None and not (c.page in home.links and (c.page, c.text) < (home.page, home.text)):
            if home.verdict != c.verdict:
                raise ValueError(f"{c.page}.md repeats {home.page}.md's claim {home.text!r} with the verdict "
                                 f"{c.verdict!r}, not {home.verdict!r}: make the two pages agree")
            c = Claim(c.page, c.text, c.verdict, c.links, home.page)
        out.append(c)
    return out


def count_claims(results_dir: Path) -> Counts:
    """Distinct claims per verdict over the results pages of ``results_dir``."""
    claims = read_claims(results_dir)
    counted = Counter(c.verdict for c in claims if c.repeats is None)
    return Counts({v: counted.get(v, 0) for v in VERDICTS}, len({c.page for c in claims}),
                  sum(c.repeats is not None for c in claims), claims)


def _tally(by_verdict: dict[str, int]) -> str:
    return ", ".join(f"{n} {v}" for v, n in by_verdict.items() if n)


def counts_line(counts: Counts) -> str:
    """The overview's counts line."""
    repeats = (f"; {counts.repeats} row{'s' * (counts.repeats != 1)} repeating another page's claim "
               f"{'is' if counts.repeats == 1 else 'are'} counted there") if counts.repeats else ""
    return (f"**{counts.total} claims** over the {counts.pages} pages: {_tally(counts.by_verdict)} (counted from "
            f"the pages' claim tables below{repeats}).")


def page_block(path: Path, claims: list[Claim]) -> str:
    """What the overview shows of one page: its claim counts, its claim table verbatim, and its repeats."""
    mine = [c for c in claims if c.page == path.stem]
    text = path.read_text()
    span = claim_table(text)
    if span is None:
        raise ValueError(f"{path.name}: no claim table (a Markdown table with `claim` and `verdict` columns)")
    table = "\n".join(text.splitlines()[span[0]:span[1]])
    own = Counter(c.verdict for c in mine if c.repeats is None)
    n = sum(own.values())
    lines = [f"[{path.stem}]({path.name}): {n} claim{'s' * (n != 1)}, "
             f"{_tally({v: own[v] for v in VERDICTS})}.", "", table]
    for c in mine:
        if c.repeats:
            lines += ["", f"(\"{c.text}\" is the [{c.repeats}]({c.repeats}.md) page's claim, counted there.)"]
    return "\n".join(lines)


def render_readme(text: str, results_dir: Path) -> str:
    """The overview ``text`` with its counts line and every page's claims block filled from the pages."""
    results_dir = Path(results_dir)
    counts = count_claims(results_dir)
    out = COUNTS_BLOCK.sub(lambda m: m.group(1) + counts_line(counts) + "\n" + m.group(2), text)

    def table(m: re.Match) -> str:
        page = results_dir / f"{m.group(2)}.md"
        if not page.is_file():
            raise ValueError(f"{README}: a claims block names {m.group(2)}, which is not a page of {results_dir}")
        return m.group(1) + page_block(page, counts.claims) + "\n" + m.group(3)

    return TABLE_BLOCK.sub(table, out)


def readme_problems(results_dir: Path) -> list[str]:
    """Where ``README.md`` disagrees with the pages (empty: it agrees)."""
    results_dir = Path(results_dir)
    text = (results_dir / README).read_text()
    problems = []
    if not COUNTS_BLOCK.search(text):
        problems.append(f"{README} has no <!-- claims:counts --> block for the counts line")
    shown = Counter(m.group(2) for m in TABLE_BLOCK.finditer(text))
    with_claims = {p.stem for p in pages(results_dir) if claim_table(p.read_text())}
    problems += [f"{README} has no <!-- claims: {p} --> block: the {p} page's claims are left out"
                 for p in sorted(with_claims - set(shown))]
    problems += [f"{README} shows the {p} page's claims {n} times" for p, n in shown.items() if n > 1]
    if not problems and render_readme(text, results_dir) != text:
        problems.append(f"{README}'s counts line or a page's claims block differs from the pages")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m turnout.app.reproduce.claims",
                                     description="count the results pages' claims; check or rewrite the overview")
    parser.add_argument("results_dir", type=Path, help="the results pages' folder, e.g. docs/results")
    parser.add_argument("--write", action="store_true", help=f"rewrite {README}'s counts line and claims blocks")
    args = parser.parse_args(argv)
    if not (args.results_dir / README).is_file():
        print(f"error: results_dir {args.results_dir}: no {README} there; give the results pages' folder "
              "(e.g. docs/results)", file=sys.stderr)
        return 2
    try:
        if args.write:
            path = args.results_dir / README
            path.write_text(render_readme(path.read_text(), args.results_dir))
        problems = readme_problems(args.results_dir)
        print(counts_line(count_claims(args.results_dir)))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"error: {p}; run `python -m turnout.app.reproduce.claims {args.results_dir} --write`",
              file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
