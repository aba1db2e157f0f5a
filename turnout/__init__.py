"""turnout: federated-learning simulation under realistic client participation.

``turnout.run(experiment)`` runs an experiment (a YAML path, a dict or resolved variants) and
returns its tables as pandas DataFrames; ``turnout.load(run_dir)`` reads a run folder, finished
or not. Both are imported on first use, so ``import turnout`` stays light (no torch, no pandas).
"""

import os

# PyTorch backs its CPU allocations of 2 MB and more with transparent huge pages when this is set
# before its first allocation. A round allocates cohort-sized arrays (clients × parameters: 64 MB for
# 100 clients of MLP(200)) and fresh memory costs a page fault per 4 kB page: with huge pages such an
# array fills about 3× faster, and an MLP(200) round on 100 clients takes about a tenth less time
# (README, "Performance"). No number a run produces changes. A value the user set wins
# (THP_MEM_ALLOC_ENABLE=0 turns it off); set after torch's first allocation, it has no effect.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"

__all__ = ["Results", "__version__", "load", "run"]

_API = ("Results", "load", "run")


def __getattr__(name: str):
    if name in _API:
        from .app import api

        return getattr(api, name)
    raise AttributeError(f"module 'turnout' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
