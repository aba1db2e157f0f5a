"""Sweep wall time: the quickstart at ``rounds=1`` (fixed cost) and 150 rounds × 2 seeds, ``--jobs 1`` vs ``--jobs 2``.

Runs ``experiments/quickstart.yaml`` (3 variants, its centralised baseline on, as a user runs it)
with seeds 0–1 through the command line, each case with ``--jobs 1`` and ``--jobs 2`` (and
``--backend ray`` with ``--ray``), interleaved over ``--repeats`` rounds so machine load hits all
alike, and prints median wall times — process start-up, the owner's preparation, the workers'
start-up and the centralised baseline included. Targets (issue 27): at ``rounds=1``, ``--jobs 2``
costs at most 1.5 s more than ``--jobs 1``; at 150 rounds × 2 seeds it takes at most 0.7× as long.
It also checks that every way's ``rounds.csv`` and ``clients.csv`` are byte-identical. The machine
and its load average are printed: on a shared machine the figures move with the load.

    python bench/sweep.py                 # both cases, --jobs 1 and --jobs 2; 1 repetition
    python bench/sweep.py --repeats 3 --ray
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
#: case → (its --set options, what is measured against the target, target)
CASES = {"rounds=1 × 2 seeds": (["rounds=1"], "extra s over --jobs 1", 1.5),
         "150 rounds × 2 seeds": (["rounds=150"], "ratio to --jobs 1", 0.7)}
TABLES = ("rounds.csv", "clients.csv")


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    return f"{platform.node()}: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), {cpu}; " \
           f"python {platform.python_version()}"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ray", action="store_true", help="also --backend ray")
    args = p.parse_args(argv)
    ways = {w: f for w, f in WAYS.items() if w != "ray" or args.ray}
    print(f"machine: {machine()}")
    print(f"load average before: {load()}")
    times = {(c, w): [] for c in CASES for w in ways}
    with tempfile.TemporaryDirectory(prefix="turnout-sweep-bench-") as tmp:
        for rep in range(args.repeats):
            for case, (sets, _, _) in CASES.items():
                outs = {}
                for way, flags in ways.items():
                    out = outs[way] = Path(tmp) / f"{len(outs)}-{rep}"
                    cmd = [sys.executable, "-m", "turnout", "run", str(ROOT / "experiments" / "quickstart.yaml"),
                           "--set", "seeds=[0,1]", *[a for s in sets for a in ("--set", s)],
                           "--set", "output.plots=false", "--out", str(out), "--quiet", *flags]
                    t = time.perf_counter()
                    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
                    times[case, way].append(time.perf_counter() - t)
                for way, out in outs.items():
                    for table in TABLES:
                        if not filecmp.cmp(outs["jobs 1"] / table, out / table, shallow=False):
                            print(f"{case}: {table} of {way} differs from --jobs 1's: this is a bug")
                            return 1
                for out in outs.values():
                    shutil.rmtree(out, ignore_errors=True)
    print(f"load average after: {load()}")
    print(f"quickstart (3 variants × 2 seeds, centralised baseline on); median of {args.repeats} interleaved "
          "run(s); wall time of the whole `turnout run` command")
    for case, (_, measure, target) in CASES.items():
        base = statistics.median(times[case, "jobs 1"])
        print(f"  {case}:")
        for way in ways:
            med = statistics.median(times[case, way])
            value = med - base if measure.startswith("extra") else med / base
            verdict = "" if way == "jobs 1" else f"   {measure}: {value:.2f} (target ≤ {target}: " \
                                                 f"{'met' if value <= target else 'missed'})"
            print(f"    {way:<7} {med:7.2f} s{verdict}")
    print("rounds.csv and clients.csv byte-identical across the ways: yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
