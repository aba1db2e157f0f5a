"""A recorded check's horizon: how many rounds its floats stay put when another CPU computes them.

Another CPU's kernels change a float's last bits; training carries them on and, in a chaotic setting, grows them
until a check's tolerance no longer holds. So a recorded check (a page's slice, a golden case) is run natively and
under every emulated CPU family (:mod:`turnout.core.emulation`) when it is recorded, its ``rounds.csv`` compared
row by row, and cut one round before the first row where any cell leaves :data:`HORIZON_RTOL` of the native run
(a tenth of the cross-CPU tolerance). Integers and strings (counts, bytes, cohorts) must agree exactly; where
they are the first to move, the horizon says so.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from ...core.environment import HORIZON_RTOL, agree_across_cpus, parse_cell

#: the columns that say which row a cell belongs to, not what was computed
KEY_COLUMNS = ("variant", "seed", "round")


@dataclass(frozen=True)
class Drift:
    """Where a table first leaves the reference: the round, its column, both values (``None``: never, in the
    rounds compared), and whether only floats had moved by then."""

    round: int | None
    column: str = ""
    reference: str = ""
    other: str = ""
    integers_hold: bool = True

    @property
    def horizon(self) -> int | None:
        """Rounds that hold (``None``: every round compared held)."""
        return self.round


def _rows(text: str) -> tuple[list[str], dict[tuple, list[str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return [], {}
    head = rows[0]
    keys = [head.index(k) for k in KEY_COLUMNS if k in head]
    return head, {tuple(r[i] for i in keys): r for r in rows[1:]}


def _round_of(head: list[str], row: list[str]) -> int:
    return int(row[head.index("round")]) if "round" in head else 0


def first_drift(reference: str, other: str, rtol: float = HORIZON_RTOL) -> Drift:
    """The first round at which ``other`` (a ``rounds.csv``) leaves ``reference`` by more than ``rtol``.

    Rounds are counted from 0, so the returned round is also the number of rounds that held. A missing row or
    column is a drift at that round."""
    head_a, a = _rows(reference)
    head_b, b = _rows(other)
    if head_a != head_b:
        return Drift(0, "the columns", ",".join(head_a)[:80], ",".join(head_b)[:80], False)
    first: Drift | None = None
    first_int: int | None = None
    for key in sorted(set(a) | set(b), key=lambda k: (_round_of(head_a, a.get(k) or b.get(k)), k)):
        ra, rb = a.get(key), b.get(key)
        r = _round_of(head_a, ra or rb)
        if ra is None or rb is None:
            return _earliest(first, Drift(r, "a row", str(key), "missing", False))
        for col, x, y in zip(head_a, ra, rb):
            vx, vy = parse_cell(x), parse_cell(y)
            is_float = isinstance(vx, float) and isinstance(vy, float)
            if not agree_across_cpus(vx, vy, rtol):
                if first is None:
                    first = Drift(r, col, x, y)
                if not is_float and first_int is None:
                    first_int = r
        if first_int is not None:
            break
    if first is None:
        return Drift(None)
    return Drift(first.round, first.column, first.reference, first.other,
                 integers_hold=first_int is None)


def _earliest(found: Drift | None, missing: Drift) -> Drift:
    return found if found is not None and found.round <= missing.round else missing


def integer_horizon(reference: str, other: str) -> int | None:
    """The first round at which an integer or string cell of ``other`` differs from ``reference`` (``None``:
    none does): how long a check of integers only holds."""
    head_a, a = _rows(reference)
    head_b, b = _rows(other)
    if head_a != head_b:
        return 0
    for key in sorted(set(a) | set(b), key=lambda k: (_round_of(head_a, a.get(k) or b.get(k)), k)):
        ra, rb = a.get(key), b.get(key)
        r = _round_of(head_a, ra or rb)
        if ra is None or rb is None:
            return r
        for x, y in zip(ra, rb):
            vx, vy = parse_cell(x), parse_cell(y)
            if not (isinstance(vx, float) and isinstance(vy, float)) and vx != vy:
                return r
    return None


@dataclass(frozen=True)
class Cut:
    """The rounds a check keeps: ``rounds`` (floats and integers) or, when floats cannot hold two rounds,
    ``integers_only`` over the integer horizon; ``horizons`` per family (``None``: held every round measured)."""

    rounds: int
    integers_only: bool
    horizons: dict[str, int | None]
    integer_horizons: dict[str, int | None]
    measured: int  # rounds run to measure
    first: dict[str, str]  # family → "round r, column c: native x, family y" of its first drift

    @property
    def horizon(self) -> int:
        """Rounds every float held under every family (at most the rounds measured)."""
        return min([self.measured, *(h for h in self.horizons.values() if h is not None)])

    @property
    def integer_horizon(self) -> int:
        """Rounds every integer and string held under every family (at most the rounds measured)."""
        return min([self.measured, *(h for h in self.integer_horizons.values() if h is not None)])

    def as_record(self) -> dict:
        """What a record keeps of the cut (JSON)."""
        return {"asked": self.measured, "rounds": self.rounds, "integers_only": self.integers_only,
                "horizons": self.horizons, "integer_horizons": self.integer_horizons, "horizon": self.horizon,
                "integer_horizon": self.integer_horizon, "first_drift": self.first}


def cut(asked: int, tables: dict[str, str], reference: str = "native") -> Cut:
    """The cut of a check asked to run ``asked`` rounds, from its ``rounds.csv`` per family (``reference``: the
    native run)."""
    horizons, ints, first = {}, {}, {}
    for family, text in tables.items():
        if family == reference:
            continue
        d = first_drift(tables[reference], text)
        horizons[family] = d.horizon
        ints[family] = integer_horizon(tables[reference], text)
        if d.round is not None:
            first[family] = f"round {d.round}, {d.column}: native {d.reference}, {family} {d.other}"
    held = min([asked, *(h for h in horizons.values() if h is not None)])
    if held >= 2 or held >= asked:
        return Cut(held, False, horizons, ints, asked, first)
    held_int = min([asked, *(h for h in ints.values() if h is not None)])
    return Cut(held_int, True, horizons, ints, asked, first)


def markdown_table(cuts: dict[str, dict], families: tuple[str, ...], label: str = "page") -> str:
    """A Markdown table of recorded cuts: one row each, the rounds asked and kept and each family's horizon
    (``≥ n``: it held every round measured)."""
    head = f"| {label} | asked | kept | " + " | ".join(families) + " | first drift |"
    lines = [head, "|---|---|---|" + "---|" * len(families) + "---|"]
    for name, c in cuts.items():
        asked = c.get("asked", c.get("asked_rounds"))
        kept = ("not comparable across CPUs" if c["rounds"] == 0
                else f"{c['rounds']}" + (" (integers only)" if c["integers_only"] else ""))
        cells = [f"≥ {asked}" if c["horizons"].get(f) is None else str(c["horizons"][f]) for f in families]
        first = min(c.get("first_drift", {}).items(), key=lambda kv: int(kv[1].split(",")[0].split()[1]),
                    default=("", "—"))
        drift = f"{first[0]}: {first[1]}" if first[0] else "—"
        lines.append(f"| {name} | {asked} | {kept} | " + " | ".join(cells) + f" | {drift} |")
    return "\n".join(lines) + "\n"
