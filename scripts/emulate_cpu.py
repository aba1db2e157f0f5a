"""Print (or give) the environment variables that make this machine compute like another CPU.

The families are turnout's own (:mod:`turnout.core.emulation`): torch's ``avx2`` and ``default`` loops, another
OpenBLAS core type, and the vendor paths of MKL and oneDNN. ``foreign_environment()`` is the first run of the
default suite's second pass (torch ``avx2`` with the vendor paths moved); name a family to get another.

    eval "$(python scripts/emulate_cpu.py)"                 # export the variables into a shell
    eval "$(python scripts/emulate_cpu.py torch-default)"   # one family (or a second-pass run) by name
"""

from __future__ import annotations

import sys

from turnout.core.emulation import FAMILIES, family_environment, second_pass_environments


def foreign_environment(name: str = "torch-avx2") -> dict[str, str]:
    """The second pass's run ``name`` (torch-avx2, torch-default), or a single family (openblas, vendor)."""
    passes = second_pass_environments()
    return passes[name] if name in passes else family_environment(name)


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "torch-avx2"
    if which not in FAMILIES:
        raise SystemExit(f"name one of: {', '.join(FAMILIES)}")
    print(" ".join(f"export {k}={v};" for k, v in foreign_environment(which).items()))
