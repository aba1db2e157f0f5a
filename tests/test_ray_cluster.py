"""A ``--backend ray`` sweep on a two-node Ray cluster (head + one worker node, each its own raylet and object
store, started and stopped here) gives the tables of ``--jobs 1``.

Each node is one CPU, so two units run at once only one per node. To see where units ran without
asking turnout, each node's raylet (and so every Ray worker it starts) carries its own crash point:
the first Ray worker on that node to reach its third round is killed, once, leaving a marker file
named after the node. Both markers existing shows units ran on both nodes — and that each node's
lost worker had its unit resumed from its checkpoint, since the tables still equal ``--jobs 1``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"name": "two_nodes", "seeds": [0, 1], "rounds": 6,
         "data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "num_clients": 30, "variant": "fedprox"},
         "model": {"name": "logreg"}, "train": {"batch_size": 50, "local_steps": 5, "lr": 0.2},
         "algorithm": {"name": "fedavg", "server_momentum": 0.5},
         "selector": {"name": "uniform", "clients_per_round": 10}, "eval": {"every": 2},
         "output": {"progress": False, "plots": False}, "runtime": {"checkpoint_every_rounds": 2},
         "variants": [{"name": "K=5", "set": {"selector.clients_per_round": 5}}, {"name": "K=10"}]}
CRASH = ("TURNOUT_CRASH_AT", "TURNOUT_CRASH_ONCE")


def turnout(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in CRASH}
    return subprocess.run([sys.executable, "-m", "turnout", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=900)


def test_a_two_node_ray_sweep_uses_both_nodes_and_gives_the_tables_of_one_job(tmp_path):
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cfg = tmp_path / "two_nodes.yaml"
    cfg.write_text(yaml.safe_dump(SMALL, sort_keys=False))
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
    for table in ("rounds.csv", "clients.csv"):
        assert (tmp_path / "ray" / table).read_bytes() == (tmp_path / "ref" / table).read_bytes(), table
