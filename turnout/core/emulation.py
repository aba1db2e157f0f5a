"""The emulated CPU families: environment variables that make this machine add floats like another CPU.

Another CPU vendor or model changes which kernels compute a run's floats, and so the order of their additions.
Four knobs reach the same choices on one machine, each a *family* of foreign CPUs:

- ``torch-avx2`` and ``torch-default`` — ``ATEN_CPU_CAPABILITY``: torch's vectorised loops for a CPU with AVX2
  only, or with no vector ISA at all; both run whatever this CPU is (on an AVX2 machine ``torch-avx2`` is the
  machine itself, and says so);
- ``openblas`` — ``OPENBLAS_CORETYPE``: another core type for numpy's OpenBLAS;
- ``vendor`` — the library-internal code paths that MKL and oneDNN choose by CPU vendor and model, invisible in
  any kernel's name: ``MKL_ENABLE_INSTRUCTIONS`` (which MKL ignores on a non-Intel CPU) together with
  ``ONEDNN_MAX_CPU_ISA`` (which oneDNN honours on every vendor), so the family moves bits on Intel and AMD alike.

A recorded check (a golden case, a results page's slice) is measured under every family at recording and cut
at its horizon (:mod:`turnout.app.reproduce.horizon`); the default suite runs its second pass under the two torch
families (``tests/test_emulated_cpu.py``). docs/determinism.md has the measured table.
"""

from __future__ import annotations

import os

from .environment import blas_kernel

#: the emulated families, in the order records list them
FAMILIES = ("torch-avx2", "torch-default", "openblas", "vendor")
#: the families the default suite's second pass runs, whatever the host CPU
SECOND_PASS = ("torch-avx2", "torch-default")


def native_kernels() -> tuple[str, str]:
    """(torch's CPU capability, numpy's OpenBLAS kernel) of this process."""
    import torch  # imported here: `import turnout` stays light

    return str(torch.backends.cpu.get_cpu_capability()), blas_kernel()


def other_blas(kernel: str) -> str:
    """Another OpenBLAS core type than ``kernel`` (``openblas/SkylakeX`` and the like)."""
    return "Sandybridge" if kernel.endswith("Haswell") else "Haswell"


def other_mkl() -> str:
    """Another MKL code path than this process's (``MKL_ENABLE_INSTRUCTIONS``; unset: the CPU's best)."""
    return "SSE4_2" if os.environ.get("MKL_ENABLE_INSTRUCTIONS", "").upper() == "AVX2" else "AVX2"


def other_onednn(capability: str) -> str:
    """A lower oneDNN ISA than this CPU's best (``ONEDNN_MAX_CPU_ISA``)."""
    return "AVX2" if capability.upper().startswith("AVX512") else "SSE41"


def family_environment(family: str, kernels: tuple[str, str] | None = None) -> dict[str, str]:
    """The variables that emulate ``family`` (one of :data:`FAMILIES`) on this machine."""
    capability, kernel = kernels or native_kernels()
    envs = {"torch-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
            "torch-default": {"ATEN_CPU_CAPABILITY": "default"},
            "openblas": {"OPENBLAS_CORETYPE": other_blas(kernel)},
            "vendor": {"MKL_ENABLE_INSTRUCTIONS": other_mkl(), "ONEDNN_MAX_CPU_ISA": other_onednn(capability)}}
    if family not in envs:
        raise ValueError(f"unknown CPU family {family!r}; known: {', '.join(FAMILIES)}")
    return envs[family]


def second_pass_environments() -> dict[str, dict[str, str]]:
    """The default suite's second pass: each torch family, with the other knobs moved too (the vendor path in
    one, OpenBLAS's core type in the other), so every knob is exercised in every run of the suite."""
    kernels = native_kernels()
    return {"torch-avx2": {**family_environment("torch-avx2", kernels), **family_environment("vendor", kernels)},
            "torch-default": {**family_environment("torch-default", kernels),
                              **family_environment("openblas", kernels)}}
