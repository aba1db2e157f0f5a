"""``turnout plot availability CONFIG --out FILE.png``: a picture of part of the simulated world."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...core.errors import ConfigError
from .options import Parser, check_out


def add_parser(sub) -> None:
    plot = sub.add_parser("plot", help="draw a picture of part of the simulated world")
    psub = plot.add_subparsers(dest="plot_command", required=True, parser_class=Parser)
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


def run(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...config.limits import MAX_CLIENTS, MAX_ROUNDS, MAX_SECONDS
    from ...recorders.plots import availability_gallery
    from ...runs.experiment import prepare
    from ...sim.composition import load_experiment

    for name, most in (("rounds", MAX_ROUNDS), ("clients", MAX_CLIENTS)):
        if not 1 <= getattr(args, name) <= most:
            raise ConfigError(f"--{name}", getattr(args, name), f"must be between 1 and {most:,}")
    if not 0 < args.round_seconds <= MAX_SECONDS:
        raise ConfigError("--round-seconds", args.round_seconds, f"must be > 0 and <= {MAX_SECONDS:g}")
    if args.out.suffix.lower() != ".png":
        raise ConfigError("--out", str(args.out), "must be a .png file")
    check_out(args.out, args.force)
    exp = load_experiment(args.config, args.overrides)[0]
    seed = exp.config.seeds[0]
    data = prepare([exp]).dataset_for(exp, seed)
    availability_gallery(exp, data, seed, args.rounds, args.round_seconds, args.clients, args.out)
    print(f"wrote {args.out}")
    return 0
