"""Plugins: a researcher's own modules or ``.py`` files, imported before an experiment is validated.

A new selector or server rule should not need a fork of turnout: a plugin registers it with the
existing registries' ``register`` decorators and the experiment names it like a built-in
(``plugins: [my_lab.selectors, plugins/robust.py]`` or ``--plugin``). Loading happens inside
:func:`turnout.sim.composition.expand`, so every process that expands the experiment — the CLI, a
notebook, each ``--jobs`` worker, each Ray task — imports the same plugins before it validates.

What a plugin registers is checked like a built-in (a pydantic ``Config`` of its options); a
plugin that cannot be found, fails to import, clashes with a registered name or registers a
class without ``Config`` is one :class:`~turnout.core.errors.ConfigError` naming it, and whatever it
had registered is taken back. Each plugin's module, file and sha256 go into the run folder's
``config.yaml``, and a resumed run refuses a plugin file that changed since the run started.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..config.display import one_line
from ..config.plugin_specs import anchor, is_file

__all__ = ["Plugin", "anchor", "is_file", "load", "origin", "records"]
from ..core.errors import ConfigError
from ..core.registry import DuplicateName
from .catalogue import listed_registries

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Plugin:
    """One loaded plugin: how it was named, the module it became, its file and that file's sha256."""

    spec: str
    module: str
    file: str
    sha256: str
    registers: tuple[str, ...]  # "seam.name" of what it registered

    def record(self) -> dict[str, Any]:
        """What ``config.yaml`` keeps about it."""
        return {"spec": self.spec, "module": self.module, "file": self.file, "sha256": self.sha256,
                "registers": list(self.registers)}


#: loaded plugins by identity (absolute file path, or module name); a changed file is loaded again
_LOADED: dict[str, Plugin] = {}


def load(specs: Any, key: str = "plugins", indexed: bool = True) -> list[Plugin]:
    """Import every plugin of ``specs`` (a list) once per process; one :class:`ConfigError` for a bad one.

    Errors name ``key[i]`` (``plugins[1]``), or ``key`` alone when not ``indexed`` (``--plugin``).
    """
    if specs is None:
        return []
    if not isinstance(specs, list):
        raise ConfigError(key, specs, "must be a list of module names or .py files, e.g. [my_lab.selectors, "
                                      "plugins/robust.py]")
    return [_load_one(spec, f"{key}[{i}]" if indexed else key) for i, spec in enumerate(specs)]


def records(specs: list[str]) -> list[dict[str, Any]]:
    """``config.yaml``'s entries for plugins already loaded in this process."""
    return [p.record() for p in load(specs)]


def origin(cls: type) -> str | None:
    """The spec of the plugin that defined ``cls`` (``None`` for turnout's own components)."""
    module = getattr(cls, "__module__", None)
    spec = next((p.spec for p in _LOADED.values() if p.module == module), None)
    if spec is not None and is_file(spec):
        try:
            return str(Path(spec).relative_to(Path.cwd()))
        except ValueError:
            return spec
    return spec


def _where(spec: str) -> tuple[str, Path, str]:
    """(identity, file, module name) of a spec, or a one-line error when there is no such file or module."""
    if is_file(spec):
        path = Path(spec).expanduser().absolute()
        if not path.is_file():
            raise ConfigError("?", spec, "file not found; give the path of a .py file (in an experiment file: "
                                         "relative to that file)")
        if path.suffix != ".py":
            raise ConfigError("?", spec, "is not a .py file; give a Python file or an importable module name")
        stem = re.sub(r"\W", "_", path.stem)
        return str(path), path, f"turnout_plugin_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if not _MODULE.fullmatch(spec):
        raise ConfigError("?", spec, "is neither a module name (dotted identifiers) nor the path of a .py file")
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.origin or not Path(found.origin).is_file():
        raise ConfigError("?", spec, "no such module; give an importable module (installed, or on PYTHONPATH) "
                                     "or the path of a .py file")
    return spec, Path(found.origin), spec


def _load_one(spec: Any, key: str) -> Plugin:
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(key, spec, "must be a module name or the path of a .py file")
    try:
        ident, path, module = _where(spec)
    except ConfigError as exc:
        raise ConfigError(key, exc.value, exc.allowed) from None
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    prev = _LOADED.get(ident)
    if prev is not None and prev.sha256 == sha:
        return prev
    if prev is not None:  # edited since this process loaded it (a notebook): forget the old version
        _forget(prev.module, prev.registers)
        del _LOADED[ident]
    regs = _registries()
    before = {k: set(r.names()) for k, r in regs.items()}
    try:
        if is_file(spec):
            found = importlib.util.spec_from_file_location(module, path)
            mod = importlib.util.module_from_spec(found)
            sys.modules[module] = mod
            found.loader.exec_module(mod)
        else:
            importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001  (anything a plugin raises is reported as its failure)
        _forget(module, _new(regs, before))
        raise ConfigError(key, spec, _import_failure(exc, path)) from None
    registers = _new(regs, before)
    for item in registers:
        seam, name = item.rsplit(".", 1)
        cfg = getattr(regs[seam].get(name), "Config", None)
        if not (isinstance(cfg, type) and issubclass(cfg, BaseModel)):
            _forget(module, registers)
            raise ConfigError(key, spec, f"registers {seam} {name!r} without a Config: give the class a pydantic "
                                         "model of its options (`Config = NoOptions` from turnout.config.base "
                                         "when it has none)")
    plugin = Plugin(spec, module, str(path), sha, tuple(registers))
    _LOADED[ident] = plugin
    return plugin


def _registries() -> dict:
    return dict(listed_registries())


def _new(regs: dict, before: dict[str, set]) -> list[str]:
    return [f"{k}.{n}" for k, r in regs.items() for n in r.names() if n not in before[k]]


def _forget(module: str, registers) -> None:
    """Take back what a plugin registered and drop its module, so a fixed version can be loaded again."""
    regs = _registries()
    for item in registers:
        seam, name = item.rsplit(".", 1)
        regs[seam].remove(name)
    sys.modules.pop(module, None)


def _import_failure(exc: BaseException, path: Path) -> str:
    if isinstance(exc, DuplicateName):
        return f"registers {exc.seam} {exc.name!r}, which is already registered; give it another name"
    if isinstance(exc, ConfigError):
        return f"failed to import: {exc}"
    line = ""
    if isinstance(exc, SyntaxError) and exc.lineno:
        line = f" (line {exc.lineno})"
    else:
        tb = exc.__traceback__
        while tb is not None:
            if Path(tb.tb_frame.f_code.co_filename) == path:
                line = f" (line {tb.tb_lineno})"
            tb = tb.tb_next
    text = one_line(" ".join(str(exc).split()) or type(exc).__name__, 200)
    return f"failed to import: {type(exc).__name__}: {text}{line}"
