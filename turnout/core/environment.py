"""What the numbers of a run depend on besides the code, config and seed: package versions and the CPU kernels.

A run folder records :func:`versions` in ``config.yaml``; ``turnout resume`` compares them with the running
process (:func:`version_changes`) and says so in one line, since a resumed half computed by another numpy or
torch can differ from an uninterrupted run in its last digits. :func:`fingerprint` adds the kernels that pick
the arithmetic's order (OpenBLAS's core type for numpy and scipy, torch's CPU capability): the golden checks
demand byte-identical tables only where the fingerprint is the recorded one (``docs/determinism.md``).
"""

from __future__ import annotations

import platform
from importlib import metadata

from . import __version__

#: Distributions whose release can change a number turnout reports (the ones constraints.txt pins for that).
NUMERIC_PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "pandas")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    """turnout's, Python's and the numeric packages' versions (what ``config.yaml`` records under ``turnout``)."""
    return {"turnout": __version__, "python": platform.python_version(),
            **{dist: _version(dist) for dist in NUMERIC_PACKAGES}}


def version_changes(recorded: dict) -> list[str]:
    """``"numpy 2.4.5 → 2.4.6"`` for every recorded version that differs from this process's (empty: same)."""
    now = versions()
    return [f"{k} {recorded[k]} → {now[k]}" for k in now if k in recorded and str(recorded[k]) != now[k]]


def blas_kernel() -> str:
    """The OpenBLAS core type numpy runs on here (``SkylakeX``, ``Haswell``, ``Zen`` …), as threadpoolctl reads it."""
    import numpy  # noqa: F401  (loads the BLAS library threadpoolctl inspects)
    from threadpoolctl import threadpool_info  # imported here: only the golden checks and reports need it

    for lib in threadpool_info():
        if lib.get("user_api") == "blas" and "numpy" in str(lib.get("filepath", "")):
            return f"{lib.get('internal_api')}/{lib.get('architecture')}"
    return "unknown"


def fingerprint() -> dict[str, str]:
    """:func:`versions` plus the machine and kernels that order float arithmetic (numpy's BLAS, torch's ISA)."""
    import torch  # imported here: `import turnout` stays light

    return {**versions(), "machine": platform.machine(), "numpy_blas": blas_kernel(),
            "torch_cpu": str(torch.backends.cpu.get_cpu_capability())}
