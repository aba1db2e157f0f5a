"""Worker processes never run the user's script (unguarded scripts, ``python -c``), and say why one died.

``turnout.run(..., jobs=2)`` (and ``executor: parallel``) called at the top level of a script with no
``if __name__ == "__main__":`` guard used to start a run in every worker (spawn imports the main
module again). Each case runs in its own interpreter, as a user would, and must give the very
tables of ``jobs=1``.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from turnout.core.worker_process import StopEvent, WorkerProcess

ROOT = Path(__file__).resolve().parents[1]
#: the quickstart, small: 2 variants × 2 seeds, with its centralised baseline
SMALL = {"name": "small", "seeds": [0, 1], "rounds": 4,
         "data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "num_clients": 30, "variant": "fedprox"},
         "model": {"name": "logreg"}, "train": {"batch_size": 50, "local_steps": 5, "lr": 0.2},
         "algorithm": {"name": "fedavg", "server_momentum": 0.5},
         "selector": {"name": "uniform", "clients_per_round": 10, "weighting": "n_samples"},
         "eval": {"every": 2, "centralized_baseline": True, "centralized_epochs": 1},
         "output": {"progress": False, "plots": False},
         "variants": [{"name": "K=5", "set": {"selector.clients_per_round": 5}}, {"name": "K=10"}]}
TABLES = ("rounds.csv", "clients.csv")
#: what a new user writes: no main guard, the README's call
SCRIPT = """\
import sys
import turnout

res = turnout.run(sys.argv[1], out=sys.argv[2], jobs=int(sys.argv[3]), quiet=True)
print("rows", len(res.rounds))
"""


def _python(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def _config(tmp: Path, name: str, **extra) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**SMALL, **extra}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """``jobs=1``, sequential executor, from an unguarded script too (it runs nothing in other processes)."""
    tmp = tmp_path_factory.mktemp("ref")
    script = tmp / "ref.py"
    script.write_text(SCRIPT)
    r = _python([str(script), str(_config(tmp, "small")), str(tmp / "out"), "1"], tmp)
    assert r.returncode == 0, r.stderr
    return tmp / "out"


def _assert_same(a: Path, b: Path) -> None:
    for table in TABLES:
        assert (a / table).read_bytes() == (b / table).read_bytes(), table
    assert _without_wall(a / "comparison.csv") == _without_wall(b / "comparison.csv")  # centralised baseline too


def _without_wall(path: Path) -> list[list[str]]:
    """comparison.csv's cells but its ``wall_s`` (a measured time, never the same twice)."""
    rows = list(csv.reader(path.read_text().splitlines()))
    drop = rows[0].index("wall_s")
    assert "centralized_accuracy" in rows[0]
    return [r[:drop] + r[drop + 1:] for r in rows]


@pytest.mark.slow  # the parallel-executor case below covers the same guard in the default suite
def test_an_unguarded_script_with_two_jobs_gives_the_tables_of_one(reference, tmp_path):
    script = tmp_path / "quick.py"
    script.write_text(SCRIPT)
    r = _python([str(script), str(_config(tmp_path, "small")), str(tmp_path / "out"), "2"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("rows") == 1  # the script ran once: no worker ran it again
    assert "FolderBusy" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    _assert_same(tmp_path / "out", reference)


def test_an_unguarded_script_with_the_parallel_executor_gives_the_tables_of_one(reference, tmp_path):
    script = tmp_path / "quick.py"
    script.write_text(SCRIPT)
    cfg = _config(tmp_path, "small", executor={"name": "parallel", "workers": 2})
    r = _python([str(script), str(cfg), str(tmp_path / "out"), "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("rows") == 1
    assert "Traceback" not in r.stderr, r.stderr
    _assert_same(tmp_path / "out", reference)


@pytest.mark.slow  # ~8 s; the unguarded-script tests cover workers that never re-run the caller
def test_python_c_with_two_jobs(reference, tmp_path):
    cfg = _config(tmp_path, "small")
    code = SCRIPT.replace("sys.argv[1]", repr(str(cfg))).replace("sys.argv[2]", repr(str(tmp_path / "out")))
    r = _python(["-c", code.replace("int(sys.argv[3])", "2")], tmp_path)
    assert r.returncode == 0, r.stderr
    _assert_same(tmp_path / "out", reference)


def test_a_worker_that_fails_at_start_is_described_by_its_own_last_error_line():
    import json

    proc = WorkerProcess(json.loads)  # json.loads(conn): a TypeError as soon as it starts
    proc.join(timeout=60)
    assert proc.exitcode == 1
    assert proc.describe_exit() == ("exited with code 1: TypeError: the JSON object must be str, bytes or "
                                    "bytearray, not Connection")


def test_a_parallel_worker_that_cannot_import_is_one_line_with_its_error_not_a_guess(tmp_path, monkeypatch):
    from turnout.executors.parallel import WorkerError, WorkerPool

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "torch.py").write_text("raise ImportError('this torch cannot load (a test)')\n")
    monkeypatch.syspath_prepend(str(broken))  # the worker gets our sys.path; this process has torch already
    pool = WorkerPool(1)
    try:
        with pytest.raises(WorkerError) as err:
            pool.broadcast(("board", {}), "mapping the parameter board")
    finally:
        pool.close()
    message = str(err.value)
    assert "\n" not in message and "out of memory" not in message
    assert message.startswith("executor.parallel: worker 0 (pid ")
    assert message.endswith("exited with code 1: ImportError: this torch cannot load (a test) — while mapping "
                            "the parameter board; the simulation cannot continue")


def test_a_stop_event_is_seen_by_a_worker_process(tmp_path):
    event = StopEvent()
    try:
        proc = WorkerProcess(_report_stop, (event.fd,), fds=(event.fd,))
        assert proc.conn.recv() is False
        event.set()
        proc.conn.send("again")
        assert proc.conn.recv() is True
        proc.join(timeout=30)
        assert proc.exitcode == 0
    finally:
        event.close()


def _report_stop(conn, fd: int) -> None:
    """Worker side of the test above: whether the owner's stop event is set, before and after it is."""
    event = StopEvent(fd)
    conn.send(event.is_set())
    conn.recv()
    conn.send(event.is_set())


def test_the_sweep_starts_no_more_workers_than_units():
    from turnout.runs.sweep import ProcessBackend

    backend = ProcessBackend(jobs=4)
    try:
        backend.warm(2)
        assert len(backend._warm) == 2
        backend.warm(9)
        assert len(backend._warm) == 4
    finally:
        backend.close()
    assert backend._warm == []


@pytest.mark.slow  # a second unguarded-script case; the parallel-executor one stays in the default suite
def test_an_unguarded_script_is_not_what_workers_import(tmp_path):
    """The sharpest form: the script raises if imported under any name but ``__main__``."""
    script = tmp_path / "guarded_by_nothing.py"
    script.write_text(textwrap.dedent("""\
        import sys
        if __name__ != "__main__":
            raise SystemExit("a worker imported the user's script")
        import turnout
        turnout.run(sys.argv[1], out=sys.argv[2], jobs=2, quiet=True)
        print("done")
    """))
    r = _python([str(script), str(_config(tmp_path, "small", seeds=[0], rounds=2)), str(tmp_path / "out")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done"


def test_a_free_worker_prefers_an_equally_long_unit_of_a_population_it_already_holds():
    from turnout.runs.sweep import UnitJob, longest_first, next_job

    def job(i: int, seed: int, work: float) -> UnitJob:
        return UnitJob((0, i), {}, f"v{i}", seed, f"/tmp/u{i}", 1, f"v{i} seed {seed}", work=work)

    pending = longest_first([job(0, 0, 4.0), job(1, 1, 4.0), job(2, 0, 2.0), job(3, 1, 2.0), job(4, 1, 1.0)])
    assert next_job(pending, {(0, 1)}).key == (0, 1)  # seed 1's baseline is cached there: same work, its unit
    assert next_job(pending, {(0, 1)}).key == (0, 0)  # nothing of seed 1 this long is left: the longest goes
    assert next_job(pending, {(0, 1)}).key == (0, 3)
    assert next_job(pending, set()).key == (0, 2)
    assert next_job(pending, {(0, 0)}).key == (0, 4)
    assert pending == []


def test_workers_starting_together_take_different_populations():
    """Two workers free at once: the second takes the longest unit of the other seed, even a little
    shorter, so the two build their datasets and centralised baselines side by side (neither waits on
    the other's lock); later jobs go longest first again."""
    from turnout.runs.sweep import UnitJob, longest_first, next_job

    def job(i: int, seed: int, work: float) -> UnitJob:
        return UnitJob((0, i), {}, f"v{i}", seed, f"/tmp/u{i}", 1, f"v{i} seed {seed}", work=work)

    pending = longest_first([job(0, 0, 4.0), job(1, 0, 3.9), job(2, 1, 3.8), job(3, 1, 1.0)])
    first = next_job(pending, set(), set())
    second = next_job(pending, set(), {(0, first.seed)})
    assert (first.key, second.key) == ((0, 0), (0, 2))
    assert next_job(pending, set(), {(0, 0), (0, 1)}).key == (0, 1)  # a third worker: every population taken
    assert next_job(pending, {(0, 0)}, {(0, 1)}).key == (0, 3)
