"""Measure how far the golden cases' tables drift between emulated CPUs, round by round.

Each environment runs the chosen golden cases (``scripts/golden_hashes.py --dump``) in its own process, with
the kernels it names (``ATEN_CPU_CAPABILITY`` picks torch's vectorised loops, ``OPENBLAS_CORETYPE`` numpy's
OpenBLAS kernel, ``MKL_ENABLE_INSTRUCTIONS`` MKL's code path, the way another CPU vendor or model does); the
first is the reference. For every other one the script prints, per round, the largest relative difference of a
float cell over all cases, and every cell that is not a float and differs (a count, a byte total, a string).
docs/determinism.md's tolerance and the golden runs' length come from these figures.

    python scripts/cpu_divergence.py --only exp: --set rounds=20
    python scripts/cpu_divergence.py --compare TABLES.json.gz   # a golden_hashes.py --check --save-tables
                                                                # run against the recorded tables
    python scripts/cpu_divergence.py --only quickstart,matrix:availability=ln --env native \\
        --env ATEN_CPU_CAPABILITY=avx2 --env ATEN_CPU_CAPABILITY=default,OPENBLAS_CORETYPE=Haswell
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from turnout.core.environment import parse_cell  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("golden_hashes", ROOT / "scripts" / "golden_hashes.py")
golden = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(golden)

#: the emulated CPUs of scripts/test.sh's second pass and of docs/determinism.md
DEFAULT_ENVS = ("native", "ATEN_CPU_CAPABILITY=avx2", "ATEN_CPU_CAPABILITY=default",
                "MKL_ENABLE_INSTRUCTIONS=AVX2,ONEDNN_MAX_CPU_ISA=AVX2", "OPENBLAS_CORETYPE=Haswell")


def parse_env(spec: str) -> dict[str, str]:
    """``"A=1,B=2"`` → {A: 1, B: 2}; ``"native"`` → {} (the machine as it is)."""
    if spec == "native":
        return {}
    out = {}
    for part in spec.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env {spec!r}: write NAME=VALUE[,NAME=VALUE] or native")
        out[key] = value
    return out


def dump(spec: str, only: str, extra: list[str], out: Path) -> dict[str, dict[str, str]]:
    env = {**os.environ, **parse_env(spec)}
    cmd = [sys.executable, str(ROOT / "scripts" / "golden_hashes.py"), "--dump", str(out), "--only", only]
    for s in extra:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads(gzip.decompress(out.read_bytes()))


def _float(text: str) -> float | None:
    value = parse_cell(text)
    return value if isinstance(value, float) else None


def drift(ref: dict[str, dict[str, str]], other: dict[str, dict[str, str]]):
    """(round → largest relative float difference, [discrete differences], case → its own figures)."""
    per_round: dict[int, float] = defaultdict(float)
    discrete = []
    cases = {}
    for case, files in ref.items():
        pr, dc = _drift_case(case, files, other[case])
        cases[case] = {"per_round": pr, "first_discrete": dc[0] if dc else None, "discrete": len(dc)}
        for r, v in pr.items():
            per_round[r] = max(per_round[r], v)
        discrete += dc
    return dict(sorted(per_round.items())), discrete, cases


def _drift_case(case: str, ref_files: dict[str, str], other_files: dict[str, str]):
    per_round: dict[int, float] = defaultdict(float)
    discrete = []
    for name, text in ref_files.items():
        a = list(csv.reader(io.StringIO(text)))
        b = list(csv.reader(io.StringIO(other_files[name])))
        if a[0] != b[0] or len(a) != len(b):
            discrete.append(f"{case} {name}: other columns or rows")
            continue
        rcol = a[0].index("round") if "round" in a[0] else None
        for i, (ra, rb) in enumerate(zip(a[1:], b[1:]), start=1):
            rnd = int(ra[rcol]) if rcol is not None and ra[rcol].lstrip("-").isdigit() else -1
            for col, x, y in zip(a[0], ra, rb):
                if x == y:
                    continue
                fx, fy = _float(x), _float(y)
                if fx is None or fy is None or math.isnan(fx) != math.isnan(fy):
                    discrete.append(f"{case} {name} row {i} {col}: {y!r}, reference {x!r}")
                    continue
                if math.isnan(fx):
                    continue
                rel = abs(fx - fy) / max(abs(fx), abs(fy), 1e-300)
                if abs(fx - fy) > golden.ABS_TOL:
                    per_round[rnd] = max(per_round[rnd], rel)
    return dict(sorted(per_round.items())), discrete


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="exp:", help="comma-separated substrings of golden case names")
    p.add_argument("--set", dest="extra", action="append", default=[], help="an override added to every case")
    p.add_argument("--env", action="append", default=None,
                   help="an environment (NAME=VALUE[,NAME=VALUE] or native); the first is the reference")
    p.add_argument("--show", type=int, default=5, help="discrete differences to print per environment")
    p.add_argument("--per-case", action="store_true", help="print every case's own figures")
    p.add_argument("--compare", type=Path, default=None,
                   help="instead of running: compare these saved tables (golden_hashes.py --save-tables or --dump) "
                        "with the recorded golden tables")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    envs = args.env or list(DEFAULT_ENVS)
    if args.compare:
        saved = json.loads(gzip.decompress(args.compare.read_bytes()))
        recorded = golden.recorded_tables()
        envs = ["recorded", str(args.compare)]
        tables = {envs[0]: {k: recorded[k] for k in saved}, envs[1]: saved}
    else:
        with tempfile.TemporaryDirectory(prefix="turnout-drift-") as tmp:
            tables = {spec: dump(spec, args.only, args.extra, Path(tmp) / f"{i}.json.gz")
                      for i, spec in enumerate(envs)}
    ref = tables[envs[0]]
    print(f"{len(ref)} cases ({args.only}; {' '.join(args.extra) or 'as recorded'}), reference: {envs[0]}")
    report = {}
    for spec in envs[1:]:
        per_round, discrete, cases = drift(ref, tables[spec])
        report[spec] = {"per_round": per_round, "discrete": discrete, "cases": cases}
        rounds = "  ".join(f"r{r}: {v:.1e}" for r, v in per_round.items()) or "every float identical"
        print(f"{spec}: largest relative float difference by round: {rounds}")
        print(f"{spec}: {len(discrete)} discrete cells differ" + "".join(f"\n    {d}" for d in discrete[:args.show]))
        if args.per_case:
            for case, c in cases.items():
                worst = "  ".join(f"r{r}: {v:.0e}" for r, v in sorted(c["per_round"].items()))
                print(f"  {case}: {c['discrete']} discrete ({c['first_discrete'] or '-'}); {worst or 'identical'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
