"""The experiment files that ship inside the package, runnable by name after ``pip install turnout``.

The quickstart and every paper setting live in ``turnout/experiments/`` (package data, read through
``importlib.resources``), so a user without the git checkout can ``turnout run quickstart`` or
``turnout run gluefl/main --set rounds=20``. A checkout keeps a top-level ``experiments`` link to the
same folder, so ``turnout run experiments/quickstart.yaml`` and the scripts that name those paths work
as before. A path that exists always wins over a bundled name: a user's own ``quickstart.yaml`` in the
current folder is never shadowed.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from ..core.errors import ConfigError

SUFFIX = ".yaml"
#: Prefix a checkout's paths carry (``experiments/quickstart.yaml``): accepted as the bundled name too.
CHECKOUT_PREFIX = "experiments/"
#: The experiment file of a starter folder (``turnout new``): naming the folder runs it.
STARTER_FILE = "experiment.yaml"


def root() -> Path:
    """The folder holding the bundled experiment files (a real folder: the package is installed unzipped)."""
    return Path(str(resources.files("turnout").joinpath("experiments")))


def names() -> list[str]:
    """Every bundled experiment's name: its path under :func:`root` without ``.yaml`` (``gluefl/main``)."""
    base = root()
    return sorted(p.relative_to(base).with_suffix("").as_posix() for p in base.rglob(f"*{SUFFIX}"))


def summary(name: str) -> str:
    """The file's one-line description: the first line of its header comment, without a dangling clause."""
    for line in (root() / f"{name}{SUFFIX}").read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if not text.startswith("#"):
            break
        text = text.lstrip("#").strip()
        if text:
            if text.count("(") > text.count(")"):  # the parenthesis goes on below: keep what precedes it
                text = text[:text.rfind("(")]
            return text.rstrip(" ,;:")
    return ""


def resolve(spec: str | Path) -> Path:
    """The experiment file ``spec`` names: an existing file as given (a folder holding ``experiment.yaml``:
    that file), else a bundled experiment's file.

    ``quickstart``, ``quickstart.yaml`` and ``experiments/quickstart.yaml`` all name the bundled
    quickstart when no such file exists here. A name that is neither a file nor a bundled experiment
    is one :class:`ConfigError` listing the closest bundled names. A missing path that ends in
    ``.yaml``/``.yml`` and matches nothing is returned as given, so the reader's own "file not found"
    line names it.
    """
    path = Path(spec)
    if path.is_file():
        return path
    if (path / STARTER_FILE).is_file():  # a folder `turnout new` wrote
        return path / STARTER_FILE
    text = str(spec).replace("\\", "/")
    name = text[len(CHECKOUT_PREFIX):] if text.startswith(CHECKOUT_PREFIX) else text
    name = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
    known = names()
    if name in known:
        return root() / f"{name}{SUFFIX}"
    if text.endswith((".yaml", ".yml")):
        return path
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    close += [k for k in known if k.startswith(name.rstrip("/") + "/") and k not in close]  # `gluefl` → gluefl/*
    hint = f"close names: {', '.join(close)}" if close else f"bundled names: {', '.join(known)}"
    raise ConfigError("config", str(spec), f"no such file, nor a bundled experiment; {hint} "
                                           "(`turnout list experiments` lists them)")


def listing_lines() -> list[str]:
    """``turnout list experiments``: one line per bundled experiment, its name and description."""
    known = names()
    width = max(map(len, known), default=0)
    return [f"{name:<{width}}  {summary(name)}" for name in known]
