"""The ``turnout`` command line: ``run`` an experiment, ``list`` the registered components.

User mistakes (bad config, missing data, bad arguments) print one line to stderr and exit with
code 2 — never a traceback — and leave no run folder behind.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import TurnoutError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        self.exit(EXIT_USAGE, f"turnout: error: {message} (see `turnout {self.prog.split()[-1]} --help`)\n"
                  if " " in self.prog else f"turnout: error: {message} (see `turnout --help`)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="turnout", description="Federated-learning simulation under realistic client participation.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run an experiment (all variants × seeds) and write a run folder")
    run.add_argument("config", help="experiment YAML file")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. --set selector.clients_per_round=20 (repeatable)")
    run.add_argument("--out", type=Path, default=None, help="run folder (default: runs/<name>-<timestamp>)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    sub.add_parser("list", help="list every registered component per seam")
    return p


def cmd_list() -> int:
    from .config.loader import seam_registries
    from .data.registry import PARTITIONERS
    from .registry import describe

    regs = dict(seam_registries())
    regs["data.partition"] = PARTITIONERS
    for seam, reg in regs.items():
        print(f"{seam}  ({reg.doc})")
        for name, cls in reg:
            print(f"  {name:<22} {describe(cls)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .config.loader import load_experiment
    from .experiment import check_out_dir, default_out_dir, prepare, run_plan
    from .progress import ProgressBar

    variants = load_experiment(args.config, args.overrides)
    out = args.out or default_out_dir(variants[0].config.name)
    check_out_dir(out)  # a taken --out fails before datasets are built, not after
    plan = prepare(variants)
    quiet = args.quiet or not variants[0].config.output.progress
    with ProgressBar(plan.total_rounds, disable=quiet) as bar:
        summary = run_plan(plan, out, progress=bar.update)
    for row in summary["variants"]:
        acc = row["final_accuracy"]
        print(f"{row['variant']:<24} final accuracy {acc:.4f}  bytes down {row['bytes_down']:.3g}"
              f"  bytes up {row['bytes_up']:.3g}  sim time {row['sim_time_s']:.1f}s"
              + (f"  centralized {row['centralized_accuracy']:.4f}"
                 if row.get("centralized_accuracy") == row.get("centralized_accuracy")
                 and row.get("centralized_accuracy") is not None else ""))
    print(f"run folder: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            return cmd_list()
        return cmd_run(args)
    except TurnoutError as exc:
        print(f"turnout: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("turnout: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
