"""What several commands share on their command line: the one-line parser error, ``--plugin``, ``--no-train``
and an output file that must not exist."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...core.errors import ConfigError
from ..process import EXIT_USAGE


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        self.exit(EXIT_USAGE, f"turnout: error: {message} (see `turnout {' '.join(self.prog.split()[1:])} --help`)\n"
                  if " " in self.prog else f"turnout: error: {message} (see `turnout --help`)\n")


def add_plugin_arg(p) -> None:
    p.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE_OR_FILE",
                   help="import a module or .py file first, so what it registers can be named (repeatable; added "
                        "to the experiment's plugins:)")


def add_no_train_arg(p) -> None:
    p.add_argument("--no-train", action="store_true",
                   help="system-only what-if: simulate availability, selection, round modes, bytes and time "
                        "without training (sets no_train: true)")


def with_cli_options(raw: dict, args: argparse.Namespace, overrides: dict) -> tuple[dict, dict]:
    """The experiment with ``--plugin`` files/modules appended to its ``plugins:`` and ``--no-train`` as an
    override (both are then stored with the run, so workers and ``turnout resume`` see them)."""
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...sim import plugins

    if args.plugins:
        given = plugins.anchor(list(args.plugins), Path.cwd())
        plugins.load(given, "--plugin", indexed=False)  # a bad one is named as the flag, before the file's
        listed = raw.get("plugins") or []
        raw = {**raw, "plugins": [*(listed if isinstance(listed, list) else [listed]),
                                  *(p for p in given if p not in listed)]}
    if args.no_train:
        overrides = {**overrides, "no_train": True}
    return raw, overrides


def check_out(out: Path, force: bool) -> None:
    """An output file (``--out``) is new, or ``--force`` overwrites it; never a directory."""
    if out.exists() and not force:
        raise ConfigError("--out", str(out), "already exists; choose another path or add --force")
    if out.exists() and out.is_dir():
        raise ConfigError("--out", str(out), "is a directory; give a file path")

