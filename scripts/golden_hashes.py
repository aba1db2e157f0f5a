"""Record (or check) sha256 of rounds.csv and clients.csv over a fixed set of short runs.

A refactor must keep every number turnout produces bit-identical. This script runs, through the
command line, every experiment file in ``experiments/`` shortened (``rounds=10``, seed 0), every
setting ``scripts/reproduce.sh`` passes on top of them, and the seam matrix (every availability ×
selector pair and a covering array over round mode × selector × compressor × algorithm) on a
tiny synthetic problem, and hashes each run's ``rounds.csv`` and ``clients.csv``.

    python scripts/golden_hashes.py --write            # record tests/golden/hashes.json
    python scripts/golden_hashes.py --check            # re-run everything, compare, exit 1 on a difference
    python scripts/golden_hashes.py --check --only quickstart,refl   # a subset (substring match)

Two levels of sameness (``docs/determinism.md``). Where this machine's environment fingerprint (package
versions, the kernels' names and the *measured* float fingerprint, ``turnout.core.environment.fingerprint``;
``tests/golden/environment.json``) is the one the hashes were recorded with, every table must be byte-identical.
Elsewhere (another CPU, or one emulated: ``scripts/emulate_cpu.py``) a table whose hash differs is compared with
the recorded table (``tests/golden/tables.json.gz``): integers, strings, booleans and empty cells exactly, floats
within a relative tolerance of ``REL_TOL`` (absolute ``ABS_TOL`` near zero). ``--write`` records all three (with
``--only``/``--names``: those cases' hashes and tables, merged into the records of the same environment).

``tests/test_golden_hashes.py`` re-checks a handful of cases in the default suite.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import hashlib
import io
import itertools
import json
import sys
import tempfile
from pathlib import Path

import yaml

from turnout.core.environment import CROSS_CPU_ATOL, CROSS_CPU_RTOL, agree_across_cpus, parse_cell

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "hashes.json"
TABLES = ROOT / "tests" / "golden" / "tables.json.gz"
ENVIRONMENT = ROOT / "tests" / "golden" / "environment.json"
FILES = ("rounds.csv", "clients.csv")
#: Tolerance across CPUs (docs/determinism.md, where the measured drift that justifies it is): another CPU's
#: kernels change a float's last bits and training carries them through the golden runs' rounds; every change of
#: behaviour tests/test_sharp_checks.py plants moves some float by far more. The pages' check uses the same.
REL_TOL, ABS_TOL = CROSS_CPU_RTOL, CROSS_CPU_ATOL
SHORT = ["rounds=10", "seeds=[0]", "output.plots=false", "output.progress=false",
         "eval.centralized_baseline=false"]

#: settings `turnout reproduce` runs on top of an experiment file (name → extra --set values; turnout/pages/)
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

#: Each case's measured horizon (``--measure-horizons``): run at full length natively and under every emulated CPU
#: family (turnout.core.emulation), its rounds.csv compared row by row, and cut one round before the first float that
#: leaves a tenth of the tolerance (turnout.app.reproduce.horizon); a case whose floats cannot hold two rounds is
#: compared across CPUs in its integers only, and one whose integers differ already in round 0 (a top-k mask that
#: another CPU's last bit reorders) is byte-checked where it was recorded and named "not comparable" elsewhere. A case
#: is never recorded past its own horizon.
HORIZONS = ROOT / "tests" / "golden" / "horizons.json"
#: the families a horizon is measured under, besides the native run
FAMILY_NAMES = ("torch-avx2", "torch-default", "openblas", "vendor")


def horizons() -> dict[str, dict]:
    """case → its measured cut (``rounds``, ``integers_only``, ``horizons`` per family, ...); refuses a cut past its
    own measured horizon."""
    if not HORIZONS.exists():
        return {}
    recorded = json.loads(HORIZONS.read_text())
    for name, h in recorded.items():
        limit = h["integer_horizon"] if h["integers_only"] else h["horizon"]
        if h["rounds"] > limit or h["rounds"] < 0:
            raise SystemExit(f"{HORIZONS.name}: {name} runs {h['rounds']} rounds, past its measured horizon of "
                             f"{limit} under {', '.join(FAMILY_NAMES)}; keep at most {limit}")
    return recorded


#: the cases the default suite re-checks (tests/test_golden_hashes.py; under an emulated other CPU too:
#: tests/test_emulated_cpu.py); ``--handful`` runs just these
HANDFUL = ["exp:quickstart.yaml", "exp:refl/fashion_mnist.yaml[DL-IID]", "exp:fedsum/cases.yaml",
           "exp:adaptive_ou/synthetic.yaml",
           "matrix:round_mode=deadline,selector=oort,compressor=gluefl,algorithm=stale_aware",
           "matrix:round_mode=over_commit,selector=sticky,compressor=gluefl,algorithm=fedyogi",
           "matrix:availability=trace,selector=refl_ips", "matrix:availability=ln,selector=fedgs",
           "matrix:availability=p2_bernoulli,selector=oort"]

#: more settings of an experiment file: the ones tests/test_sharp_checks.py plants defects in
SHARP = {"quickstart.yaml": {"momentum-0.9": ["algorithm.server_momentum=0.9"]}}

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


def _runs(regs, t: tuple[str, ...]) -> bool:
    """Whether (round mode, selector, compressor, algorithm) is a combination validation accepts."""
    rm, sel, comp, algo = t
    if not _compatible(regs, comp, algo):
        return False
    if not getattr(regs["round_mode"].get(rm), "asynchronous", False):
        return True
    s = regs["selector"].get(sel)
    return not s.cannot_fill_slots(s.Config(**_block("selector", sel, with_name=False))) \
        and not regs["algorithm"].get(algo).cohort_bound


#: the components of each seam the seam matrix's first covering array was recorded with; components registered
#: later are covered by a second array (every pair that involves one of them), so that registering a component
#: adds golden cases and changes none
MATRIX_RECORDED = {
    "round_mode": ("deadline", "over_commit", "wait_all"),
    "selector": ("cyclic", "fedgs", "md", "oort", "power_of_choice", "refl_ips", "reshuffled_cyclic", "safa", "sticky",
                 "uniform"),
    "compressor": ("apf", "gluefl", "none", "quant8", "stc", "topk"),
    "algorithm": ("adaptive_ou", "fedadam", "fedau", "fedavg", "fedawe", "fedprox", "fedsum", "fedsum_b", "fedsum_cr",
                  "fedvarp", "fedyogi", "mifa", "safa", "scaffold", "stale_aware")}
MATRIX_SEAMS = ("round_mode", "selector", "compressor", "algorithm")


def _greedy(combos: list[tuple[str, ...]], uncovered: set) -> list[tuple[str, ...]]:
    out = []
    while uncovered:
        i, a, j, b = min(uncovered)
        best = max((t for t in combos if t[i] == a and t[j] == b),
                   key=lambda t: sum((p, t[p], q, t[q]) in uncovered for p, q in itertools.combinations(range(4), 2)))
        out.append(best)
        uncovered -= {(p, best[p], q, best[q]) for p, q in itertools.combinations(range(4), 2)}
    return out


def _covering(regs) -> list[tuple[str, ...]]:
    """Every pair of values of any two of (round mode, selector, compressor, algorithm) in some tuple: first over
    the components of :data:`MATRIX_RECORDED`, then every pair that involves a component registered since."""
    pairs = list(itertools.combinations(range(4), 2))
    old = [MATRIX_RECORDED[s] for s in MATRIX_SEAMS]
    combos = [t for t in itertools.product(*old) if _compatible(regs, t[2], t[3])]
    out = _greedy(combos, {(i, t[i], j, t[j]) for t in combos for i, j in pairs})
    now = [regs[s].names() for s in MATRIX_SEAMS]
    combos = [t for t in itertools.product(*now) if _runs(regs, t)]
    new = {(i, t[i], j, t[j]) for t in combos for i, j in pairs if t[i] not in old[i] or t[j] not in old[j]}
    return out + _greedy(combos, new)


def _block(seam: str, name: str, with_name: bool = True) -> dict:
    extra = MATRIX_OPTIONS.get(seam, {}).get(name, {})
    head = {"name": name} if with_name else {}
    if seam == "selector":
        return {**head, "clients_per_round": K, **extra}
    return {**head, **extra}


#: experiment folders whose files need downloaded data or a GPU (experiments/gpu: scripts/gpu_pages.sh): validated by
#: `turnout check`, never run here
NEEDS_DATA = ("hub", "gpu")


def cases(full_length: bool = False) -> dict[str, tuple[str | dict, list[str]]]:
    """name → (experiment file or raw config, --set overrides); ``full_length``: before any horizon's cut."""
    out: dict[str, tuple[str | dict, list[str]]] = {}
    for path in sorted((ROOT / "experiments").rglob("*.yaml")):
        rel = path.relative_to(ROOT / "experiments").as_posix()
        if rel.split("/")[0] in NEEDS_DATA:
            continue
        out[f"exp:{rel}"] = (str(path), list(SHORT))
        for setting, extra in {**REPRODUCE.get(rel, {}), **SHARP.get(rel, {})}.items():
            out[f"exp:{rel}[{setting}]"] = (str(path), SHORT + extra)
    regs = _registries()
    for av, sel in itertools.product(regs["availability"].names(), regs["selector"].names()):
        raw = dict(MATRIX_BASE, availability=_block("availability", av), selector=_block("selector", sel))
        out[f"matrix:availability={av},selector={sel}"] = (raw, [])
    for rm, sel, comp, algo in _covering(regs):
        raw = dict(MATRIX_BASE, round_mode=_block("round_mode", rm), selector=_block("selector", sel),
                   compressor=_block("compressor", comp), algorithm=_block("algorithm", algo))
        out[f"matrix:round_mode={rm},selector={sel},compressor={comp},algorithm={algo}"] = (raw, [])
    for name, cut in ({} if full_length else horizons()).items():
        rounds = cut["rounds"]
        if name in out and 0 < rounds < cut["asked"]:  # 0: not comparable across CPUs, kept whole (below)
            source, overrides = out[name]
            out[name] = ((dict(source, rounds=rounds), overrides) if isinstance(source, dict)
                         else (source, [*overrides, f"rounds={rounds}"]))
    return out


def run_case(source: str | dict, overrides: list[str], work: Path) -> dict[str, str]:
    """Run one case through the CLI in this process; sha256 of its rounds.csv and clients.csv."""
    return {name: _sha_text(text) for name, text in run_case_tables(source, overrides, work).items()}


def _sha_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def run_case_tables(source: str | dict, overrides: list[str], work: Path) -> dict[str, str]:
    """Run one case through the CLI in this process; the text of its rounds.csv and clients.csv."""
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
    return {name: (out / name).read_bytes().decode() for name in FILES}


def _cell_differs(want: str, got: str, integers_only: bool = False) -> bool:
    if want == got:
        return False
    a, b = parse_cell(want), parse_cell(got)
    if integers_only and isinstance(a, float) and isinstance(b, float):
        return False  # a case whose floats drift within two rounds on another CPU: its integers are what holds
    return not agree_across_cpus(a, b)


def table_differences(want: str, got: str, limit: int = 3, integers_only: bool = False) -> list[str]:
    """Where table ``got`` differs from ``want`` beyond the tolerance (empty: the same within it)."""
    a, b = list(csv.reader(io.StringIO(want))), list(csv.reader(io.StringIO(got)))
    if not a or not b or a[0] != b[0]:
        return ["the columns differ"]
    if len(a) != len(b):
        return [f"{len(b) - 1} rows, {len(a) - 1} recorded"]
    out = []
    for i, (ra, rb) in enumerate(zip(a[1:], b[1:]), start=1):
        for col, x, y in zip(a[0], ra, rb):
            if len(ra) != len(rb) or _cell_differs(x, y, integers_only):
                out.append(f"row {i} {col}: {y!r}, recorded {x!r}")
                if len(out) >= limit:
                    return out
    return out


def environment() -> dict[str, str]:
    """This process's environment fingerprint (turnout.core.environment.fingerprint)."""
    from turnout.core.environment import fingerprint

    return fingerprint()


def recorded_environment() -> dict[str, str]:
    return json.loads(ENVIRONMENT.read_text()) if ENVIRONMENT.exists() else {}


def recorded_tables() -> dict[str, dict[str, str]]:
    if not TABLES.exists():
        return {}
    return json.loads(gzip.decompress(TABLES.read_bytes()).decode())


def compare(name: str, tables: dict[str, str], hashes: dict[str, dict[str, str]],
            recorded: dict[str, dict[str, str]], same_environment: bool) -> tuple[str, list[str]]:
    """(``"identical"`` | ``"within tolerance"`` | ``"DIFF"``, problems) of one case against the records."""
    got = {f: _sha_text(t) for f, t in tables.items()}
    if hashes.get(name) == got:
        return "identical", []
    if same_environment:
        return "DIFF", ["not byte-identical in the environment the hashes were recorded in"]
    if name not in recorded:
        return "DIFF", ["no recorded table to compare within tolerance"]
    cut = horizons().get(name, {})
    if cut.get("rounds") == 0:  # even its integers differ in round 0 under some emulated CPU family
        return "not comparable", [f"across CPUs: {'; '.join(cut['first_drift'].values())}"]
    integers_only = cut.get("integers_only", False)
    problems = [f"{f}: {p}" for f in FILES
                for p in table_differences(recorded[name][f], tables[f], integers_only=integers_only)]
    return ("DIFF" if problems else "within tolerance"), problems


def _asked(rounds_csv: str) -> int:
    """The rounds a full-length case ran: its last round + 1."""
    rows = list(csv.reader(io.StringIO(rounds_csv)))
    col = rows[0].index("round")
    return max(int(r[col]) for r in rows[1:]) + 1 if len(rows) > 1 else 0


def measure_horizons(dumps: dict[str, dict[str, dict[str, str]]]) -> dict[str, dict]:
    """Each case's cut from its full-length tables per environment (``native`` and every family)."""
    from turnout.app.reproduce.horizon import cut

    out = {}
    for name, files in dumps["native"].items():
        out[name] = cut(_asked(files["rounds.csv"]), {env: d[name]["rounds.csv"] for env, d in dumps.items()}
                        ).as_record()
    return out


def dump_under(family: str, only: list[str], names: Path | None, out: Path) -> dict:
    """Run the chosen cases at full length in a child process whose kernels are ``family``'s (or native)."""
    import os
    import subprocess

    from turnout.core.emulation import family_environment

    env = {**os.environ, **({} if family == "native" else family_environment(family))}
    cmd = [sys.executable, __file__, "--dump", str(out), "--full-length"]
    cmd += ["--only", ",".join(only)] if only else []
    cmd += ["--names", str(names)] if names else []
    subprocess.run(cmd, check=True, env=env)
    return json.loads(gzip.decompress(out.read_bytes()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="record the hashes, tables and environment")
    mode.add_argument("--check", action="store_true", help="compare with the recorded hashes (tables elsewhere)")
    p.add_argument("--only", default="", help="comma-separated substrings of case names to run")
    p.add_argument("--names", type=Path, default=None, help="a file of exact case names to run, one a line")
    p.add_argument("--handful", action="store_true", help="run the handful of cases the default suite re-checks")
    p.add_argument("--save-tables", type=Path, default=None,
                   help="with --check: also write the tables this run made (as --dump does), for "
                        "scripts/cpu_divergence.py --compare")
    mode.add_argument("--measure-horizons", action="store_true",
                      help="run the cases at full length natively and under every emulated CPU family and record "
                           "each case's horizon in tests/golden/horizons.json (with --only/--names: merged)")
    p.add_argument("--from-dumps", type=Path, default=None,
                   help="with --measure-horizons: read golden-ENV.json.gz dumps (--dump --full-length, ENV native "
                        "or a family) from this folder instead of running them")
    mode.add_argument("--dump", type=Path, default=None,
                      help="only run the cases and write their tables (case → file → text) to this gzipped JSON "
                           "file (scripts/cpu_divergence.py compares such dumps across emulated CPUs)")
    p.add_argument("--full-length", action="store_true",
                   help="run every case at its full length (10 rounds; seam matrix 6), before its horizon's cut")
    p.add_argument("--set", dest="extra", action="append", default=[],
                   help="an override added to every case (with --dump: e.g. rounds=20 to measure divergence)")
    args = p.parse_args(argv)
    want = [s for s in args.only.split(",") if s]
    exact = set(args.names.read_text().split("\n")) - {""} if args.names else set()
    exact |= set(HANDFUL) if args.handful else set()
    want += sorted(exact)
    todo = {k: (source, [*overrides, *args.extra]) for k, (source, overrides) in cases(args.full_length).items()
            if not want or k in exact or any(w in k for w in want[:len(want) - len(exact)])}
    if args.extra and not args.dump:
        raise SystemExit("--set changes the cases: use it with --dump only")
    if args.measure_horizons:
        envs = ("native", *FAMILY_NAMES)
        if args.from_dumps:
            dumps = {e: json.loads(gzip.decompress((args.from_dumps / f"golden-{e}.json.gz").read_bytes()))
                     for e in envs}
            dumps = {e: {k: v for k, v in d.items() if k in todo} for e, d in dumps.items()}
        else:
            with tempfile.TemporaryDirectory(prefix="turnout-horizons-") as tmp:
                dumps = {e: dump_under(e, want[:len(want) - len(exact)], args.names, Path(tmp) / f"{e}.json.gz")
                         for e in envs}
        measured = measure_horizons(dumps)
        merged = {**(json.loads(HORIZONS.read_text()) if HORIZONS.exists() and want else {}), **measured}
        HORIZONS.write_text(json.dumps(dict(sorted(merged.items())), indent=1, sort_keys=True) + "\n")
        cut_cases = {k: v for k, v in measured.items() if v["rounds"] < v["asked"]}
        for k, v in cut_cases.items():
            print(f"{k}: {v['rounds']} of {v['asked']} rounds" + (" (integers only)" if v["integers_only"] else "")
                  + f"  first drift: {'; '.join(v['first_drift'].values())}")
        print(f"measured {len(measured)} cases: {len(measured) - len(cut_cases)} hold every round under every family, "
              f"{len(cut_cases)} cut ({sum(v['integers_only'] for v in measured.values())} integers only); wrote "
              f"{HORIZONS.relative_to(ROOT)}")
        return 0
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    tables_before = recorded_tables()
    env, env_before = environment(), recorded_environment()
    same_env = env == env_before
    if args.check and not same_env:
        changed = ", ".join(f"{k} {env_before.get(k)} → {v}" for k, v in env.items() if env_before.get(k) != v)
        print(f"environment differs from the recording ({changed}): tables that are not byte-identical are "
              f"compared within relative {REL_TOL:g}", flush=True)
    results, tables, bad = {}, {}, []
    counts = {"identical": 0, "within tolerance": 0, "not comparable": 0, "DIFF": 0}
    with tempfile.TemporaryDirectory(prefix="turnout-golden-") as tmp:
        for i, (name, (source, overrides)) in enumerate(todo.items()):
            got = run_case_tables(source, overrides, Path(tmp) / str(i))
            tables[name] = got
            results[name] = {f: _sha_text(t) for f, t in got.items()}
            if args.check:
                verdict, problems = compare(name, got, golden, tables_before, same_env)
                counts[verdict] += 1
                if verdict == "DIFF":
                    bad.append(name)
                tag = {"identical": "ok  ", "within tolerance": "~ok ", "not comparable": "n/a "}.get(verdict, "DIFF")
                print(f"{tag} {name}" + (f"  ({'; '.join(problems)})" if problems else ""), flush=True)
            else:
                print(f"{name}: {results[name]['rounds.csv'][:12]} {results[name]['clients.csv'][:12]}", flush=True)
    if args.dump or args.save_tables:
        (args.dump or args.save_tables).write_bytes(gzip.compress(json.dumps(tables, sort_keys=True).encode(), mtime=0))
    if args.dump:
        return 0
    if args.write:
        if want and env_before and not same_env:
            raise SystemExit("--only adds to records made in another environment; record every case (no --only)")
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        merged = {**golden, **results} if want else results
        merged_tables = {**tables_before, **tables} if want else tables
        GOLDEN.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
        TABLES.write_bytes(gzip.compress(json.dumps(dict(sorted(merged_tables.items())), sort_keys=True).encode(),
                                         mtime=0))
        ENVIRONMENT.write_text(json.dumps(env, indent=1) + "\n")
        print(f"wrote {len(results)} cases to {GOLDEN.relative_to(ROOT)} and {TABLES.relative_to(ROOT)}")
        return 0
    print(f"{len(todo) - len(bad) - counts['not comparable']} of {len(todo)} cases identical or within tolerance "
          f"({counts['identical']} byte-identical, {counts['within tolerance']} within relative {REL_TOL:g}, "
          f"{counts['not comparable']} not comparable across CPUs, {counts['DIFF']} differ)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
