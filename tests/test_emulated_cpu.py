"""The golden and page checks hold on another CPU: the second pass, under both emulated torch families.

A fresh clone on a machine with another CPU must pass its own suite (docs/determinism.md). No CI machine has every
CPU, so the default suite's golden cases and every results page's check slice run once more in each of two
processes whose kernels are another CPU's (:func:`turnout.core.emulation.second_pass_environments`): torch's AVX2
loops with MKL's and oneDNN's vendor paths moved, and torch's plain loops with another OpenBLAS core type —
whatever the host CPU. There the comparisons take their cross-CPU path (integers, strings and flags exactly, floats
within the stated tolerance), and each pass says how many cases and pages it compared.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from turnout.app.reproduce.spec import names as page_names
from turnout.core.emulation import SECOND_PASS, second_pass_environments

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from golden_hashes import HANDFUL  # noqa: E402


def _run(family: str, *args):
    env = {**os.environ, **second_pass_environments()[family]}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.parametrize("family", SECOND_PASS)
def test_golden_cases_hold_under_an_emulated_foreign_cpu(family):
    res = _run(family, "scripts/golden_hashes.py", "--check", "--handful")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "environment differs from the recording" in res.stdout  # the cross-CPU path was taken
    last = res.stdout.splitlines()[-1]
    assert last.startswith(f"{len(HANDFUL)} of {len(HANDFUL)} cases") and "0 differ" in last, res.stdout[-2000:]


@pytest.mark.parametrize("family", SECOND_PASS)
def test_every_page_holds_under_an_emulated_foreign_cpu(family):
    res = _run(family, "-m", "turnout", "reproduce", "--check", "all")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    n = len(page_names())
    assert f"{n} of {n} pages match the code, 0 stale, 0 not checked" in res.stdout, res.stdout[-4000:]
