"""Sweep wall time: the quickstart's 9 units (3 variants × 3 seeds) one at a time, on 2 worker processes, on Ray.

Runs ``experiments/quickstart.yaml`` with seeds 0–2 (and without its centralised baseline, which is
not part of the units) through the command line three ways, interleaved over ``--repeats`` rounds
so machine load hits all alike, and prints median wall times and their ratios to ``--jobs 1``. It
also checks that the three runs' rounds.csv are byte-identical. Target: ≤ 0.6 for 2 workers.

    python bench/sweep.py                 # --jobs 1, --jobs 2, --backend ray; 1 repetition
    python bench/sweep.py --repeats 3 --rounds 300
"""

from __future__ import annotations

import argparse
import filecmp
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = {"jobs 1": ["--jobs", "1"], "jobs 2": ["--jobs", "2"], "ray": ["--backend", "ray"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--rounds", type=int, default=300, help="rounds per unit (the quickstart's 300 by default)")
    args = p.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        del WAYS["ray"]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"machine: {os.cpu_count()} cores, {cpu}; python {platform.python_version()}")
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    with tempfile.TemporaryDirectory(prefix="turnout-sweep-bench-") as tmp:
        for rep in range(args.repeats):
            for way, flags in WAYS.items():
                out = Path(tmp) / f"{way.replace(' ', '')}-{rep}"
                cmd = [sys.executable, "-m", "turnout", "run", str(ROOT / "experiments" / "quickstart.yaml"),
                       "--set", "seeds=[0,1,2]", "--set", f"rounds={args.rounds}",
                       "--set", "eval.centralized_baseline=false", "--set", "output.plots=false",
                       "--out", str(out), "--quiet", *flags]
                t = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
                times[way].append(time.perf_counter() - t)
            first = Path(tmp) / f"jobs1-{rep}" / "rounds.csv"
            same = all(filecmp.cmp(first, Path(tmp) / f"{w.replace(' ', '')}-{rep}" / "rounds.csv", shallow=False)
                       for w in WAYS)
            if not same:
                print("rounds.csv differs between the ways of running: this is a bug")
                return 1
            for way in WAYS:
                shutil.rmtree(Path(tmp) / f"{way.replace(' ', '')}-{rep}", ignore_errors=True)
    base = statistics.median(times["jobs 1"])
    print(f"quickstart, 9 units × {args.rounds} rounds; median of {args.repeats} interleaved run(s); "
          "wall time includes starting the processes (and Ray)")
    for way in WAYS:
        med = statistics.median(times[way])
        print(f"  {way:<7} {med:7.1f} s   ratio to --jobs 1: {med / base:.2f}")
    print("rounds.csv byte-identical across the ways: yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
