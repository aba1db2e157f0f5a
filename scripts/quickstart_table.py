"""Regenerate (or check) the README's quickstart table from a run of ``experiments/quickstart.yaml``.

The table sits in README.md between ``<!-- quickstart-table:start -->`` and ``<!-- quickstart-table:end -->``;
its numbers are reproducible (same config and seed, same numbers), so a stale table is a bug this script
finds and fixes:

    python scripts/quickstart_table.py                  # run the quickstart (~1.5 min), rewrite the table
    python scripts/quickstart_table.py --run RUN_DIR    # take the numbers from a finished run folder instead
    python scripts/quickstart_table.py --check          # exit 1 (printing both tables) if README.md differs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- quickstart-table:start -->", "<!-- quickstart-table:end -->"
HEADER = ("| variant | final accuracy | best accuracy | bytes down | simulated time | client-seconds used |\n"
          "|---|---|---|---|---|---|\n")


def table(summary: dict) -> str:
    """The markdown table of a run's per-variant summary (mean over its seeds; the quickstart runs one)."""
    rows = [f"| {v['variant']} | {v['final_accuracy']:.4f} | {v['best_accuracy']:.4f} | {v['bytes_down'] / 1e6:.2f} MB "
            f"| {v['sim_time_s']:,.0f} s | {v['resource_s']:,.0f} |\n" for v in summary["variants"]]
    return HEADER + "".join(rows)


def run_quickstart(out: Path) -> Path:
    """``turnout run experiments/quickstart.yaml`` into ``out`` with this interpreter."""
    subprocess.run([sys.executable, "-m", "turnout", "run", str(ROOT / "experiments" / "quickstart.yaml"),
                    "--quiet", "--out", str(out)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return out


def replace_table(text: str, new: str) -> str:
    """``text`` with the part between the markers replaced by ``new`` (the markers must be there, once each)."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SystemExit(f"quickstart_table: expected one {START} ... {END} pair in the README")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{new}{END}{tail}"


def current_table(text: str) -> str:
    return text.split(START, 1)[1].split(END, 1)[0].lstrip("\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=None, help="finished quickstart run folder (default: run it now)")
    p.add_argument("--check", action="store_true", help="do not write; exit 1 when the README's table differs")
    p.add_argument("--readme", type=Path, default=ROOT / "README.md", help="file holding the markers")
    args = p.parse_args(argv)
    readme = args.readme.read_text()
    if args.run is not None:
        summary = json.loads((args.run / "summary.json").read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            summary = json.loads((run_quickstart(Path(tmp) / "quickstart") / "summary.json").read_text())
    new = table(summary)
    if args.check:
        if current_table(readme) != new:
            print(f"{args.readme}: the quickstart table is stale.\n--- README\n{current_table(readme)}"
                  f"--- the run\n{new}Regenerate it: python scripts/quickstart_table.py", file=sys.stderr)
            return 1
        print(f"{args.readme}: the quickstart table matches the run")
        return 0
    args.readme.write_text(replace_table(readme, new))
    print(f"{args.readme}: quickstart table written\n{new}", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
