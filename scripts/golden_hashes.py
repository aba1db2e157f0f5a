"""Record (or check) sha256 of rounds.csv and clients.csv over a fixed set of short runs.

A refactor must keep every number turnout produces bit-identical. This script runs, through the
command line, every experiment file in ``experiments/`` shortened (``rounds=10``, seed 0), every
setting ``scripts/reproduce.sh`` passes on top of them, and the seam matrix (every availability ×
selector pair and a covering array over round mode × selector × compressor × algorithm) on a
tiny synthetic problem, and hashes each run's ``rounds.csv`` and ``clients.csv``.

    python scripts/golden_hashes.py --write            # record tests/golden/hashes.json
    python scripts/golden_hashes.py --check            # re-run everything, compare, exit 1 on a difference
    python scripts/golden_hashes.py --check --only quickstart,refl   # a subset (substring match)

``tests/test_golden_hashes.py`` re-checks a handful of cases in the default suite.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "hashes.json"
SHORT = ["rounds=10", "seeds=[0]", "output.plots=false", "output.progress=false",
         "eval.centralized_baseline=false"]

#: settings scripts/reproduce.sh runs on top of an experiment file (name → extra --set values; scripts/pages.py)
REPRODUCE = {
    "fedgs/synthetic.yaml": {
        "LN-0.5": ["availability={name: ln, beta: 0.5}"], "SLN-0.5": ["availability={name: sln, beta: 0.5}"],
        "LDF-0.7": ["availability={name: ldf, beta: 0.7}"], "MDF-0.7": ["availability={name: mdf, beta: 0.7}"]},
    "fedgs/fashion_mnist.yaml": {
        "YMF-0.9": ["availability={name: ymf, beta: 0.9}"], "YC-0.9": ["availability={name: yc, beta: 0.9}"]},
    "fedsum/digits.yaml": {
        "P1-m10": ["availability={name: p1_uniform, m: 10}"], "P3-sine": ["availability={name: p3_sine}"]},
    "fedsum/tune.yaml": {"P1-m10": ["availability={name: p1_uniform, m: 10}"]},
    "adaptive_ou/synthetic.yaml": {"N=50": ["selector.clients_per_round=50"]},
    "refl/fashion_mnist.yaml": {
        "OC-label": ["data.partition={name: shards, shards_per_client: 2}"],
        "DL-IID": ["round_mode={name: deadline, deadline_s: 60}"]},
    "refl/rules.yaml": {"DL-label": ["data.partition={name: shards, shards_per_client: 2}"]},
}

#: the seam matrix's tiny world: 24 clients, 4 per round, FLASH devices (heterogeneous speeds)
N, K = 24, 4
MATRIX_BASE = {"name": "matrix", "rounds": 6, "seeds": [0], "data": {"name": "synthetic", "num_clients": N},
               "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
               "devices": {"name": "flash"}, "eval": {"every": 3}, "output": {"progress": False, "plots": False}}
MATRIX_OPTIONS = {
    "availability": {"p1_uniform": {"m": 8}, "cyclic": {"m": 6}, "reshuffled_cyclic": {"m": 6}},
    "selector": {"sticky": {"sticky_size": 8, "sticky_per_round": 3}},
    "round_mode": {"deadline": {"deadline_s": 0.1}},
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _registries():
    try:  # after the contracts refactor the composition root owns the registries
        from turnout.sim.composition import registries  # type: ignore

        return registries()
    except ImportError:
        from turnout.config.loader import seam_registries

        return seam_registries()


def _compatible(regs, compressor: str, algorithm: str) -> bool:
    algo = regs["algorithm"].get(algorithm)
    accepts = getattr(regs["compressor"].get(compressor), "accepts", None)
    return accepts is None or algo.upload_kind(algo.Config()) in accepts


def _covering(regs) -> list[tuple[str, ...]]:
    """Every pair of values of any two of (round mode, selector, compressor, algorithm) in some tuple."""
    seams = [regs[s].names() for s in ("round_mode", "selector", "compressor", "algorithm")]
    combos = [t for t in itertools.product(*seams) if _compatible(regs, t[2], t[3])]
    uncovered = {(i, t[i], j, t[j]) for t in combos for i, j in itertools.combinations(range(4), 2)}
    out = []
    while uncovered:
        i, a, j, b = min(uncovered)
        best = max((t for t in combos if t[i] == a and t[j] == b),
                   key=lambda t: sum((p, t[p], q, t[q]) in uncovered for p, q in itertools.combinations(range(4), 2)))
        out.append(best)
        uncovered -= {(p, best[p], q, best[q]) for p, q in itertools.combinations(range(4), 2)}
    return out


def _block(seam: str, name: str) -> dict:
    extra = MATRIX_OPTIONS.get(seam, {}).get(name, {})
    if seam == "selector":
        return {"name": name, "clients_per_round": K, **extra}
    return {"name": name, **extra}


def cases() -> dict[str, tuple[str | dict, list[str]]]:
    """name → (experiment file or raw config, --set overrides)."""
    out: dict[str, tuple[str | dict, list[str]]] = {}
    for path in sorted((ROOT / "experiments").rglob("*.yaml")):
        rel = path.relative_to(ROOT / "experiments").as_posix()
        out[f"exp:{rel}"] = (str(path), list(SHORT))
        for setting, extra in REPRODUCE.get(rel, {}).items():
            out[f"exp:{rel}[{setting}]"] = (str(path), SHORT + extra)
    regs = _registries()
    for av, sel in itertools.product(regs["availability"].names(), regs["selector"].names()):
        raw = dict(MATRIX_BASE, availability=_block("availability", av), selector=_block("selector", sel))
        out[f"matrix:availability={av},selector={sel}"] = (raw, [])
    for rm, sel, comp, algo in _covering(regs):
        raw = dict(MATRIX_BASE, round_mode=_block("round_mode", rm), selector=_block("selector", sel),
                   compressor=_block("compressor", comp), algorithm=_block("algorithm", algo))
        out[f"matrix:round_mode={rm},selector={sel},compressor={comp},algorithm={algo}"] = (raw, [])
    return out


def run_case(source: str | dict, overrides: list[str], work: Path) -> dict[str, str]:
    """Run one case through the CLI in this process; sha256 of its rounds.csv and clients.csv."""
    from turnout.app.cli import main

    work.mkdir(parents=True, exist_ok=True)
    if isinstance(source, dict):
        cfg = work / "config.yaml"
        cfg.write_text(yaml.safe_dump(source, sort_keys=False))
        source = str(cfg)
    out = work / "run"
    args = ["run", source, "--quiet", "--out", str(out)]
    for o in overrides:
        args += ["--set", o]
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(args)
    if rc != 0:
        raise SystemExit(f"turnout {' '.join(args)} exited {rc}")
    return {name: _sha(out / name) for name in ("rounds.csv", "clients.csv")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="record the hashes")
    mode.add_argument("--check", action="store_true", help="compare with the recorded hashes")
    p.add_argument("--only", default="", help="comma-separated substrings of case names to run")
    args = p.parse_args(argv)
    want = [s for s in args.only.split(",") if s]
    todo = {k: v for k, v in cases().items() if not want or any(w in k for w in want)}
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    results, bad = {}, []
    with tempfile.TemporaryDirectory(prefix="turnout-golden-") as tmp:
        for i, (name, (source, overrides)) in enumerate(todo.items()):
            got = run_case(source, overrides, Path(tmp) / str(i))
            results[name] = got
            if args.check:
                ok = golden.get(name) == got
                if not ok:
                    bad.append(name)
                print(f"{'ok  ' if ok else 'DIFF'} {name}", flush=True)
            else:
                print(f"{name}: {got['rounds.csv'][:12]} {got['clients.csv'][:12]}", flush=True)
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        merged = {**golden, **results} if want else results
        GOLDEN.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
        print(f"wrote {len(results)} cases to {GOLDEN.relative_to(ROOT)}")
        return 0
    print(f"{len(todo) - len(bad)} of {len(todo)} cases identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
