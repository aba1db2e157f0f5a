"""turnout on a multi-node Ray cluster: two nodes on this machine (Ray's own ``cluster_utils.Cluster``: a head
and worker nodes, each its own raylet and object store), started and stopped by each test.

* a ``--backend ray`` sweep whose units land on both nodes gives the tables of ``--jobs 1``;
* the ``ray`` executor with an actor on each node gives the tables of the sequential executor (with
  ``partial_sums``, within the stated tolerance, and a node lost before its actor summed changes no byte);
* a worker node removed in the middle of a sweep (its unit resumes from its checkpoint on the other
  node) or of a round (the lost actor's clients are trained again by the other) changes nothing;
* a head lost mid-sweep is one line, and ``turnout resume`` finishes the run with the same tables.

Where work runs is seen without asking turnout: a node's raylet (and so every Ray worker it starts)
carries its own crash or hold point (:mod:`turnout.core.faults`). A hold point makes the first worker
on that node to reach it create a marker file and wait, so the test knows work is in flight there
when it takes the node away. Every test is ``slow`` (each starts a cluster: about a minute on 2 cores).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"name": "two_nodes", "seeds": [0, 1], "rounds": 6,
         "data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "num_clients": 30, "variant": "fedprox"},
         "model": {"name": "logreg"}, "train": {"batch_size": 50, "local_steps": 5, "lr": 0.2},
         "algorithm": {"name": "fedavg", "server_momentum": 0.5},
         "selector": {"name": "uniform", "clients_per_round": 10}, "eval": {"every": 2},
         "output": {"progress": False, "plots": False}, "runtime": {"checkpoint_every_rounds": 2},
         "variants": [{"name": "K=5", "set": {"selector.clients_per_round": 5}}, {"name": "K=10"}]}
#: one unit whose rounds train on the ``ray`` executor (SCAFFOLD: the driver keeps client state between rounds)
ONE_UNIT = {**{k: v for k, v in SMALL.items() if k != "variants"}, "name": "ray_executor", "seeds": [0],
            "algorithm": {"name": "scaffold"}}
TABLES = ("rounds.csv", "clients.csv")


def turnout(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "turnout", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=_clean_env(), timeout=900)


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("TURNOUT_")}


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "turnout", *map(str, args)], cwd=ROOT, env=_clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def write(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def hold(marker: Path, at: str) -> dict:
    return {"TURNOUT_HOLD_AT": at, "TURNOUT_HOLD_FILE": str(marker)}


def wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    t0 = time.monotonic()
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before reaching its hold point: {proc.communicate()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail(f"no hold point reached in {timeout:g} s")
        time.sleep(0.2)
    time.sleep(0.5)  # the held worker is now waiting, its work in flight


def assert_same_tables(a: Path, b: Path) -> None:
    for table in TABLES:
        assert (a / table).read_bytes() == (b / table).read_bytes(), table


@pytest.fixture
def cluster():
    """A head node with one CPU slot; tests add worker nodes (each one CPU slot: one unit or actor per node)."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    yield c
    c.shutdown()


def test_a_two_node_ray_sweep_uses_both_nodes_and_gives_the_tables_of_one_job(tmp_path):
    from ray.cluster_utils import Cluster

    cfg = write(tmp_path / "two_nodes.yaml", SMALL)
    r = turnout("run", cfg, "--out", tmp_path / "ref", "--quiet")
    assert r.returncode == 0, r.stderr

    markers = {node: tmp_path / f"crashed-on-{node}" for node in ("head", "worker")}
    crash = {node: {"TURNOUT_CRASH_AT": "round@3", "TURNOUT_CRASH_ONCE": str(m)} for node, m in markers.items()}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "env_vars": crash["head"]})
    try:
        cluster.add_node(num_cpus=1, env_vars=crash["worker"])
        cluster.wait_for_nodes()
        r = turnout("run", cfg, "--out", tmp_path / "ray", "--backend", "ray", "--address", cluster.address,
                    "--quiet")
    finally:
        cluster.shutdown()
    assert r.returncode == 0, r.stderr
    assert markers["head"].exists() and markers["worker"].exists()  # a unit ran (and lost a worker) on each node
    assert_same_tables(tmp_path / "ray", tmp_path / "ref")


def test_a_worker_node_removed_mid_sweep_loses_nothing(tmp_path, cluster):
    cfg = write(tmp_path / "two_nodes.yaml", SMALL)
    r = turnout("run", cfg, "--out", tmp_path / "ref", "--quiet")
    assert r.returncode == 0, r.stderr
    held = tmp_path / "held"
    node = cluster.add_node(num_cpus=1, env_vars=hold(held, "round@3"))  # its first unit stops at round 3
    cluster.wait_for_nodes()
    run = start("run", cfg, "--out", tmp_path / "ray", "--backend", "ray", "--address", cluster.address, "--quiet")
    wait_for(held, run)
    cluster.remove_node(node, allow_graceful=False)  # the machine is gone, with the unit it was running
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err
    assert_same_tables(tmp_path / "ray", tmp_path / "ref")


def _executor_config(tmp_path: Path, address: str) -> tuple[Path, Path]:
    ref = write(tmp_path / "sequential.yaml", {**ONE_UNIT, "executor": {"name": "sequential"}})
    on_ray = write(tmp_path / "ray.yaml", {**ONE_UNIT, "executor": {"name": "ray", "actors": 2, "address": address,
                                                                     "start_timeout_s": 30}})
    return ref, on_ray


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def _run_with_a_worker_node(cluster, cfg: Path, out: Path, lose_at: str | None = None) -> dict:
    """Run ``cfg`` into ``out`` with a worker node (one CPU slot) added to the cluster and removed afterwards; with
    ``lose_at``, removed at once when a Ray worker on it reaches that hold point. Returns the unit's summary."""
    held = out.with_name(out.name + ".held")
    node = cluster.add_node(num_cpus=1, env_vars=hold(held, lose_at) if lose_at else {})
    cluster.wait_for_nodes()
    run = start("run", cfg, "--out", out, "--quiet")
    if lose_at:
        wait_for(held, run)
        cluster.remove_node(node, allow_graceful=False)
    _, err = run.communicate(timeout=600)
    assert run.returncode == 0, err
    if not lose_at:
        cluster.remove_node(node)
    [unit] = _summary(out)["runs"]
    return unit


def test_ray_executor_actors_on_two_nodes_and_a_node_lost_mid_round(tmp_path, cluster):
    ref_cfg, ray_cfg = _executor_config(tmp_path, cluster.address)
    r = turnout("run", ref_cfg, "--out", tmp_path / "ref", "--quiet")
    assert r.returncode == 0, r.stderr

    unit = _run_with_a_worker_node(cluster, ray_cfg, tmp_path / "two")
    assert_same_tables(tmp_path / "two", tmp_path / "ref")
    assert (unit["ray_actors"], unit["ray_nodes"], unit["ray_actors_lost"]) == (2, 2, 0)

    unit = _run_with_a_worker_node(cluster, ray_cfg, tmp_path / "lost", lose_at="ray-train@3")  # round 2's chunk
    assert_same_tables(tmp_path / "lost", tmp_path / "ref")
    assert (unit["ray_nodes"], unit["ray_actors_lost"]) == (2, 1)  # the replacement never started: no free slot


def _float_rows(run: Path) -> list[dict]:
    with open(run / "rounds.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_partial_sums_on_two_nodes_and_a_node_lost_before_it_summed(tmp_path, cluster):
    """``partial_sums``: actors on both nodes keep their reports and send sums (within the stated tolerance of
    sequential); a worker node removed after its actor trained round 1, before it summed, changes no byte."""
    fedavg = {**ONE_UNIT, "algorithm": {"name": "fedavg", "server_momentum": 0.5}}
    ref_cfg = write(tmp_path / "sequential.yaml", {**fedavg, "executor": {"name": "sequential"}})
    sums_cfg = write(tmp_path / "sums.yaml", {**fedavg, "executor": {
        "name": "ray", "actors": 2, "address": cluster.address, "start_timeout_s": 30, "partial_sums": True}})
    r = turnout("run", ref_cfg, "--out", tmp_path / "ref", "--quiet")
    assert r.returncode == 0, r.stderr

    unit = _run_with_a_worker_node(cluster, sums_cfg, tmp_path / "sums")
    assert (unit["ray_actors"], unit["ray_nodes"], unit["ray_actors_lost"], unit["partial_sums"]) == (2, 2, 0, True)
    summed, exact = _float_rows(tmp_path / "sums"), _float_rows(tmp_path / "ref")
    assert [r.keys() for r in summed] == [r.keys() for r in exact]
    for a, b in zip(summed, exact):
        for key in a:
            if a[key] != b[key]:  # only floats differ, within the stated tolerance
                assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-5, abs=1e-6), key

    unit = _run_with_a_worker_node(cluster, sums_cfg, tmp_path / "lost", lose_at="ray-sum@2")  # round 1's sum
    assert_same_tables(tmp_path / "lost", tmp_path / "sums")  # its chunk trained again on the head, summed alike
    assert (unit["ray_nodes"], unit["ray_actors_lost"]) == (2, 1)


def test_a_lost_head_is_one_line_and_the_run_resumes(tmp_path, cluster):
    cfg = write(tmp_path / "two_nodes.yaml", SMALL)
    r = turnout("run", cfg, "--out", tmp_path / "ref", "--quiet")
    assert r.returncode == 0, r.stderr
    held = tmp_path / "held"
    cluster.add_node(num_cpus=1, env_vars=hold(held, "round@3"))
    cluster.wait_for_nodes()
    run = start("run", cfg, "--out", tmp_path / "ray", "--backend", "ray", "--address", cluster.address, "--quiet")
    wait_for(held, run)
    address = cluster.address
    cluster.remove_node(cluster.head_node, allow_graceful=False)
    out, err = run.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert run.returncode == 2, err  # as every turnout error
    assert len(lines) == 1 and lines[0].startswith(f"turnout: error: --backend ray: the Ray cluster at {address} "
                                                   "stopped answering ("), err
    assert "the run folder is intact: resume it with `turnout resume" in lines[0]
    r = turnout("resume", tmp_path / "ray.partial", "--quiet")
    assert r.returncode == 0, r.stderr
    assert_same_tables(tmp_path / "ray", tmp_path / "ref")


def test_a_lost_head_under_the_ray_executor_leaves_a_run_that_resumes_on_this_machine(tmp_path, cluster):
    """With the ``ray`` executor the run's own process is Ray's driver, and Ray ends it when the head goes;
    the folder is intact, and ``turnout resume --set executor.name=sequential`` finishes it with the tables
    of an uninterrupted run."""
    ref_cfg, ray_cfg = _executor_config(tmp_path, cluster.address)
    r = turnout("run", ref_cfg, "--out", tmp_path / "ref", "--quiet")
    assert r.returncode == 0, r.stderr
    held = tmp_path / "held"
    cluster.add_node(num_cpus=1, env_vars=hold(held, "ray-train@3"))
    cluster.wait_for_nodes()
    run = start("run", ray_cfg, "--out", tmp_path / "ray", "--quiet")
    wait_for(held, run)
    cluster.remove_node(cluster.head_node, allow_graceful=False)
    run.communicate(timeout=300)
    assert run.returncode != 0
    r = turnout("resume", tmp_path / "ray.partial", "--set", "executor.name=sequential", "--quiet")
    assert r.returncode == 0, r.stderr
    assert_same_tables(tmp_path / "ray", tmp_path / "ref")
