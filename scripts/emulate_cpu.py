"""Print (or give) the environment variables that make this machine compute like another CPU.

torch picks its vectorised loops by ``ATEN_CPU_CAPABILITY``, MKL its code path by ``MKL_ENABLE_INSTRUCTIONS``
and numpy's OpenBLAS its kernel by ``OPENBLAS_CORETYPE``; another CPU vendor or model changes exactly these
choices, so setting them to something other than this machine's own gives the float arithmetic of a foreign
CPU without one. ``scripts/test.sh`` runs the golden and page checks a second time under it.

    eval "$(python scripts/emulate_cpu.py)"     # export the variables into a shell
"""

from __future__ import annotations

import os


def _native() -> tuple[str, str]:
    import torch  # imported here: the module is also read by tests that do not need torch at import

    from turnout.core.environment import blas_kernel

    return str(torch.backends.cpu.get_cpu_capability()), blas_kernel()


def other_aten(capability: str) -> str:
    """Another torch ISA than ``capability`` (this process's): one lower, or AVX2 where it runs the plain loops."""
    return "avx2" if capability.startswith("AVX512") or capability == "DEFAULT" else "default"


def other_mkl() -> str:
    """Another MKL code path than this process's (``MKL_ENABLE_INSTRUCTIONS``; unset: the CPU's best)."""
    return "SSE4_2" if os.environ.get("MKL_ENABLE_INSTRUCTIONS", "").upper() == "AVX2" else "AVX2"


def other_blas(kernel: str) -> str:
    """Another OpenBLAS core type than ``kernel`` (``openblas/SkylakeX`` and the like)."""
    return "Sandybridge" if kernel.endswith("Haswell") else "Haswell"


def foreign_environment() -> dict[str, str]:
    """Kernels other than this process's own, for torch's loops, MKL and OpenBLAS at once."""
    capability, kernel = _native()
    return {"ATEN_CPU_CAPABILITY": other_aten(capability), "MKL_ENABLE_INSTRUCTIONS": other_mkl(),
            "OPENBLAS_CORETYPE": other_blas(kernel)}


if __name__ == "__main__":
    print(" ".join(f"export {k}={v};" for k, v in foreign_environment().items()))
