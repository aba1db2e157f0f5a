"""Reading experiment input: ``--set`` onto default blocks, empty files, and arbitrary text or nested
values always ending in a valid config or one ``ConfigError`` line (never another exception)."""

from __future__ import annotations

import copy

import pytest

from turnout.config.loader import parse_override, read_yaml
from turnout.core.errors import ConfigError
from turnout.sim.composition import expand

BASE = {"rounds": 2, "data": {"name": "synthetic", "num_clients": 6},
        "selector": {"name": "uniform", "clients_per_round": 3}}


# ---------------------------------------------------------------------------------------------
# overrides land on top of the default block


def test_set_on_a_block_the_file_leaves_to_its_default():
    exp = expand(copy.deepcopy(BASE), {"devices.down_kBps": 100})[0]
    assert exp["devices"].name == "homogeneous"
    assert exp["devices"].cfg.down_kBps == 100 and exp["devices"].cfg.up_kBps == 3286.0


def test_set_inside_a_default_block_in_a_variant():
    raw = {**copy.deepcopy(BASE), "variants": [{"name": "slow", "set": {"devices.up_kBps": 50}}]}
    exp = expand(raw)[0]
    assert (exp["devices"].name, exp["devices"].cfg.up_kBps) == ("homogeneous", 50)


def test_set_data_option_without_a_data_block_keeps_the_default_dataset():
    raw = {"rounds": 2, "selector": {"name": "uniform", "clients_per_round": 3}}
    exp = expand(raw, {"data.num_clients": 12})[0]
    assert exp["data"].name == "synthetic" and exp["data"].cfg.num_clients == 12


def test_set_name_of_a_default_block_swaps_the_component():
    exp = expand(copy.deepcopy(BASE), {"devices.name": "flash"})[0]
    assert exp["devices"].name == "flash"


# ---------------------------------------------------------------------------------------------
# the file


@pytest.mark.parametrize("text", ["", "# only a comment\n\n# and another\n", "---\n", "{}\n", "   \n"])
def test_empty_or_comment_only_file_is_refused_with_what_a_minimal_file_needs(tmp_path, text):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        read_yaml(path)
    message = str(exc.value)
    assert message.startswith(f"config = '{path}': is empty")
    assert "rounds: 50" in message and "data: {name: synthetic" in message


def test_file_errors_name_line_and_column(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("rounds: 2\nselector: {name: uniform,\n  clients_per_round: 3\nseeds: [0]\n")
    with pytest.raises(ConfigError) as exc:
        read_yaml(path)
    assert "not valid YAML" in str(exc.value) and "(line " in str(exc.value)


# ---------------------------------------------------------------------------------------------
# --set text

SET_TEXTS = {
    "empty value": ("a=", ("a", "")),
    "not YAML: kept as text": ("a=[1,", ("a", "[1,")),
    "a colon in the value": ("a.b.c=: x", ("a.b.c", ": x")),
    "a python tag: kept as text": ("a=!!python/object:os.system ls", ("a", "!!python/object:os.system ls")),
    "an exponent float": ("train.lr=1e-3", ("train.lr", 0.001)),
    "a flow mapping": ("selector={name: md, clients_per_round: 4}",
                       ("selector", {"name": "md", "clients_per_round": 4})),
}


@pytest.mark.parametrize("text,expected", list(SET_TEXTS.values()), ids=list(SET_TEXTS))
def test_set_text_that_parses(text, expected):
    assert parse_override(text) == expected


BAD_SET_TEXTS = {
    "NUL": ("name=a\x00b", "--set name = 'a\\x00b': contains the character U+0000"),
    "deep": ("data=" + "[" * 1000 + "]" * 1000, "nested more than 32 levels"),
    "recursive alias": ("a=&x [*x]", "recursive"),
    "timestamp": ("a=!!timestamp 2021-13-45", "a timestamp (!!timestamp)"),  # an untagged date is text
    "5,000 digits": ("rounds=" + "9" * 5000, "cannot be read"),
    "no equals": ("rounds", "expected KEY=VALUE"),
    "not text": (5, "expected KEY=VALUE"),
}


@pytest.mark.parametrize("text,needle", list(BAD_SET_TEXTS.values()), ids=list(BAD_SET_TEXTS))
def test_bad_set_text_is_one_config_error(text, needle):
    with pytest.raises(ConfigError) as exc:
        parse_override(text)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


# ---------------------------------------------------------------------------------------------
# arbitrary nested values handed to expand


def _deep(levels: int) -> list:
    out = node = []
    for _ in range(levels):
        node.append([])
        node = node[0]
    return out


def _self_containing() -> dict:
    d: dict = {"name": "uniform"}
    d["self"] = d
    return d


ODD_VALUES = {
    "5,000-deep list": ({"rounds": _deep(5000)}, "rounds = '<a list>': nested more than 32 levels"),
    "self-containing block": ({"selector": _self_containing()}, "selector = '<a dict>': nested more than 32 levels"),
    "deep value in a variant": ({"variants": [{"name": "v", "set": {"rounds": _deep(100)}}]}, "nested more than"),
    "None as a key": ({None: 1}, "Keys should be strings"),
    "an int key in a variant set": ({"variants": [{"name": "v", "set": {1: 2}}]}, "variants.0.set.1"),
    "a list as component name": ({"data": {"name": ["x"]}}, "data.name = ['x']: must be a string"),
    "bytes as rounds": ({"rounds": b"x"}, "rounds = b'x'"),
    "complex as rounds": ({"rounds": 1j}, "rounds = 1j"),
    "a megabyte key in a variant set": ({"variants": [{"name": "v", "set": {"x" * 10**6: 1}}]}, "unknown key"),
}


@pytest.mark.parametrize("change,needle", list(ODD_VALUES.values()), ids=list(ODD_VALUES))
def test_odd_nested_values_give_one_bounded_config_error(change, needle):
    with pytest.raises(ConfigError) as exc:
        expand({**copy.deepcopy(BASE), **change})
    message = str(exc.value)
    assert needle in message and "\n" not in message and len(message) < 600


def test_a_config_that_is_not_a_mapping():
    with pytest.raises(ConfigError, match="must be a mapping"):
        expand([1, 2])
