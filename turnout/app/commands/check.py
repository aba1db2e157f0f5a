"""``turnout check CONFIG``: validate an experiment without running it and print the resolved variants."""

from __future__ import annotations

import argparse

from .. import bundled
from .options import add_no_train_arg, add_plugin_arg, with_cli_options


def add_parser(sub) -> None:
    chk = sub.add_parser("check", help="validate an experiment without running it and print the resolved variants")
    chk.add_argument("config", help="experiment YAML file or bundled experiment name")
    chk.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, as for `turnout run` (repeatable)")
    chk.add_argument("--data", action="store_true",
                     help="also build the datasets and every simulation (slower; catches a model that does not "
                          "fit the data, more clients per round than clients)")
    add_plugin_arg(chk)
    add_no_train_arg(chk)


def run(args: argparse.Namespace) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...config.loader import parse_override, read_yaml
    from ...sim.composition import expand
    from ..check import check, summary_lines

    raw, overrides = with_cli_options(read_yaml(bundled.resolve(args.config)), args,
                                      dict(parse_override(o) for o in args.overrides))
    variants = expand(raw, overrides)
    check(variants, build_data=args.data)
    print("\n".join(summary_lines(args.config, variants, args.data)))
    return 0
