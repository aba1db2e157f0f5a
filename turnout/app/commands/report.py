"""``turnout report FOLDER... --out PAGE.md``: a markdown results page (tables + curves) from finished
run folders (the page itself: :mod:`turnout.app.report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...core.errors import ConfigError


def add_parser(sub) -> None:
    rep = sub.add_parser("report", help="a markdown results page (tables + curves) from finished run folders")
    rep.add_argument("folders", nargs="+", type=Path, help="run folders; each becomes a column, named by its folder")
    rep.add_argument("--out", type=Path, required=True, help="markdown file to write (plot goes in OUT_STEM/)")
    rep.add_argument("--metric", dest="metrics", action="append", default=None,
                     help="summary column to tabulate (repeatable; default: best_loss and final_accuracy)")
    rep.add_argument("--title", default="Results", help="page title")
    rep.add_argument("--command", dest="regen_command", default=None,
                     help="the command that regenerates the page (printed on it)")
    rep.add_argument("--elapsed-s", type=float, default=None, help="wall-clock seconds the runs took")
    rep.add_argument("--notes", type=Path, default=None, help="a markdown file inserted above the tables")
    rep.add_argument("--percent-of", default=None, metavar="VARIANT",
                     help="also show byte metrics as a percentage of this variant's (e.g. the full-upload baseline)")
    rep.add_argument("--curve", default="loss", help="rounds.csv column plotted against rounds ('' for none)")
    rep.add_argument("--curve-x", action="append", default=None, metavar="COLUMN",
                     help="x axis of the curve (repeatable, one figure each): round (default) or a rounds.csv column "
                          "such as cum_bytes_down, cum_resource_s, or a sum like cum_bytes_up+cum_bytes_down")
    rep.add_argument("--provenance", action="append", default=None, metavar="KEY=VALUE",
                     help="a fact printed on the page, e.g. commit=abc123 or 'config hash=...' (repeatable)")
    rep.add_argument("--counts", action="append", default=None, metavar="SETTING",
                     help="also draw per-client selection counts for this run folder's name (repeatable)")
    rep.add_argument("--baseline", default=None, metavar="VARIANT",
                     help="variant the paired per-seed differences are taken from (default: the first variant)")
    rep.add_argument("--paired", action="append", default=None, metavar="METRIC",
                     help="summary column to give paired differences for (repeatable; default: final accuracy and "
                          "rounds/time/bytes to target, where tabulated)")
    rep.add_argument("--target", default="config", metavar="RULE",
                     help="what the *_to_target metrics count to: config (default: each variant's "
                          "eval.target_accuracy) or reached_by_all (GlueFL's: per setting and seed, the highest "
                          "5-round-averaged accuracy every variant reached, recounted from the rounds tables)")


def run(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...core.metrics import SUMMARY_KEYS
    from ..report import write_report
    from ..report.targets import check_target

    check_target(args.target)
    metrics = args.metrics or ["best_loss", "final_accuracy"]
    for flag, chosen in (("--metric", metrics), ("--paired", args.paired or [])):
        for m in chosen:
            if m not in SUMMARY_KEYS:
                raise ConfigError(flag, m, f"choose from: {', '.join(SUMMARY_KEYS)}")
    notes = None
    if args.notes is not None:
        if not args.notes.is_file():
            raise ConfigError("--notes", str(args.notes), "no such file")
        notes = args.notes.read_text()
    provenance = {}
    for item in args.provenance or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("--provenance", item, "expected KEY=VALUE")
        provenance[key] = value
    out = write_report(args.folders, args.out, metrics, args.title, args.regen_command, args.elapsed_s,
                       args.curve or None, notes, args.percent_of, args.counts, args.baseline, args.paired,
                       args.curve_x, provenance, args.target)
    print(f"wrote {out}")
    return 0
