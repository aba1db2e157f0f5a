"""``turnout reproduce``: list, make, check and re-render the seed papers' results pages.

    turnout reproduce --list                       # the pages, their settings and their slices
    turnout reproduce PAGE...                      # run every setting of PAGE, write the page and its record
    turnout reproduce --resume PAGE...             # continue a page an interruption (Ctrl-C, SIGTERM) stopped
    turnout reproduce --check PAGE... | all        # re-run each page's check slice (seconds) and compare
    turnout reproduce --check --full PAGE          # re-run the whole page and compare every table
    turnout reproduce --record-slice PAGE... | all # measure a page's slice again: horizons and numbers
    turnout reproduce --report PAGE                # write the page again from runs/reproduce/PAGE
    turnout reproduce --docs                       # rewrite the docs' claim counts and horizon tables
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from ...core.errors import ConfigError


def add_parser(sub) -> None:
    rp = sub.add_parser("reproduce", help="run, check or list the seed papers' results pages (docs/results)",
                        description=__doc__.splitlines()[0])
    rp.add_argument("pages", nargs="*", metavar="PAGE", help="page names (`--list` shows them); `all` with --check "
                                                             "or --record-slice")
    mode = rp.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="list the pages, their settings and check slices")
    mode.add_argument("--check", action="store_true", help="re-run each page's check slice and compare")
    mode.add_argument("--record-slice", action="store_true",
                      help="measure each page's check slice again (horizons under every emulated CPU, numbers) "
                           "without re-running the page")
    mode.add_argument("--rehash", action="store_true",
                      help="accept a page's new config hash when its slice still gives the record's numbers bit for "
                           "bit on the recording CPU (a new default that changes nothing)")
    mode.add_argument("--resume", action="store_true",
                      help="continue a page an interruption stopped: finished settings are kept, an interrupted one "
                           "continues from its checkpoints (the configs must be unchanged)")
    mode.add_argument("--report", action="store_true", help="write the page again from its run folders")
    mode.add_argument("--docs", action="store_true",
                      help="in a checkout: rewrite the docs' computed tables (claim counts, horizons) from the records")
    rp.add_argument("--full", action="store_true", help="with --check: re-run the whole page, compare every table")
    rp.add_argument("--slice-rounds", type=int, default=None, metavar="N",
                    help="with --record-slice: keep N rounds instead of the measured cut (refused past the horizon)")
    rp.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", "2")),
                    help="worker processes (default 2, or $JOBS); results do not depend on it")
    rp.add_argument("--out", type=Path, default=None,
                    help="folder for the pages (default: docs/results in a checkout, else ./reproduce)")
    rp.add_argument("--runs", type=Path, default=None, help="folder for the run folders (default runs/reproduce)")


def _names(args, allow_all: bool) -> list[str]:
    from .spec import names  # imported here (as below): `turnout --help` loads none of the pages' modules

    known = names()
    if allow_all and args.pages == ["all"]:
        return known
    if not args.pages:
        raise ConfigError("PAGE", "", f"name one or more pages{' (or all)' if allow_all else ''}: "
                                      f"{', '.join(known)}")
    unknown = [n for n in args.pages if n not in known]
    if unknown:
        raise ConfigError("PAGE", unknown[0], f"no such results page; the pages are: {', '.join(known)}")
    return args.pages


def run(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ConfigError("--jobs", args.jobs, "give at least 1 worker process")
    if args.full and not args.check:
        raise ConfigError("--full", True, "goes with --check")
    if args.slice_rounds is not None and (not args.record_slice or args.slice_rounds < 1):
        raise ConfigError("--slice-rounds", args.slice_rounds, "goes with --record-slice and is at least 1")
    if args.list:
        return _list()
    if args.docs:
        return _docs()
    if args.check:
        return _check(_names(args, True), args)
    names = _names(args, args.record_slice or args.rehash)
    out = (lambda n: args.out / f"{n}.md") if args.out else (lambda n: None)
    runs = (lambda n: args.runs / n) if args.runs else (lambda n: None)
    from . import make  # imported here: it loads the report's plotting

    for n in names:
        if args.record_slice:
            sl = make.record_slice(n, args.jobs, args.slice_rounds, out(n))["slice"]
            print(f"{n}: {sl['rounds']} of {sl['asked_rounds']} rounds kept"
                  + (" (integers only)" if sl["integers_only"] else "") + f"; horizons {sl['horizons']}", flush=True)
        elif args.rehash:
            print(make.rehash(n), flush=True)
        elif args.report:
            print(f"wrote {make.report(n, runs(n), out(n))}")
        else:
            make.make(n, args.jobs, runs(n), out(n), resume=args.resume)
    return 0


def _docs() -> int:
    # imported here: the docs' tables and the report's plotting load only for this command
    from . import docs
    from .make import checkout

    root = checkout()
    if root is None:
        raise ConfigError("--docs", True, "rewrites a checkout's docs; run it in a clone of turnout")
    changed = docs.update(root)
    print(f"rewrote {', '.join(changed)}" if changed else "the docs' computed tables are current")
    return 0


def _list() -> int:
    # imported here: listing reads the pages, nothing else
    from . import record
    from .spec import load, names

    for n in names():
        page, rec = load(n), record.read(n)
        sl = rec["slice"] if rec else None
        kept = (f"{sl['rounds']} of {sl['asked_rounds']} rounds" + (", integers only" if sl["integers_only"] else "")
                ) if sl and "horizons" in sl else ("no measured horizon" if rec else "no record")
        print(f"{n}: {page.title}")
        print(f"    settings: {'; '.join(s.name for s in page.settings)}")
        print(f"    check slice: {page.slice.setting}, {kept}")
    return 0


def _check(names: list[str], args) -> int:
    from .check import check_all, tolerance_line  # imported here: checking resolves configs (every registry)

    t0 = time.time()
    if args.full:
        from .make import check_full  # imported here: it loads the report's plotting

        bad = 0
        for n in names:
            diff = check_full(n, args.jobs)
            bad += bool(diff)
            print(f"STALE {n}:\n  " + "\n  ".join(diff) if diff else f"ok    {n} (every table line)", flush=True)
        return 1 if bad else 0
    verdicts = check_all(names, args.out, args.jobs)  # args.out: the records of pages made with --out
    for v in verdicts:
        print(v.line(), flush=True)
    counts = {s: sum(v.status == s for v in verdicts) for s in ("ok", "STALE", "not checked")}
    numbers = sum(v.compared for v in verdicts)
    print(f"{counts['ok']} of {len(names)} pages match the code, {counts['STALE']} stale, {counts['not checked']} not "
          f"checked; {numbers} numbers compared ({tolerance_line()}; {time.time() - t0:.1f} s)")
    return 1 if counts["STALE"] else 0
