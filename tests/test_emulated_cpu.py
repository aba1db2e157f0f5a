"""The golden and page checks hold on another CPU: the second pass, under an emulated foreign CPU.

A fresh clone on a machine with another CPU must pass its own suite (docs/determinism.md). No CI machine has
every CPU, so this runs the default suite's golden cases and every results page's check slice once more in a
process whose kernels are another CPU's (``scripts/emulate_cpu.py``: a lower ``ATEN_CPU_CAPABILITY`` and
``MKL_ENABLE_INSTRUCTIONS``, another OpenBLAS core type). There the comparisons take their cross-CPU path:
integers, strings and flags exactly, floats within the stated tolerance.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from emulate_cpu import foreign_environment  # noqa: E402


def _run(*args):
    env = {**os.environ, **foreign_environment()}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


def test_golden_cases_hold_under_an_emulated_foreign_cpu():
    res = _run("scripts/golden_hashes.py", "--check", "--handful")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "environment differs from the recording" in res.stdout  # the cross-CPU path was taken
    assert "0 differ" in res.stdout.splitlines()[-1], res.stdout[-2000:]


def test_every_page_holds_under_an_emulated_foreign_cpu():
    res = _run("scripts/pages.py", "--check", "all")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
