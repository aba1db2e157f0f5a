"""User values in error messages are shown bounded: one short line, in microseconds, whatever the value."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from turnout.core.errors import SHOWN_CHARS, ConfigError, shown

ROOT = Path(__file__).resolve().parents[1]


def self_referencing():
    a = []
    a.append(a)
    d = {}
    d["self"] = d
    return [a, d]


def shared(levels: int = 60):
    """A list and a dict whose full repr would have 2**60 parts (60 levels, each shared twice)."""
    x, d = [], {}
    for _ in range(levels):
        x, d = [x, x], {"a": d, "b": d}
    return [x, d]


def shared_tuples(levels: int = 60):
    t = ()
    for _ in range(levels):
        t = (t, t)
    return t


class BrokenRepr:
    def __repr__(self):
        raise RuntimeError("no repr")


VALUES = {
    "self-referencing": self_referencing(),
    "exponentially shared": shared(),
    "shared tuples": shared_tuples(),
    "yaml alias bomb": yaml.safe_load("a: &a [x, x, x, x, x, x, x, x, x]\n"
                                      + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
                                                for p, c in zip("abcdefgh", "bcdefghi"))),
    "huge string": "s" * 10**8,
    "huge bytes": b"b" * 10**8,
    "huge bytearray": bytearray(10**7),
    "numpy str": np.str_("n" * 10**6),
    "huge int": 10**100_000,
    "big dict": {i: i for i in range(10**6)},
    "big set": set(range(10**6)),
    "big array": np.arange(10**7),
    "broken repr": BrokenRepr(),
}


@pytest.mark.parametrize("name", list(VALUES))
def test_any_value_formats_in_bounded_time(name):
    t0 = time.perf_counter()
    msg = str(ConfigError("some.key", VALUES[name], "the fix"))
    assert time.perf_counter() - t0 < 0.1, name
    assert msg.startswith("some.key = ") and msg.endswith(": the fix") and "\n" not in msg, msg
    assert len(msg) <= len("some.key = : the fix") + SHOWN_CHARS, msg


def test_plain_values_show_as_before():
    for v in ("ten", 2.5, -1, None, True, [1, 2, 3], {"a": 1}, (1,), "x" * 70):
        assert shown(v) == repr(v)
    assert str(ConfigError("rounds", "ten", "must be an integer")) == "rounds = 'ten': must be an integer"
    assert shown(10**400) == "<int of 1329 bits>"
    assert shown(BrokenRepr()).startswith("<BrokenRepr instance")
    assert len(shown("y" * 1000)) <= SHOWN_CHARS


def test_yaml_alias_bomb_through_the_cli(tmp_path):
    """A config whose value expands to 9**9 strings: one line, at once, in a capped process."""
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    base = {"name": "bomb", "seeds": [0], "data": {"name": "synthetic", "num_clients": 6, "alpha": 0.5, "beta": 0.5},
            "model": {"name": "logreg"}, "selector": {"name": "uniform", "clients_per_round": 1},
            "output": {"progress": False, "plots": False}}
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text("\n".join(lines) + "\nrounds: *i\n" + yaml.safe_dump(base))

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "turnout", "run", str(cfg), "--out", str(tmp_path / "run"), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=cap)
    assert time.perf_counter() - t0 < 60
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.startswith("turnout: error: ") and len(proc.stderr) < 300, proc.stderr
    assert not (tmp_path / "run").exists()
