"""``turnout trace import | generate``: convert FedScale's client traces, or generate synthetic ones."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...core.errors import ConfigError
from .options import Parser, check_out


def add_parser(sub) -> None:
    trace = sub.add_parser("trace", help="convert or generate client system traces")
    tsub = trace.add_subparsers(dest="trace_command", required=True, parser_class=Parser)
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


def run(args: argparse.Namespace) -> int:
    return {"import": _import, "generate": _generate}[args.trace_command](args)


def _import(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...traces import fedscale
    from ...traces.format import save_trace

    check_out(args.out, args.force)
    if args.kind == "behavior":
        report = fedscale.ImportReport()
        trace = fedscale.import_fedscale_behavior(args.file, report)
        save_trace(args.out, trace)
        print(f"wrote {args.out}: {report.summary()}, period {periods(trace.period_s)}")
    else:
        # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
        from ...devices.fedscale import write_capacity_csv

        table = fedscale.import_fedscale_capacity(args.file)
        write_capacity_csv(args.out, table)
        print(f"wrote {args.out}: {len(table)} device profiles"
              + (" (with dl_kbps/ul_kbps)" if table.has_links else ""))
    return 0


def _generate(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...config.components import config_error_from_pydantic
    from ...config.limits import MAX_SEED, MAX_TRACES
    from ...traces.format import save_trace
    from ...traces.generate import GeneratorConfig, generate_trace

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
    check_out(args.out, args.force)
    trace = generate_trace(args.clients, args.seed, cfg)
    save_trace(args.out, trace)
    print(f"wrote {args.out}: {trace.num_traces} traces, {trace.num_intervals} intervals, "
          f"period {periods(trace.period_s)}, mean online {trace.online_seconds().mean() / trace.period_s.mean():.1%}")
    return 0


def periods(period_s) -> str:
    """A trace's period for a ``wrote ...`` line: one value, or the range."""
    lo, hi = float(period_s.min()), float(period_s.max())
    return f"{lo:g} s" if lo == hi else f"{lo:g}-{hi:g} s"
