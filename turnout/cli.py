"""The ``turnout`` command line: ``run`` an experiment, ``list`` the registered components.

User mistakes (bad config, missing data, bad arguments) print one line to stderr and exit with
code 2 — never a traceback — and leave no run folder behind.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import ConfigError, TurnoutError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        self.exit(EXIT_USAGE, f"turnout: error: {message} (see `turnout {' '.join(self.prog.split()[1:])} --help`)\n"
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
    ls = sub.add_parser("list", help="list every registered component per seam (with a seam: their options)")
    ls.add_argument("seam", nargs="?", default=None,
                    help="show the options of this seam's components (e.g. compressor, selector.sticky)")
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
    rep.add_argument("--counts", action="append", default=None, metavar="SETTING",
                     help="also draw per-client selection counts for this run folder's name (repeatable)")
    _add_trace_parser(sub)
    _add_plot_parser(sub)
    return p


def cmd_report(args: argparse.Namespace) -> int:
    from .metrics import SUMMARY_KEYS
    from .report import write_report

    metrics = args.metrics or ["best_loss", "final_accuracy"]
    for m in metrics:
        if m not in SUMMARY_KEYS:
            raise ConfigError("--metric", m, f"choose from: {', '.join(SUMMARY_KEYS)}")
    notes = None
    if args.notes is not None:
        if not args.notes.is_file():
            raise ConfigError("--notes", str(args.notes), "no such file")
        notes = args.notes.read_text()
    out = write_report(args.folders, args.out, metrics, args.title, args.regen_command, args.elapsed_s,
                       args.curve or None, notes, args.percent_of, args.counts)
    print(f"wrote {out}")
    return 0


def _add_trace_parser(sub) -> None:
    trace = sub.add_parser("trace", help="convert or generate client system traces")
    tsub = trace.add_subparsers(dest="trace_command", required=True, parser_class=_Parser)
    imp = tsub.add_parser("import", help="convert a FedScale pickle once into turnout's safe format")
    imp.add_argument("file", type=Path, help="FedScale client_behave_trace or client_device_capacity pickle")
    imp.add_argument("--out", type=Path, required=True,
                     help="output: .npz availability trace (behavior) or .csv device profiles (capacity)")
    imp.add_argument("--kind", choices=("behavior", "capacity"), default="behavior",
                     help="which FedScale file it is (default: behavior)")
    imp.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    gen = tsub.add_parser("generate", help="generate a FedScale-schema synthetic availability trace")
    gen.add_argument("--clients", type=int, required=True, help="number of client traces")
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument("--out", type=Path, required=True, help="output .npz trace")
    gen.add_argument("--days", type=int, default=6, help="trace period in days (default 6, FedScale's)")
    gen.add_argument("--calibration", default=None, metavar="FILE",
                     help="Stunner onlinePercentDist.out to calibrate to (default: built-in summary)")
    gen.add_argument("--force", action="store_true", help="overwrite --out if it exists")


def _add_plot_parser(sub) -> None:
    plot = sub.add_parser("plot", help="draw a picture of part of the simulated world")
    psub = plot.add_subparsers(dest="plot_command", required=True, parser_class=_Parser)
    av = psub.add_parser("availability", help="clients × rounds on/off picture of CONFIG's availability model")
    av.add_argument("config", help="experiment YAML file (its data and availability blocks are used)")
    av.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value (repeatable)")
    av.add_argument("--out", type=Path, required=True, help="PNG file to write")
    av.add_argument("--rounds", type=int, default=100, help="rounds to draw (default 100)")
    av.add_argument("--clients", type=int, default=100, help="clients to draw, the first ones (default 100)")
    av.add_argument("--round-seconds", type=float, default=3600.0,
                    help="simulated seconds between rounds, for time-driven models such as traces (default 3600)")
    av.add_argument("--force", action="store_true", help="overwrite --out if it exists")


def cmd_plot(args: argparse.Namespace) -> int:
    from .composition import load_experiment
    from .config.limits import MAX_CLIENTS, MAX_ROUNDS, MAX_SECONDS
    from .experiment import prepare
    from .plots import availability_gallery

    for name, most in (("rounds", MAX_ROUNDS), ("clients", MAX_CLIENTS)):
        if not 1 <= getattr(args, name) <= most:
            raise ConfigError(f"--{name}", getattr(args, name), f"must be between 1 and {most:,}")
    if not 0 < args.round_seconds <= MAX_SECONDS:
        raise ConfigError("--round-seconds", args.round_seconds, f"must be > 0 and <= {MAX_SECONDS:g}")
    if args.out.suffix.lower() != ".png":
        raise ConfigError("--out", str(args.out), "must be a .png file")
    _check_out(args.out, args.force)
    exp = load_experiment(args.config, args.overrides)[0]
    seed = exp.config.seeds[0]
    data = prepare([exp]).dataset_for(exp, seed)
    availability_gallery(exp, data, seed, args.rounds, args.round_seconds, args.clients, args.out)
    print(f"wrote {args.out}")
    return 0


def _check_out(out: Path, force: bool) -> None:
    from .errors import ConfigError

    if out.exists() and not force:
        raise ConfigError("--out", str(out), "already exists; choose another path or add --force")
    if out.exists() and out.is_dir():
        raise ConfigError("--out", str(out), "is a directory; give a file path")


def cmd_trace(args: argparse.Namespace) -> int:
    from .errors import ConfigError

    if args.trace_command == "import":
        from .traces import fedscale
        from .traces.format import save_trace

        _check_out(args.out, args.force)
        if args.kind == "behavior":
            report = fedscale.ImportReport()
            trace = fedscale.import_fedscale_behavior(args.file, report)
            save_trace(args.out, trace)
            print(f"wrote {args.out}: {report.summary()}, period {_periods(trace.period_s)}")
        else:
            from .devices.fedscale import write_capacity_csv

            table = fedscale.import_fedscale_capacity(args.file)
            write_capacity_csv(args.out, table)
            print(f"wrote {args.out}: {len(table)} device profiles"
                  + (" (with dl_kbps/ul_kbps)" if table.has_links else ""))
        return 0
    from pydantic import ValidationError

    from .config.components import config_error_from_pydantic
    from .config.limits import MAX_SEED, MAX_TRACES
    from .traces.format import save_trace
    from .traces.generate import GeneratorConfig, generate_trace

    if not 1 <= args.clients <= MAX_TRACES:
        raise ConfigError("--clients", args.clients, f"must be between 1 and {MAX_TRACES:,}")
    if not 0 <= args.seed <= MAX_SEED:
        raise ConfigError("--seed", args.seed, f"must be between 0 and {MAX_SEED} (2^32 - 1)")
    try:
        cfg = GeneratorConfig(days=args.days, calibration_path=args.calibration)
    except ValidationError as exc:
        err = config_error_from_pydantic(exc, "")
        flag = {"days": "--days", "calibration_path": "--calibration"}.get(err.key, err.key)
        raise ConfigError(flag, err.value, err.allowed) from None
    _check_out(args.out, args.force)
    trace = generate_trace(args.clients, args.seed, cfg)
    save_trace(args.out, trace)
    print(f"wrote {args.out}: {trace.num_traces} traces, {trace.num_intervals} intervals, "
          f"period {_periods(trace.period_s)}, mean online {trace.online_seconds().mean() / trace.period_s.mean():.1%}")
    return 0


def _periods(period_s) -> str:
    lo, hi = float(period_s.min()), float(period_s.max())
    return f"{lo:g} s" if lo == hi else f"{lo:g}-{hi:g} s"


def cmd_list(seam: str | None = None) -> int:
    from .composition import registries
    from .data.registry import PARTITIONERS
    from .errors import ConfigError
    from .registry import describe

    regs = dict(registries())
    regs["data.partition"] = PARTITIONERS
    only = None
    if seam is not None:
        seam, _, only = seam.partition(".") if seam not in regs else (seam, "", "")
        if seam not in regs:
            raise ConfigError("list SEAM", seam, f"choose one of: {', '.join(regs)}")
        if only:
            regs[seam].get(only, "list SEAM")  # unknown component: one-line error naming the choices
        regs = {seam: regs[seam]}
    for name_of_seam, reg in regs.items():
        print(f"{name_of_seam}  ({reg.doc})")
        for name, cls in reg:
            if only and name != only:
                continue
            print(f"  {name:<22} {describe(cls)}")
            if seam is not None:
                for key, field in getattr(cls, "Config").model_fields.items():
                    default = field.default if not field.is_required() else "(required)"
                    print(f"      {key} = {default!r}{_range(field.metadata)}: {field.description or ''}".rstrip(": "))
    return 0


def _range(metadata) -> str:
    """A field's accepted range for `turnout list`, e.g. ``" in [1, 10,000,000]"`` (empty when unbounded)."""
    from annotated_types import Ge, Gt, Le, Lt

    def fmt(v) -> str:
        return f"{v:,}" if isinstance(v, int) else f"{v:g}"

    lo = next((f"[{fmt(m.ge)}" for m in metadata if isinstance(m, Ge)), None) or \
        next((f"({fmt(m.gt)}" for m in metadata if isinstance(m, Gt)), None)
    hi = next((f"{fmt(m.le)}]" for m in metadata if isinstance(m, Le)), None) or \
        next((f"{fmt(m.lt)})" for m in metadata if isinstance(m, Lt)), None)
    if lo and hi:
        return f" in {lo}, {hi}"
    if lo:
        return f" {'>=' if lo[0] == '[' else '>'} {lo[1:]}"
    if hi:
        return f" {'<=' if hi[-1] == ']' else '<'} {hi[:-1]}"
    return ""


def cmd_run(args: argparse.Namespace) -> int:
    from .composition import load_experiment
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
            return cmd_list(args.seam)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "trace":
            return cmd_trace(args)
        if args.command == "plot":
            return cmd_plot(args)
        return cmd_run(args)
    except TurnoutError as exc:
        print(f"turnout: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("turnout: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
