"""turnout: federated-learning simulation under realistic client participation.

``turnout.run(experiment)`` runs an experiment (a YAML path, a dict or resolved variants) and
returns its tables as pandas DataFrames; ``turnout.load(run_dir)`` reads a run folder, finished
or not. Both are imported on first use, so ``import turnout`` stays light (no torch, no pandas).
"""

import importlib.abc
import importlib.machinery
import os
import sys
import warnings

# PyTorch backs its CPU allocations of 2 MB and more with transparent huge pages when this is set
# before its first allocation. A round allocates cohort-sized arrays (clients × parameters: 64 MB for
# 100 clients of MLP(200)) and fresh memory costs a page fault per 4 kB page: with huge pages such an
# array fills about 3× faster, and an MLP(200) round on 100 clients takes about a tenth less time
# (docs/performance.md). No number a run produces changes. A value the user set wins
# (THP_MEM_ALLOC_ENABLE=0 turns it off); set after torch's first allocation, it has no effect.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from .core import __version__

#: Modules that moved into the layer packages (old name → new name, both under ``turnout.``). The old
#: names keep importing, with a DeprecationWarning, for one release: plugins written against them work.
MOVED = {
    "api": "app.api",
    "baselines": "sim.baselines",
    "capabilities": "core.capabilities",
    "check": "app.check",
    "checkpoint": "runs.checkpoint",
    "cli": "app.cli",
    "composition": "sim.composition",
    "device": "core.device",
    "engine": "sim.engine",
    "errors": "core.errors",
    "experiment": "runs.experiment",
    "faults": "core.faults",
    "metrics": "core.metrics",
    "observers": "core.observers",
    "phases": "sim.phases",
    "plots": "recorders.plots",
    "plugins": "sim.plugins",
    "preflight": "runs.preflight",
    "progress": "runs.progress",
    "ray_backend": "runs.ray_backend",
    "records": "core.records",
    "registry": "core.registry",
    "report": "app.report",
    "rng": "core.rng",
    "rundir": "runs.rundir",
    "state": "core.state",
    "sweep": "runs.sweep",
    "system_only": "sim.system_only",
    "training.config": "config.train",
    "unit": "runs.unit",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module's old name as the new module itself (same objects), and warns once per name."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("turnout.") or fullname[8:] not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        new = "turnout." + MOVED[spec.name[8:]]
        # stacklevel 2: the importing line (warnings skips the import system's own frames)
        warnings.warn(f"{spec.name} moved to {new}; the old name is kept until turnout 0.2, import the new one",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._real_spec = module.__spec__  # the import system overwrites __spec__ with the alias's; put it back
        return module

    def exec_module(self, module):
        module.__spec__ = self._real_spec


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())

__all__ = ["Results", "__version__", "load", "run"]

_API = ("Results", "load", "run")


def __getattr__(name: str):
    if name in _API:
        from .app import api  # lazy: `import turnout` stays light (no torch, no pandas)

        return getattr(api, name)
    raise AttributeError(f"module 'turnout' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
