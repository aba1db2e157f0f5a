"""What every conformance recorder shares: the authors' checkout, its commit, and the record file.

A recorder imports the authors' modules from a checkout the user points it at (``--checkout``),
stubs only the framework objects around the function it drives, runs it on fixed inputs and writes
``tests/conformance/records/<mechanism>.json``: the inputs, the authors' outputs and the commit they
came from. The tests replay the inputs through turnout's component and compare, so they need
neither the checkout nor the authors' dependencies.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

RECORDS = Path(__file__).resolve().parents[2] / "tests" / "conformance" / "records"


def parse_args(mechanism: str, repo: str, argv=None) -> argparse.Namespace:
    """``--checkout PATH`` (a clone of ``repo``) and ``--out`` (default: the test records folder)."""
    p = argparse.ArgumentParser(description=f"Record {mechanism} outputs of the authors' code ({repo}).")
    p.add_argument("--checkout", required=True, type=Path,
                   help=f"a git clone of https://github.com/{repo} (its HEAD commit is recorded)")
    p.add_argument("--out", type=Path, default=RECORDS / f"{mechanism}.json", help="record file to write")
    args = p.parse_args(argv)
    if not (args.checkout / ".git").exists():
        sys.exit(f"--checkout {args.checkout}: not a git clone of {repo}; clone it and pass its folder")
    return args


def commit_of(checkout: Path) -> str:
    """The checkout's HEAD commit (the record names the exact code it came from)."""
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def plain(x: Any) -> Any:
    """numpy / torch values as JSON-able Python (floats kept at full precision by ``json``)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def write_record(out: Path, *, mechanism: str, repo: str, commit: str, source: str, cases: list) -> None:
    """Write the record: what produced it (repo, commit, file/function) and its cases."""
    record = {"mechanism": mechanism, "repo": repo, "commit": commit, "source": source,
              "recorder": f"scripts/conformance/{Path(sys.argv[0]).name}", "cases": plain(cases)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({len(cases)} cases, {repo}@{commit[:12]})")
