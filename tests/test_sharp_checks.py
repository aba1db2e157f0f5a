"""The cross-CPU golden check stays sharp: real defects, planted under an emulated foreign CPU, are caught.

On another CPU the golden check compares discrete cells exactly and floats within a tolerance
(docs/determinism.md). A tolerance wide enough for another CPU's kernels must still be far too narrow for a
change of behaviour: each defect below is planted in a process whose kernels are another CPU's
(``tests/golden/plant_defects.py``), and the control (no defect) must pass there.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from emulate_cpu import foreign_environment  # noqa: E402  (torch-avx2, the vendor paths moved)

#: the quickstart with a server momentum of 0.9: FedAvg weighted by samples, the uniform selector, an lr schedule
CASES = ["exp:quickstart.yaml[momentum-0.9]"]


@pytest.fixture(scope="module")
def planted():
    env = {**os.environ, **foreign_environment()}
    res = subprocess.run([sys.executable, str(ROOT / "tests" / "golden" / "plant_defects.py"), *CASES],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_emulated_cpu_is_foreign(planted):
    """The defects run where the recording's bits cannot be expected: another float fingerprint."""
    recorded = json.loads((ROOT / "tests" / "golden" / "environment.json").read_text())
    assert planted["fingerprint"]["floats"] != recorded["floats"]


@pytest.mark.parametrize("case", CASES)
def test_the_control_passes_under_the_foreign_cpu(planted, case):
    verdict, problems = planted["results"][f"none (control) | {case}"]
    assert verdict in ("identical", "within tolerance"), problems


DEFECTS = ["FedAvg weights uniform instead of by samples", "one client dropped from each cohort",
           "bytes down off by one", "learning rate 1 % off", "server momentum ignored"]


@pytest.mark.parametrize("defect", DEFECTS)
@pytest.mark.parametrize("case", CASES)
def test_each_planted_defect_is_caught(planted, defect, case):
    verdict, problems = planted["results"][f"{defect} | {case}"]
    assert verdict == "DIFF", f"{defect} passed the cross-CPU check on {case}"
    assert problems
