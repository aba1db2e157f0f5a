"""How an experiment names its plugins: an importable module, or a ``.py`` file relative to the experiment file.

The validator needs only this much (to store file names that work from any directory); importing the
plugins and taking back a bad one's registrations is the composition's job (:mod:`turnout.sim.plugins`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def is_file(spec: str) -> bool:
    """A spec naming a file (``x.py``, ``dir/x``) rather than an importable module (``pkg.mod``)."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def anchor(specs: Any, base: Path) -> Any:
    """``specs`` with relative file paths made absolute against ``base`` (modules and non-strings unchanged).

    Experiment files name plugin files relative to themselves; the stored experiment then works
    from any directory (``turnout resume``, worker processes, Ray tasks).
    """
    if not isinstance(specs, list):
        return specs
    return [str((Path(base) / s).absolute()) if isinstance(s, str) and is_file(s) and not Path(s).is_absolute()
            else s for s in specs]
