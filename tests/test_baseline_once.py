"""The centralised baseline is computed once per population for a whole sweep, whichever worker needs it
first; the others (other workers, a resumed run) read it from the run folder's ``baselines/``."""

import json
import multiprocessing
import time
from pathlib import Path

from turnout.runs.plan import shared_value


def _slow_compute(log: str) -> float:
    with open(log, "a") as f:
        f.write("computed\n")
    time.sleep(0.5)  # long enough for the other process to ask meanwhile
    return 0.123456789012345678


def _ask(folder: str, log: str, out: str) -> None:
    value = shared_value(Path(folder), ("synthetic", 0), lambda: _slow_compute(log))
    Path(out).write_text(repr(value))


def test_two_processes_asking_at_once_compute_it_once_and_read_the_same_bits(tmp_path):
    folder, log = tmp_path / "baselines", tmp_path / "log"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_ask, args=(str(folder), str(log), str(tmp_path / f"out{i}"))) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert log.read_text() == "computed\n"
    assert (tmp_path / "out0").read_text() == (tmp_path / "out1").read_text() == repr(0.123456789012345678)
    [stored] = folder.glob("*.json")
    assert json.loads(stored.read_text())["key"] == ["synthetic", 0]


def test_a_stored_value_is_reused_and_other_keys_are_computed(tmp_path):
    calls = []
    assert shared_value(tmp_path, ("a", 1), lambda: calls.append(1) or 0.5) == 0.5
    assert shared_value(tmp_path, ("a", 1), lambda: calls.append(1) or 0.7) == 0.5  # stored: not computed again
    assert shared_value(tmp_path, ("b", 1), lambda: calls.append(1) or 0.7) == 0.7
    assert len(calls) == 2 and len(list(tmp_path.glob("*.json"))) == 2


def test_a_two_worker_sweep_stores_one_baseline_per_population_and_every_unit_reports_it(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "turnout", "run", "experiments/quickstart.yaml", "--set", "rounds=1",
                        "--set", "seeds=[0, 1]", "--out", out, "--jobs", "2", "--quiet"], capture_output=True,
                       text=True, cwd=root, timeout=600)
    assert r.returncode == 0, r.stderr
    stored = {json.loads(p.read_text())["key"][-1]: json.loads(p.read_text())["value"]
              for p in (out / "baselines").glob("*.json")}
    assert sorted(stored) == [0, 1]  # three variants share each seed's population: two computations in all
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert len(runs) == 6 and all(run["centralized_accuracy"] == stored[run["seed"]] for run in runs)
