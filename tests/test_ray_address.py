"""A Ray address nobody answers at is one line at once (``ray.init`` would retry for minutes), before any
run folder exists: for ``--address`` and for ``executor.address``."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from turnout.core.errors import ConfigError
from turnout.core.ray_address import check_head

ROOT = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free once closed: nothing listens there


def test_check_head_accepts_a_listening_port_and_skips_local_and_auto():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        check_head(f"127.0.0.1:{port}", "--address")
        check_head(f"ray://127.0.0.1:{port}", "--address")
    check_head(None, "--address")
    check_head("auto", "--address")


@pytest.mark.parametrize("address,why", [("nonsense", "is not a Ray address: give HOST:PORT"),
                                         ("host:port", "is not a Ray address"),
                                         ("127.0.0.1:{closed}", "no Ray head answers there (connection refused); "
                                                                "start one with `ray start --head --port {closed}`"),
                                         ("ray://127.0.0.1:{closed}", "no Ray head answers there")])
def test_check_head_refuses_in_one_line_naming_the_key(address, why):
    closed = closed_port()
    with pytest.raises(ConfigError) as err:
        check_head(address.format(closed=closed), "executor.address")
    assert err.value.key == "executor.address" and why.format(closed=closed) in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("args,key", [(["--backend", "ray", "--address"], "--address"),
                                      (["--set", "executor.name=ray", "--set"], "executor.address")])
def test_the_cli_refuses_a_dead_address_before_making_a_folder(tmp_path, args, key):
    pytest.importorskip("ray")
    address = f"127.0.0.1:{closed_port()}"
    last = address if key == "--address" else f"executor.address={address}"
    r = subprocess.run([sys.executable, "-m", "turnout", "run", "experiments/quickstart.yaml", "--set", "rounds=2",
                        "--out", tmp_path / "run", "--quiet", *args, last], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 2
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("turnout: error: ") and f"{key} = '{address}': no Ray head answers there" in line
    assert list(tmp_path.iterdir()) == []
