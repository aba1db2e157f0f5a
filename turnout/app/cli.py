"""The ``turnout`` command line: the parser and a table from each command's name to its body.

Each command lives in :mod:`turnout.app.commands` (``reproduce`` in :mod:`turnout.app.reproduce.command`) and
registers its own sub-parser; what happens around a command — exit codes, signals, the traceback log, a
closed pipe — is :mod:`turnout.app.process`. User mistakes (bad config, missing data, bad arguments) print one
line to stderr and exit with code 2 — never a traceback — and leave no run folder behind.
"""

from __future__ import annotations

import argparse
import sys

# light: every command module imports only the standard library and core at its top (`--help`, `list` need no torch)
from .commands import check, listing, new, plot, report, run, trace
from .commands.options import Parser
from .process import ends_quietly_on_closed_pipe, exit_code_of
from .reproduce import command as reproduce

#: command name → (the function adding its sub-parser, its body); the order is `turnout --help`'s
COMMANDS = {
    "run": (run.add_run_parser, run.run),
    "resume": (run.add_resume_parser, run.run),
    "check": (check.add_parser, check.run),
    "list": (listing.add_parser, listing.run),
    "report": (report.add_parser, report.run),
    "reproduce": (reproduce.add_parser, reproduce.run),
    "new": (new.add_parser, new.run),
    "trace": (trace.add_parser, trace.run),
    "plot": (plot.add_parser, plot.run),
}


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="turnout", description="Federated-learning simulation under realistic client participation.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add_parser, _ in COMMANDS.values():
        add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """The command line. Output piped into ``head``, ``less`` or ``grep -m1`` ends quietly when the reader goes
    away: no message, exit 141, whatever the command (argparse's ``--help`` included)."""
    return ends_quietly_on_closed_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    body = COMMANDS[args.command][1]
    return exit_code_of(lambda: body(args))


if __name__ == "__main__":
    sys.exit(main())
