"""``turnout new FOLDER``: a starter folder to copy from (see :mod:`turnout.app.starter`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import starter


def add_parser(sub) -> None:
    new = sub.add_parser("new", help="write a starter folder: an experiment file, a plugin module with a "
                                     "selector and an aggregation rule, and a test that runs them")
    new.add_argument("folder", type=Path, help="folder to create (must not exist, or be empty)")


def run(args: argparse.Namespace) -> int:
    return starter.write_starter(args.folder)
