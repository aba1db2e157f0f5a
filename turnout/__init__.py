"""turnout: federated-learning simulation under realistic client participation.

``turnout.run(experiment)`` runs an experiment (a YAML path, a dict or resolved variants) and
returns its tables as pandas DataFrames; ``turnout.load(run_dir)`` reads a run folder, finished
or not. Both are imported on first use, so ``import turnout`` stays light (no torch, no pandas).
"""

__version__ = "0.1.0"

__all__ = ["Results", "__version__", "load", "run"]

_API = ("Results", "load", "run")


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'turnout' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
