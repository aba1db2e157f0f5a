"""bench/profile_round.py, the first step of the prepared GPU profile (scripts/gpu_check.sh ... profile), still runs
against the engine: every phase it wraps exists and is timed, on a CPU, at the smallest scale."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_profile_round_times_every_phase_on_a_cpu(tmp_path):
    cfg = ROOT / "turnout" / "experiments" / "quickstart.yaml"
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "profile_round.py"), str(cfg), "--set", "runtime.device=cpu",
         "--set", "eval.every=1", "--warmup", "1", "--rounds", "2", "--top", "0", "--clock", "cpu"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    for phase in ("open", "train", "settle", "aggregate", "account", "evaluate"):
        calls = re.search(rf"^  {phase}\s+[0-9.]+ ms a round  \(median call [0-9.]+ ms, (\d+) calls\)$", out, re.M)
        assert calls, f"no timing line for the {phase} phase:\n{out}"
        assert int(calls.group(1)) == 2  # one call a round (evaluation runs every round here)
    assert re.search(r"^a round \([0-9.]+ ms, the floor's products left out\): training [0-9.]+ ms", out, re.M), out
