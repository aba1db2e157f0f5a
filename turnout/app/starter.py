"""``turnout new NAME``: a starter folder that runs, so a researcher edits working code instead of a blank page.

The folder holds ``experiment.yaml`` (the common blocks, each with its alternatives in a comment),
``components.py`` (a selector and an aggregation rule registered as a plugin the experiment names)
and ``test_components.py`` (each rule on hand-worked numbers, then the experiment run end to end).
The files are package data under ``turnout/templates/starter/``; ``__NAME__`` in them becomes the
folder's name. An existing folder is used only when empty, so nothing of the user's is overwritten.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from ..core.errors import ConfigError

#: The starter's files, in the order they are written and listed.
FILES = ("experiment.yaml", "components.py", "test_components.py")
PLACEHOLDER = "__NAME__"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def template(name: str) -> str:
    """The text of one template file."""
    return resources.files("turnout").joinpath("templates", "starter", name).read_text(encoding="utf-8")


def write_starter(folder: Path) -> int:
    """Write the starter into ``folder`` (new, or an empty folder) and say what to run next."""
    folder = Path(folder)
    if folder.is_file() or (folder.exists() and not folder.is_dir()):
        raise ConfigError("new", str(folder), "is a file; give the name of a new folder")
    if folder.is_dir() and any(folder.iterdir()):
        raise ConfigError("new", str(folder), "is a folder that is not empty; give a new folder (nothing is "
                                              "overwritten)")
    name = folder.resolve().name
    if not _NAME.fullmatch(name):
        raise ConfigError("new", str(folder), "name the folder with letters, digits, '_', '-' or '.' (it becomes "
                                              "the experiment's name), e.g. `turnout new mylab`")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for file in FILES:
            (folder / file).write_text(template(file).replace(PLACEHOLDER, name), encoding="utf-8")
    except OSError as exc:
        raise ConfigError("new", str(folder), f"cannot be written ({exc.strerror or exc})") from None
    shown = folder.as_posix()
    print(f"wrote {shown}/: {', '.join(FILES)}")
    print(f"  turnout check {shown}/experiment.yaml     # validate it (runs nothing)")
    print(f"  turnout run {shown} --set rounds=20       # run it: every variant × seed, a run folder under runs/")
    print(f"  python -m pytest {shown}                  # test your components")
    return 0
