"""Bounded YAML reading: deep nesting, alias bombs, recursive aliases and control characters are refused
with one line naming where, before any Python object is built; ordinary files load as before."""

from __future__ import annotations

import time

import pytest
import yaml

from turnout.config import safe_yaml
from turnout.config.safe_yaml import MAX_DEPTH, MAX_NODES, BadYaml, load


def billion_laughs(levels: int = 9, fanout: int = 9) -> str:
    """The classic alias bomb: each level repeats the previous one ``fanout`` times (9^9 strings at level 9)."""
    text = 'a0: &a0 ["lol"]\n'
    for i in range(1, levels + 1):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fanout) + "]\n"
    return text + f"rounds: *a{levels}\n"


def test_ordinary_experiment_text_loads_like_safe_load():
    text = ("name: quickstart\nseeds: [0, 1, 2]\nrounds: 300\n"
            "train: {batch_size: 50, lr: 0.2, lr_schedule: {name: exponential, gamma: 0.995}}\n"
            "variants:\n  - {name: K=5,  set: {selector.clients_per_round: 5}}\n"
            "output: {plots: off}\nbase: &b {name: uniform, clients_per_round: 10}\nselector: *b\n")
    assert load(text) == yaml.safe_load(text)


def test_exponent_floats_without_a_dot_are_numbers():
    """YAML 1.1 (PyYAML) reads `1e-3` as a string; experiment files mean the number."""
    got = load("lr: 1e-3\nn: 2E6\nneg: -5e+2\nplain: 1.5e3\nword: e5\nversion: 1.2.3\n")
    assert got == {"lr": 0.001, "n": 2e6, "neg": -500.0, "plain": 1500.0, "word": "e5", "version": "1.2.3"}
    assert isinstance(got["n"], float)


@pytest.mark.parametrize("text", ["x: " + "[" * 1000 + "]" * 1000,
                                  "".join("  " * i + f"k{i}:\n" for i in range(1000)) + "  " * 1000 + "v: 1\n"])
def test_deep_nesting_is_refused_while_composing(text):
    with pytest.raises(BadYaml) as exc:
        load(text)
    assert f"nested more than {MAX_DEPTH} levels" in exc.value.problem
    assert "(line " in exc.value.where


def test_nesting_up_to_the_limit_loads_and_one_more_level_does_not():
    depth = MAX_DEPTH - 2  # the mapping is one level and the scalar another
    value = load("x: " + "[" * depth + "1" + "]" * depth)["x"]
    for _ in range(depth):
        value = value[0]
    assert value == 1
    with pytest.raises(BadYaml):
        load("x: " + "[" * (depth + 1) + "1" + "]" * (depth + 1))


def test_alias_bomb_is_refused_before_it_expands():
    t0 = time.perf_counter()
    with pytest.raises(BadYaml) as exc:
        load(billion_laughs())
    assert time.perf_counter() - t0 < 5.0  # measured on the node graph, never expanded
    assert f"expands to more than {MAX_NODES:,} values" in exc.value.problem
    assert exc.value.where == " (line 7, column 5)"  # a6 is the first level past 10^6 nodes (about 1.13 million)


def test_aliases_that_nest_past_the_depth_limit_are_refused():
    """Each anchor is shallow, but chaining aliases nests them: the expanded depth counts."""
    text = "d0: &d0 [[[[[[[[1]]]]]]]]\n" + "".join(
        f"d{i}: &d{i} [[[[[[[[*d{i - 1}]]]]]]]]\n" for i in range(1, 6))
    with pytest.raises(BadYaml) as exc:
        load(text)
    assert "levels deep once aliases are expanded" in exc.value.problem


def test_recursive_alias_is_refused():
    with pytest.raises(BadYaml) as exc:
        load("a: &a [1, *a]\n")
    assert "recursive" in exc.value.problem


def test_modest_anchor_reuse_is_fine():
    text = "base: &b {name: synthetic, num_clients: 30}\n" + "".join(f"v{i}: *b\n" for i in range(200))
    got = load(text)
    assert got["v199"] == {"name": "synthetic", "num_clients": 30}


@pytest.mark.parametrize("char,line,column", [("\x00", 2, 8), ("\x1b", 2, 8), ("\x07", 2, 8), ("\x7f", 2, 8)])
def test_control_characters_are_named_with_line_and_column(char, line, column):
    with pytest.raises(BadYaml) as exc:
        load(f"rounds: 2\nname: a{char}b\n")
    assert f"U+{ord(char):04X}" in exc.value.problem
    assert exc.value.where == f" (line {line}, column {column})"


def test_tabs_newlines_and_unicode_are_allowed():
    assert load("name: \"über\tα\"\r\nrounds: 2\n") == {"name": "über\tα", "rounds": 2}


@pytest.mark.parametrize("text,needle", [
    ("rounds: [1, 2\n", "not valid YAML"),
    ("a: 1\n---\nb: 2\n", "not valid YAML"),
    ("day: !!timestamp 2021-13-45\n", "day is a timestamp (!!timestamp)"),  # untagged, a date is text
    ("n: " + "9" * 5000 + "\n", "cannot be read"),
    ("? [a, b]\n: 1\n", "not valid YAML"),
])
def test_every_other_failure_is_one_bad_yaml_line(text, needle):
    with pytest.raises(BadYaml) as exc:
        load(text)
    assert needle in exc.value.problem
    assert "\n" not in str(exc.value)


def test_oversized_text_is_refused_without_parsing(monkeypatch):
    monkeypatch.setattr(safe_yaml, "MAX_CHARS", 100)
    with pytest.raises(BadYaml) as exc:
        load("x: " + "1" * 200)
    assert "203 characters long; the limit is 100" in exc.value.problem
