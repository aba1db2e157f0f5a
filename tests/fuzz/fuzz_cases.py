"""Hypothesis strategies for the four kinds of user input: experiment files, ``--set`` values, trace
``.npz`` files and FedScale pickles.

Each strategy mutates a small valid input. Mutations that make the input wrong by construction (an
unknown key, a size beyond its bound, nesting deeper than 32 levels) are flagged ``must_refuse``, so
that the harness also checks that they are refused, not just that nothing crashes. Everything else
may be accepted or refused. Accepted experiments must stay tiny, so :func:`clamp` caps run-size
options (rounds, clients, local steps, seeds, variants, ...) at a few units before a case is written,
unless the mutation is about size — those are all beyond a bound or beyond any machine's memory,
and must be refused before any work.
"""

from __future__ import annotations

import copy
import datetime
import io
import math
import pickle
import struct
import types
import typing
import warnings
import zipfile
from typing import Any

import numpy as np
import yaml
from annotated_types import Ge, Gt, Le, Lt
from hypothesis import strategies as st
from pydantic import BaseModel

from turnout.config.limits import MAX_CLIENTS, MAX_ROUNDS
from turnout.data.registry import PARTITIONERS
from turnout.sim.catalogue import BLOCKS, registries

# ---------------------------------------------------------------------------------------------
# experiments

#: The tiny valid experiment every experiment and ``--set`` case starts from (2 rounds, 12 clients).
BASE: dict[str, Any] = {
    "name": "fuzz", "seeds": [0], "rounds": 2,
    "data": {"name": "synthetic", "num_clients": 12, "alpha": 0.5, "beta": 0.5, "dim": 10},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "selector": {"name": "uniform", "clients_per_round": 3},
    "eval": {"every": 1},
    "output": {"progress": False, "plots": False},
}

#: Run-size options (by their last key) and the largest value a fuzzed run may use.
CAPS: dict[str, int | float] = {
    "rounds": 2, "num_clients": 12, "dim": 20, "num_classes": 10, "min_samples": 60, "local_steps": 4,
    "local_epochs": 1, "centralized_epochs": 2, "clients_per_round": 12, "d": 12, "d_end": 12, "keep": 12,
    "sticky_size": 12, "sticky_per_round": 12, "m": 12, "block": 12, "num_traces": 12, "days": 2,
    "max_clients": 12, "max_samples_per_client": 100, "seq_len": 20, "embed_dim": 16, "hidden": 32, "layers": 2,
    "torch_threads": 1, "node_limit": 500, "max_swaps": 200, "heuristic_starts": 4, "limit_train": 2000,
    "limit_test": 500, "max_tries": 50, "shards_per_client": 10, "probe_batch": 64, "oracle_samples": 8,
    "exact_max_available": 12, "max_sessions_per_day": 8, "batch_size": 256, "width_mult": 1.0,
    "sketch_dim": 4096, "history_bins": 24, "min_pairs": 4, "init_reward_cap": 1000,
}
#: Values above this are beyond every option's bound: left alone, they must be refused.
SANE = 10**8
#: Most seeds, explicit variants, grid values a fuzzed run keeps.
MAX_SEEDS, MAX_VARIANTS, MAX_GRID = 2, 2, 2

#: Components a fuzzed run may switch to: cheap ones. Big image models (resnet18_gn, ...) take seconds
#: on 8x8 digits; fashion_mnist and shakespeare read tens of MB; they are left out.
CHEAP = {
    "data": ["synthetic", "digits", "mnist", "leaf_json"],
    "model": ["logreg", "mlp", "cnn_fedsum_mnist", "cnn_fedavg", "char_lstm"],
}
BIG_MODELS = {"resnet18_gn", "mobilenet_v2", "shufflenet_v2", "cnn_fedsum_cifar10", "cnn_fedsum_svhn"}

EXTREME_NUMBERS = [
    0, -0.0, 1, -1, 2, 0.5, 1e-3, -1e-3, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64,
    -(2**63) - 1, 10**30, 10**400, 1e-320, 5e-324, 2.2250738585072014e-308, 1e308, -1e308, 1.7976931348623157e308,
    float("inf"), float("-inf"), float("nan"), 1e6, 1e7, 1e10, 3.0, 12.0, 100, 1000, 10**6, 10**7,
]
SPECIAL_STRINGS = [
    "", " ", "inf", ".inf", "-.inf", "nan", ".NaN", "1e3", "1e-3", "0x10", "0o17", "0b101", "1_000", "1:30",
    "true", "yes", "no", "on", "off", "~", "null", "None", "2021-13-45", "synthetic", "uniform", "logreg", "..",
    "../../etc/passwd", "/dev/zero", "/dev/urandom", "/dev/null", "/proc/self/status", "/etc", "/", ".",
    "/nonexistent/x.npz", "*a", "&a", "!!python/object:os.system", "- a", "a: b", "{", "[", "'", '"', "#",
    "\u2028", "\u202e", "\ufeff", "é", "\x1b[31m", "\x7f", "\x85", "a\nb", "a\tb", "\r", "$HOME", "%s%n",
    "{name: uniform}", "[1, 2]", "NUL\x00", "\ud7ff", "\U0010ffff",
]
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


def one_in(n: int) -> st.SearchStrategy:
    """True once in ``n`` draws (``sampled_from`` draws uniformly; small integers are drawn far more often)."""
    return st.sampled_from([False] * (n - 1) + [True])


def scalars() -> st.SearchStrategy:
    """Leaf values of every kind YAML can carry, biased to the extremes."""
    return st.one_of(
        st.none(), st.booleans(), st.sampled_from(EXTREME_NUMBERS), st.sampled_from(SPECIAL_STRINGS),
        st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), TEXT,
        st.builds(lambda n, c: c * n, st.sampled_from([200, 5000, 100_000]), st.sampled_from(["x", "é", "\t", "7"])),
        st.dates(min_value=datetime.date(1, 1, 1)), st.binary(max_size=12),
    )


def values(depth: int = 2) -> st.SearchStrategy:
    """Scalars, and small lists and mappings of them (keys of odd types too)."""
    if depth <= 0:
        return scalars()
    inner = values(depth - 1)
    keys = st.one_of(TEXT, st.integers(-5, 5), st.booleans(), st.none(), st.sampled_from(["name", "<<", "1.5"]))
    return st.one_of(scalars(), st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4))


def nested(depth: int, leaf: Any = 1, kind: str = "list") -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if kind == "list" else {f"k{i}": value}
    return value


def _bounds(info) -> tuple[float | None, float | None, bool, bool]:
    lo = hi = None
    lo_open = hi_open = False
    for m in info.metadata:
        if isinstance(m, Ge):
            lo = m.ge
        elif isinstance(m, Gt):
            lo, lo_open = m.gt, True
        elif isinstance(m, Le):
            hi = m.le
        elif isinstance(m, Lt):
            hi, hi_open = m.lt, True
    return lo, hi, lo_open, hi_open


def _leaf_types(annotation) -> tuple[list, list, type | None]:
    """(plain types, Literal choices, nested model) a field annotation allows."""
    plain, choices, model = [], [], None
    todo = [annotation]
    while todo:
        t = todo.pop()
        origin = typing.get_origin(t)
        if origin is typing.Literal:
            choices.extend(typing.get_args(t))
        elif origin in (typing.Union, types.UnionType):
            todo.extend(typing.get_args(t))
        elif origin is typing.Annotated:
            todo.append(typing.get_args(t)[0])
        elif isinstance(t, type) and issubclass(t, BaseModel):
            model = t
        else:
            plain.append(t)
    return plain, choices, model


def field_values(info, depth: int = 1, valid_weight: int = 3) -> st.SearchStrategy:
    """Values for one config option: mostly valid ones (in range, its choices), also its edges, just
    beyond them, and hostile values of any type."""
    plain, choices, model = _leaf_types(info.annotation)
    lo, hi, lo_open, hi_open = _bounds(info)
    valid: list[st.SearchStrategy] = []
    other: list[st.SearchStrategy] = [scalars()]
    numeric = [t for t in plain if t in (int, float)]
    if numeric:
        edges = [v for v in (lo, hi) if v is not None]
        other.append(st.sampled_from(edges + [e + d for e in edges for d in (-1, 1, -1e-9, 1e-9)] + [0, 1, 2]))
        low = lo if lo is not None else -1e6
        high = min(hi if hi is not None else 1e6, SANE)
        if int in numeric and float not in numeric:
            valid.append(st.integers(int(math.ceil(low + lo_open)), int(math.floor(high - hi_open))))
        else:
            valid.append(st.floats(low, high, exclude_min=lo_open, exclude_max=hi_open))
    if choices:
        valid.append(st.sampled_from(choices))
        other.append(st.sampled_from([str(c).upper() for c in choices] + [f" {c}" for c in choices]))
    if bool in plain:
        valid.append(st.booleans())
    if str in plain:
        other.append(st.sampled_from(SPECIAL_STRINGS))
    if any(typing.get_origin(t) is list for t in plain):
        other.append(st.lists(st.one_of(st.floats(0, 1), st.integers(1, 40), scalars()), max_size=30))
    if dict in plain or any(typing.get_origin(t) is dict for t in plain):
        valid.append(partition_blocks())
    if model is not None and depth > 0:
        valid.append(model_blocks(model, depth - 1))
    if type(None) in plain:
        valid.append(st.none())
    if not valid:
        return st.one_of(other)
    return st.one_of([st.one_of(valid)] * valid_weight + [st.one_of(other)])


def model_blocks(model: type[BaseModel], depth: int = 0) -> st.SearchStrategy:
    """A mapping with some of ``model``'s options, each from :func:`field_values`."""
    fields = model.model_fields
    if not fields:
        return st.just({})
    return st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: field_values(fields[k], depth) for k in keys}))


def component_blocks(seam: str, names: list[str] | None = None) -> st.SearchStrategy:
    """``{name: <a component of seam>, <some of its options>}``."""
    reg = registries()[seam] if seam != "data.partition" else PARTITIONERS
    names = names or reg.names()
    return st.sampled_from(names).flatmap(
        lambda name: model_blocks(reg.get(name).Config).map(lambda opts: {"name": name, **opts}))


def partition_blocks() -> st.SearchStrategy:
    return component_blocks("data.partition")


def seam_names(seam: str) -> list[str]:
    if seam in CHEAP:
        return CHEAP[seam]
    return registries()[seam].names()


def unknown_names() -> st.SearchStrategy:
    return st.one_of(st.sampled_from(["Uniform", "uniform ", "fedAvg", "FEDAVG", "unif", "none_", "0", ""]),
                     st.text(st.characters(codec="ascii", categories=("Ll", "Nd")), min_size=1, max_size=12)
                     .map(lambda s: "zz" + s))


def _mappings(tree: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every mapping in ``tree`` (the root included)."""
    out = []
    if isinstance(tree, dict):
        out.append(path)
        for k, v in tree.items():
            out += _mappings(v, path + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _mappings(v, path + (i,))
    return out


def _leaves(tree: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every entry (mapping value or list item) in ``tree``."""
    out = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for k, v in items:
        out.append(path + (k,))
        out += _leaves(v, path + (k,))
    return out


def _get(tree: Any, path: tuple) -> Any:
    for p in path:
        tree = tree[p]
    return tree


def _set(tree: Any, path: tuple, value: Any) -> None:
    _get(tree, path[:-1])[path[-1]] = value


def _block_of(cfg: dict, seam: str) -> dict | None:
    block = cfg.get(seam)
    if isinstance(block, str):
        block = cfg[seam] = {"name": block}
    if block is None:
        block = cfg[seam] = {"name": (BASE.get(seam) or {}).get("name") or _default_name(seam)}
    return block if isinstance(block, dict) else None


def _default_name(seam: str) -> str:
    from turnout.config.schema import ExperimentConfig

    return ExperimentConfig.model_fields[seam].get_default(call_default_factory=True)["name"]


SEAMS = ["data", "model", "algorithm", "selector", "availability", "devices", "round_mode", "compressor", "recorder"]


@st.composite
def free_mutation(draw, cfg: dict) -> str:
    """Apply one mutation that may or may not be valid; returns its description."""
    op = draw(st.sampled_from(["option"] * 5 + ["swap"] * 2 + ["block"] * 3 + ["leaf", "delete", "variants", "grid",
                                                                               "shorthand"]))
    if op == "option":  # an option of the current component, from its own Config's types and ranges
        seam = draw(st.sampled_from(SEAMS + ["data.partition"]))
        if seam == "data.partition":
            data = _block_of(cfg, "data")
            if data is None:
                return "data is not a mapping"
            data["partition"] = draw(partition_blocks())
            return f"data.partition = {data['partition']!r}"[:300]
        block = _block_of(cfg, seam)
        reg = registries()[seam]
        if block is None or not isinstance(block.get("name"), str) or block["name"] not in reg:
            return f"{seam}: no known component"
        fields = reg.get(block["name"]).Config.model_fields
        if not fields:
            return f"{seam}.{block['name']} has no options"
        key = draw(st.sampled_from(sorted(fields)))
        block[key] = draw(field_values(fields[key], valid_weight=6))
        return f"{seam}.{key} = {block[key]!r}"[:300]
    if op == "swap":  # another registered component (cheap ones), with some of its options
        seam = draw(st.sampled_from(SEAMS))
        cfg[seam] = draw(component_blocks(seam, seam_names(seam)))
        return f"{seam} = {cfg[seam]!r}"[:300]
    if op == "block":  # an option of train / lr_schedule / eval / runtime / output
        name = draw(st.sampled_from(sorted(BLOCKS)))
        model = BLOCKS[name]
        parts = name.split(".")
        node = cfg
        for p in parts:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        key = draw(st.sampled_from(sorted(model.model_fields)))
        node[key] = draw(field_values(model.model_fields[key], valid_weight=6))
        return f"{name}.{key} = {node[key]!r}"[:300]
    if op == "leaf":  # any existing entry, any value
        paths = _leaves(cfg)
        path = draw(st.sampled_from(paths))
        _set(cfg, path, draw(values()))
        return f"{'.'.join(map(str, path))} = {_get(cfg, path)!r}"[:300]
    if op == "delete":
        paths = _leaves(cfg)
        path = draw(st.sampled_from(paths))
        parent = _get(cfg, path[:-1])
        del parent[path[-1]]
        return f"deleted {'.'.join(map(str, path))}"
    if op == "variants":
        keys = st.sampled_from(["rounds", "selector.clients_per_round", "train.lr", "algorithm.name", "algorithm",
                                "algorithm.mu", "selector", "data.num_clients", "model", "seeds", "name", "variants",
                                "eval.every", "compressor.name", "availability.name", "train.local_epochs"])
        variant = st.fixed_dictionaries({"name": st.one_of(TEXT, st.sampled_from(["a", "b", "a/b", "x" * 81])),
                                         "set": st.dictionaries(keys, values(1), max_size=3)})
        cfg["variants"] = draw(st.one_of(st.lists(variant, max_size=3), values(1)))
        return f"variants = {cfg['variants']!r}"[:300]
    if op == "grid":
        keys = st.sampled_from(["train.lr", "algorithm.name", "selector.clients_per_round", "rounds", "seeds",
                                "lr", "model.hidden", "data.alpha"])
        cfg["grid"] = draw(st.one_of(st.dictionaries(keys, st.lists(values(0), max_size=3), max_size=2), values(1)))
        return f"grid = {cfg['grid']!r}"[:300]
    seam = draw(st.sampled_from(SEAMS))  # shorthand: `selector: uniform`
    cfg[seam] = draw(st.one_of(st.sampled_from(seam_names(seam)), scalars()))
    return f"{seam} = {cfg[seam]!r}"[:300]


def _numeric(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        try:
            return float(v)
        except OverflowError:
            return None
    if isinstance(v, str):
        try:
            return float(v.strip().replace("_", ""))
        except ValueError:
            return None
    return None


def _capped(key: Any, value: Any) -> Any:
    """``value`` with a run-size option at most its cap (lists and mappings walked)."""
    last = str(key).rsplit(".", 1)[-1]
    if isinstance(value, dict):
        return {k: _capped(k, v) for k, v in value.items()}
    if isinstance(value, list):
        if last == "seeds":
            value = value[:MAX_SEEDS]
        elif last == "hidden":
            value = value[:3]
        elif last == "variants":
            value = value[:MAX_VARIANTS]
        return [_capped(last if last in ("hidden", "seeds") else i, v) for i, v in enumerate(value)]
    cap = CAPS.get(last)
    x = _numeric(value)
    if cap is None or x is None or not math.isfinite(x) or not cap < x <= SANE:
        return value
    if isinstance(cap, int) and x != int(x):
        return value  # fractional: refused as it is
    if isinstance(value, str):
        return str(cap)
    return type(value)(cap) if isinstance(value, (int, float)) else cap


def clamp(cfg: Any) -> Any:
    """The experiment with every run-size option capped (also inside variants' ``set`` and ``grid``),
    big image models swapped for a small one, and at most two grid points."""
    if not isinstance(cfg, dict):
        return cfg
    out = _capped("", cfg)
    grid = out.get("grid")
    if isinstance(grid, dict):
        kept = dict(list(grid.items())[:1])
        out["grid"] = {k: (v[:MAX_GRID] if isinstance(v, list) else v) for k, v in kept.items()}
    _small_models(out)
    return out


def _small_models(tree: Any) -> None:
    if isinstance(tree, dict):
        for k, v in list(tree.items()):
            if isinstance(v, str) and v in BIG_MODELS and str(k) in ("name", "model", "model.name"):
                tree[k] = "logreg"
            else:
                _small_models(v)
    elif isinstance(tree, list):
        for v in tree:
            _small_models(v)


#: Size mutations: every one is beyond a bound or beyond any machine's memory, so it must be refused.
SIZE_MUTATIONS: list[tuple[tuple, Any, str]] = [
    (("rounds",), MAX_ROUNDS + 1, "rounds"), (("rounds",), 10**30, "rounds"), (("rounds",), 2**63, "rounds"),
    (("rounds",), 1e300, "rounds"), (("data", "num_clients"), MAX_CLIENTS + 1, "data.num_clients"),
    (("data", "num_clients"), 10**12, "data.num_clients"), (("data", "num_clients"), MAX_CLIENTS, "data"),
    (("data", "dim"), 10**6, "data.dim"), (("data", "dim"), 10**6 + 1, "data.dim"),
    (("data", "min_samples"), 10**8, "data"), (("model",), {"name": "mlp", "hidden": [10**6, 10**6]}, "model"),
    (("model",), {"name": "mlp", "hidden": [10**6 + 1]}, "model.hidden"),
    (("train", "local_steps"), 10**6 + 1, "train.local_steps"), (("train", "local_steps"), 1e30, "train.local_steps"),
    (("train", "batch_size"), 10**6 + 1, "train.batch_size"), (("train", "local_epochs"), 10**4 + 1, "train"),
    (("eval", "centralized_epochs"), 10**4 + 1, "eval.centralized_epochs"), (("eval", "every"), 10**6 + 1, "eval"),
    (("selector", "clients_per_round"), MAX_CLIENTS + 1, "selector.clients_per_round"),
    (("runtime", "state_budget_mb"), 2.0**24 + 1, "runtime.state_budget_mb"),
    (("runtime", "torch_threads"), 257, "runtime.torch_threads"), (("seeds",), list(range(101)), "seeds"),
    (("seeds",), [2**32], "seeds"), (("seeds",), [-1], "seeds"),
    (("variants",), [{"name": f"v{i}", "set": {}} for i in range(201)], "variants"),
    (("grid",), {"train.lr": [0.01 * (i + 1) for i in range(40)], "train.momentum": [i / 30 for i in range(30)]},
     "grid"),
    (("availability",), {"name": "trace", "num_traces": 10**8}, "availability"),
    (("availability",), {"name": "trace", "generator": {"days": 367}}, "availability.generator.days"),
    (("availability",), {"name": "trace", "num_traces": 10**8 + 1}, "availability.num_traces"),
    (("data", "num_classes"), 10**5 + 1, "data.num_classes"),
]


@st.composite
def refused_mutation(draw, cfg: dict) -> tuple[str, tuple[str, ...]]:
    """Apply one mutation that makes the experiment wrong; returns (description, what the error names)."""
    op = draw(st.sampled_from(["unknown_key", "unknown_name", "size", "size", "deep", "wrong_type"]))
    if op == "unknown_key":
        path = draw(st.sampled_from([p for p in _mappings(cfg) if _is_config_block(p)]))
        key = "zz_" + draw(st.text(st.characters(codec="ascii", categories=("Ll", "Nd")), max_size=8))
        _get(cfg, path)[key] = draw(values(1))
        return f"unknown key {'.'.join(map(str, path + (key,)))}", (key,)
    if op == "unknown_name":
        seam = draw(st.sampled_from(SEAMS))
        name = draw(unknown_names())
        cfg[seam] = {"name": name}
        return f"{seam}.name = {name!r}", (f"{seam}.name",)
    if op == "size":
        path, value, needle = draw(st.sampled_from(SIZE_MUTATIONS))
        node = cfg
        for p in path[:-1]:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[path[-1]] = copy.deepcopy(value)
        if path[0] == "data":  # the bound is the synthetic dataset's
            node["name"] = "synthetic"
        return f"size: {'.'.join(path)} = {str(value)[:80]}", (needle,)
    if op == "deep":
        path = draw(st.sampled_from([p for p in _mappings(cfg) if _is_config_block(p)]))
        depth = draw(st.integers(33, 120))
        key = draw(st.sampled_from(["zz_deep", "name", "seeds", "probs"]))
        _get(cfg, path)[key] = nested(depth, kind=draw(st.sampled_from(["list", "dict"])))
        return f"{depth} levels deep at {'.'.join(map(str, path + (key,)))}", ("nested",)
    key, bad = draw(st.sampled_from([
        ("rounds", st.sampled_from(["ten", True, False, 2.5, float("inf"), float("nan"), [], {}, None, -1, 0])),
        ("train", st.sampled_from([["lr", 1], "lr", 5])),
    ]))
    value = draw(bad)
    cfg[key] = value
    return f"{key} = {value!r}", (key,)


def _is_config_block(path: tuple) -> bool:
    """A mapping whose keys are options (not a variant's ``set``, a grid, or a free-form value)."""
    return not any(p in ("set", "grid") or isinstance(p, int) for p in path)


class Anchors(yaml.SafeDumper):
    """A dumper that writes shared objects as anchors and aliases (the default SafeDumper does too)."""


class NoAnchors(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


def dump(cfg: Any, flow: bool = False, anchors: bool = True, width: int = 80) -> str:
    return yaml.dump(cfg, Dumper=Anchors if anchors else NoAnchors, sort_keys=False, default_flow_style=flow,
                     allow_unicode=True, width=width)


def _share(draw, cfg: Any) -> str:
    """Make one part of ``cfg`` appear twice (written as an anchor and an alias), or contain itself."""
    paths = [p for p in _leaves(cfg) if isinstance(_get(cfg, p), (dict, list))]
    if not paths:
        return "nothing to share"
    src = draw(st.sampled_from(paths))
    targets = _leaves(cfg)
    dst = draw(st.sampled_from(targets))
    _set(cfg, dst, _get(cfg, src))
    return f"{'.'.join(map(str, dst))} aliases {'.'.join(map(str, src))}"


YAML_TOKENS = ["rounds", "data", "name", "synthetic", "seeds", "variants", "set", "grid", ":", ": ", " ", "  ", "\n",
               "- ", "[", "]", "{", "}", ",", "&a ", "*a", "&b ", "*b", "<<: ", "!!str ", "!!int ", "!!float ",
               "!!binary ", "!!set ", "!!python/name:os.system", "? ", "|", ">", "#", "'", '"', "\\", "1e3", ".inf",
               ".nan", "0x1F", "0o17", "~", "null", "true", "2", "-1", "10000000000000000000000", "\t", "---\n",
               "...\n", "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "!x ", "\ufeff", "\x85", "\u2028", "é", "\x00",
               "\x1b", "\x7f", "\r\n", "selector", "uniform", "clients_per_round", "model", "logreg"]


def text_mutation(draw, text: str) -> tuple[str, str]:
    """A text-level change of a dumped experiment: characters inserted, lines cut or repeated, tokens spliced."""
    op = draw(st.sampled_from(["insert", "truncate", "dup_line", "tabs", "splice", "alias_bomb", "recursive",
                               "merge", "documents", "tag"]))
    at = draw(st.integers(0, len(text)))
    if op == "insert":
        s = draw(st.text(min_size=1, max_size=5))
        return text[:at] + s + text[at:], f"inserted {s!r} at {at}"
    if op == "truncate":
        return text[:at], f"cut at {at}"
    lines = text.splitlines(keepends=True)
    if op == "dup_line" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        return "".join(lines[:i + 1] + lines[i:]), f"line {i} twice"
    if op == "tabs":
        return text.replace("  ", "\t"), "indentation as tabs"
    if op == "splice":
        s = "".join(draw(st.lists(st.sampled_from(YAML_TOKENS), min_size=1, max_size=8)))
        return text[:at] + s + text[at:], f"spliced {s!r} at {at}"
    if op == "alias_bomb":
        levels = draw(st.integers(3, 12))
        key = draw(st.sampled_from(["zz", "variants", "seeds", "grid", "probs"]))
        lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
        lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
        return text + "zz_anchors:\n" + "".join(f"  {ln}\n" for ln in lines) + f"{key}: *l{levels - 1}\n", \
            f"alias bomb of {levels} levels under {key}"
    if op == "recursive":
        return text + "zz_self: &r [1, *r]\n", "recursive alias"
    if op == "merge":
        return text + "zz_base: &base {name: uniform, clients_per_round: 2}\nselector: {<<: *base}\n", "merge key"
    if op == "documents":
        return text + "---\n" + text, "two documents"
    tag = draw(st.sampled_from(["!!python/object/apply:os.system ['true']", "!!binary 'AAAA'", "!!set {a, b}",
                                "!!set {1, 2}", "!!omap [a: 1]", "!!omap [{a: 1}]", "!!pairs [a: 1, b: 2]",
                                "!!timestamp 2021-01-01", "2021-01-01", "2021-01-01 10:00:00", "!!int 'x'",
                                "!custom 1", "[*zz_a, *zz_a]", "{<<: [*zz_m, *zz_m]}", "{<<: *zz_a}"]))
    key = draw(st.sampled_from(["rounds", "seeds", "name", "selector", "train", "zz_extra"]))
    anchors = "zz_anchor_a: &zz_a [1, 2]\nzz_anchor_m: &zz_m {name: uniform}\n" if "*zz_" in tag else ""
    return text + anchors + f"{key}: {tag}\n", f"tag {tag} at {key}"


@st.composite
def experiment_files(draw) -> dict:
    """An experiment file's bytes, with whether it must be refused and what the refusal must name."""
    mode = draw(st.sampled_from(["mutated"] * 10 + ["text", "text", "raw", "empty"]))
    if mode == "empty":
        data = draw(st.sampled_from([b"", b"\n", b"   \n", b"# only a comment\n", b"---\n", b"...\n", b"~\n",
                                     b"null\n", b"{}\n", b"[]\n", b"42\n", b"- rounds: 2\n", b"\xef\xbb\xbf",
                                     b"rounds\n", b"'rounds: 2'\n"]))
        return {"data": data, "must_refuse": True, "needles": ("config",), "describe": f"empty-ish {data!r}"}
    if mode == "raw":
        data = draw(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda s: s.encode()),
                              st.lists(st.sampled_from(YAML_TOKENS), max_size=30).map(lambda t: "".join(t).encode()),
                              st.sampled_from([b"\xff\xfe" + "rounds: 2\n".encode("utf-16-le"), b"rounds: 2\n\xff",
                                               b"\x00" * 10, b"#" * ((16 << 20) + 1) + b"\n"])))
        return {"data": data, "must_refuse": False, "needles": (), "describe": f"raw {data[:200]!r}"}
    cfg = copy.deepcopy(BASE)
    notes = [draw(free_mutation(cfg)) for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3])))]
    cfg = clamp(cfg)
    must_refuse, needles = False, ()
    if draw(one_in(4)):
        note, needles = draw(refused_mutation(cfg))
        notes.append(note)
        must_refuse = True
        if len(notes) > 1:
            needles = ()  # another mutation may be the first error found
    if draw(one_in(6)):
        notes.append(_share(draw, cfg))
        needles = ()  # the shared part may hide the wrong key, or be an error of its own
    try:
        flow, anchors, width = draw(st.booleans()), draw(st.booleans()), draw(st.sampled_from([80, 10**6]))
        text = dump(cfg, flow=flow, anchors=anchors, width=width)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:  # PyYAML cannot write this value; write the base
        notes.append(f"undumpable ({type(exc).__name__})")
        text, must_refuse, needles = dump(clamp(copy.deepcopy(BASE))), False, ()
    if mode == "text":
        text, note = text_mutation(draw, text)
        notes.append(note)
        must_refuse, needles = False, ()
    return {"data": text.encode("utf-8", "surrogatepass"), "must_refuse": must_refuse, "needles": needles,
            "describe": "; ".join(notes)}


# ---------------------------------------------------------------------------------------------
# --set overrides

def _valid_fields() -> dict[str, Any]:
    """Dotted key → pydantic field of every option of the base experiment's components and blocks."""
    from turnout.config.schema import ExperimentConfig

    fields = {k: f for k, f in ExperimentConfig.model_fields.items() if k in ("rounds", "seeds", "name")}
    for seam in SEAMS:
        block = BASE.get(seam) or {"name": _default_name(seam)}
        cls = registries()[seam].get(block["name"])
        fields.update({f"{seam}.{k}": f for k, f in cls.Config.model_fields.items()})
    for name, model in BLOCKS.items():
        fields.update({f"{name}.{k}": f for k, f in model.model_fields.items()})
    return fields


VALID_FIELDS = _valid_fields()
VALID_KEYS = sorted(VALID_FIELDS) + [f"{seam}.name" for seam in SEAMS] + [
    "seed", "variants", "grid", "data.partition.name", "data.partition.alpha", "availability.generator.days",
    "model.hidden", "data", "selector", "train"]


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True).strip()
    return text.removesuffix("...").strip()


@st.composite
def override_args(draw) -> dict:
    """1-4 ``--set`` arguments, and whether the command must be refused."""
    from turnout.config.loader import parse_override
    from turnout.core.errors import ConfigError

    def key():
        return draw(st.one_of(
            st.sampled_from(VALID_KEYS), st.sampled_from(VALID_KEYS),
            st.lists(st.text(st.characters(codec="ascii", categories=("Ll", "Nd")), max_size=6), min_size=1,
                     max_size=4).map(".".join),
            st.sampled_from(["", ".", "a..b", " ", "=", ".rounds", "rounds.", "rounds.x", "data.name.x",
                             "variants.0", "variants.0.name", "grid.train.lr", "é.ü", "a\tb", "x" * 5000,
                             "selector.clients_per_round.", "train.lr_schedule.name", "-rounds", "--out"]),
            TEXT.filter(lambda s: "\x00" not in s)))

    def value():
        v = draw(st.one_of(values(1).map(_safe_flow), st.sampled_from(SPECIAL_STRINGS),
                           st.lists(st.sampled_from(YAML_TOKENS), max_size=8).map("".join), TEXT))
        return v.replace("\x00", "")

    def plausible():  # a known option and a value of its type (mostly in range)
        k = draw(st.sampled_from(sorted(VALID_FIELDS)))
        return f"{k}={_safe_flow(draw(field_values(VALID_FIELDS[k], 0, valid_weight=8)))}"

    def hostile():
        k, v = key(), value()
        return draw(st.sampled_from([f"{k}={v}", f"{k}={v}", f"{k} = {v}", k, f"{k}=={v}"]))

    args, notes = [], []
    for _ in range(draw(st.sampled_from([1, 1, 1, 1, 2, 2, 3, 4]))):
        arg = hostile() if draw(one_in(5)) else plausible()
        try:
            pk, pv = parse_override(arg)
            capped = _capped(pk, pv)
            if capped is not pv and capped != pv:
                arg = f"{pk}={_safe_flow(capped)}"
        except (ConfigError, RecursionError):
            pass
        args.append(arg)
    must_refuse, needles = False, ()
    if draw(one_in(4)):
        bad = draw(st.sampled_from(REFUSED_OVERRIDES))
        args.append(bad[0])
        notes.append(f"refused: {bad[0]}")
        must_refuse = True
        needles = (bad[1],) if len(args) == 1 else ()
    return {"args": args, "must_refuse": must_refuse, "needles": needles, "describe": "; ".join(notes)}


#: ``--set`` arguments that must be refused, and what the refusal names.
REFUSED_OVERRIDES = [
    ("zz_unknown=1", "zz_unknown"), ("selector.zz_x=1", "selector.zz_x"), ("rounds=1000001", "rounds"),
    ("rounds=true", "rounds"), ("rounds=.inf", "rounds"), ("train.lr=nan", "train.lr"),
    ("seeds=[4294967296]", "seeds"), ("data.num_clients=1e30", "data.num_clients"),
    ("selector.name=zz", "selector.name"), ("rounds=" + "[" * 33 + "1" + "]" * 33, "rounds"),
    ("model.hidden=[1000001]", "model"),
]


def _safe_flow(value: Any) -> str:
    try:
        return _flow(value)
    except (yaml.YAMLError, RecursionError, ValueError):
        return "1"


# ---------------------------------------------------------------------------------------------
# trace .npz files

def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=True)
    return buf.getvalue()


def write_zip(members: list[tuple[str, bytes, int]], zip64: bool = False) -> bytes:
    """A zip archive of (name, npy bytes, method) members, as ``zipfile`` writes it."""
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", allowZip64=True) as zf:
        warnings.simplefilter("ignore")  # a duplicate member name is one of the mutations
        for name, data, method in members:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = method
            with zf.open(info, "w", force_zip64=zip64) as f:
                f.write(data)
    return buf.getvalue()


@st.composite
def trace_arrays(draw) -> dict[str, np.ndarray]:
    """A small valid trace's arrays: 1-8 clients, 0-4 sorted separated intervals each."""
    n = draw(st.integers(1, 8))
    period = draw(st.sampled_from([10.0, 100.0, 3600.0, 86400.0 * 6, 1.0, 2.0**40]))
    starts, ends, offsets = [], [], [0]
    for _ in range(n):
        k = draw(st.integers(0, 4))
        cuts = sorted(draw(st.lists(st.floats(0, period, exclude_max=True), min_size=2 * k, max_size=2 * k,
                                    unique=True)))
        s, e = cuts[0::2], cuts[1::2]
        keep = [i for i in range(k) if i == 0 or s[i] > e[i - 1]]
        starts += [s[i] for i in keep]
        ends += [e[i] for i in keep]
        offsets.append(len(starts))
    arrays = {"offsets": np.array(offsets, np.int64), "start_s": np.array(starts, np.float64),
              "end_s": np.array(ends, np.float64), "period_s": np.full(n, period)}
    if draw(st.booleans()):
        arrays["model"] = np.array([f"m{i}" for i in range(n)])
    if draw(st.booleans()):
        arrays["format_version"] = np.array(1, np.int64)
    return arrays


ODD_FLOATS = [0.0, -0.0, -1.0, 5e-324, 1e-300, 0.5, 1.0, 2.0**53, 2.0**53 + 2, 1e300, float("inf"), float("-inf"),
              float("nan"), 2.0**24 + 1, 1e-7]


@st.composite
def array_mutation(draw, arrays: dict[str, np.ndarray]) -> str:
    name = draw(st.sampled_from(["offsets", "start_s", "end_s", "period_s", "model", "format_version"]))
    a = arrays.get(name)
    op = draw(st.sampled_from(["value", "value", "dtype", "shape", "drop", "rename", "swap", "reverse", "object"]))
    if a is None or op == "object" and name != "model":
        op = "value" if a is not None else "add"
    if op == "add":
        arrays[name] = np.arange(draw(st.integers(0, 10)))
        return f"{name} added"
    if op == "value" and a.size:
        a = a.copy()
        i = draw(st.integers(0, a.size - 1))
        if a.dtype.kind == "U":
            a = a.astype(object)
            a.flat[i] = draw(st.sampled_from(["", "x" * 1000, "\x00", "é", "\n"]))
            a = a.astype(str)
        elif a.dtype.kind in "iu":
            a.flat[i] = draw(st.sampled_from([-1, 0, 1, 2, 10**9, 2**62, -(2**63), a.size + 1]))
        else:
            a.flat[i] = draw(st.sampled_from(ODD_FLOATS))
        arrays[name] = a
        return f"{name}[{i}] = {a.flat[i]!r}"
    if op == "dtype":
        dtype = draw(st.sampled_from(["int32", "int64", "uint64", "float16", "float32", "float64", ">f8", ">i8",
                                      "complex128", "bool", "U4", "S4", "V8", "datetime64[s]", "f8,f8"]))
        try:
            with np.errstate(all="ignore"):
                arrays[name] = a.astype(dtype)
        except (TypeError, ValueError):
            arrays[name] = np.zeros(a.shape, dtype)
        return f"{name} as {dtype}"
    if op == "shape":
        shape = draw(st.sampled_from(["2d", "scalar", "longer", "shorter", "empty"]))
        if shape == "2d":
            arrays[name] = a.reshape(1, -1) if a.ndim else a.reshape(1, 1)
        elif shape == "scalar":
            arrays[name] = np.asarray(a.reshape(-1)[0] if a.size else 0)
        elif shape == "longer":
            arrays[name] = np.concatenate([a.reshape(-1), a.reshape(-1)[:1] if a.size else np.zeros(1, a.dtype)])
        elif shape == "shorter":
            arrays[name] = a.reshape(-1)[:-1]
        else:
            arrays[name] = a.reshape(-1)[:0]
        return f"{name} {shape}"
    if op == "drop":
        del arrays[name]
        return f"{name} dropped"
    if op == "rename":
        arrays[draw(st.sampled_from([name.upper(), name + "_", "x", name + ".npy", "arr_0"]))] = arrays.pop(name)
        return f"{name} renamed"
    if op == "swap":
        other = draw(st.sampled_from(sorted(arrays)))
        arrays[name], arrays[other] = arrays[other], a
        return f"{name} swapped with {other}"
    if op == "reverse":
        arrays[name] = a.reshape(-1)[::-1].copy()
        return f"{name} reversed"
    arrays[name] = np.array([{"x": 1}] * len(a), dtype=object)
    return f"{name} as objects"


def _zip_offsets(data: bytes) -> list[int]:
    """Byte positions of the zip's local and central headers."""
    out, i = [], 0
    while (i := data.find(b"PK", i)) >= 0:
        if data[i + 2:i + 4] in (b"\x03\x04", b"\x01\x02", b"\x05\x06", b"\x06\x06", b"\x06\x07"):
            out.append(i)
        i += 2
    return out


def _flip_bytes(draw, data: bytes, most: int) -> tuple[bytes, str]:
    """1 to ``most`` random bytes of ``data`` set to random values (the damage both file formats share)."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, most))):
        i = draw(st.integers(0, len(out) - 1))
        out[i] = draw(st.integers(0, 255))
    return bytes(out), "bytes changed"


@st.composite
def zip_damage(draw, data: bytes) -> tuple[bytes, str]:
    op = draw(st.sampled_from(["truncate", "flip", "size_lie", "method", "flags", "append", "prepend", "zero",
                               "cd_size"]))
    heads = _zip_offsets(data)
    if op == "truncate":
        at = draw(st.integers(0, len(data)))
        return data[:at], f"cut at {at} of {len(data)}"
    if op == "flip":
        return _flip_bytes(draw, data, 8)
    if op == "append":
        return data + draw(st.binary(max_size=64)), "garbage appended"
    if op == "prepend":
        return draw(st.binary(max_size=64)) + data, "garbage prepended"
    if op == "zero":
        at = draw(st.integers(0, len(data) - 1))
        n = draw(st.integers(1, 64))
        return data[:at] + bytes(min(n, len(data) - at)) + data[at + n:], f"{n} bytes zeroed at {at}"
    if not heads:
        return data, "no zip headers"
    at = draw(st.sampled_from(heads))
    sig = data[at + 2:at + 4]
    out = bytearray(data)
    if op == "cd_size":
        end = data.rfind(b"PK\x05\x06")
        if end >= 0:
            out[end + 12:end + 16] = struct.pack("<L", draw(st.sampled_from([0, 1, 2**20 + 1, 2**31, 2**32 - 1])))
        return bytes(out), "central directory size changed"
    field = {"size_lie": {b"\x03\x04": 22, b"\x01\x02": 24}, "method": {b"\x03\x04": 8, b"\x01\x02": 10},
             "flags": {b"\x03\x04": 6, b"\x01\x02": 8}}[op].get(sig)
    if field is None:
        return data, f"{op}: not a file header"
    if op == "size_lie":
        value = draw(st.sampled_from([0, 1, 100, 2**20, 2**31, 2**32 - 2, 2**32 - 1]))
        out[at + field:at + field + 4] = struct.pack("<L", value)
    elif op == "method":
        out[at + field:at + field + 2] = struct.pack("<H", draw(st.sampled_from([0, 1, 8, 9, 12, 14, 93, 99, 65535])))
    else:
        out[at + field:at + field + 2] = struct.pack("<H", draw(st.sampled_from([1, 8, 0x20, 0x40, 0x800, 0xFFFF])))
    return bytes(out), f"{op} at {at}"


@st.composite
def trace_files(draw) -> dict:
    """A trace file's bytes (valid, mutated arrays, or a damaged zip) and the run options around it."""
    arrays = draw(trace_arrays())
    notes = [draw(array_mutation(arrays)) for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3])))]
    method = draw(st.sampled_from([zipfile.ZIP_STORED] * 2 + [zipfile.ZIP_DEFLATED] * 3 + [zipfile.ZIP_BZIP2,
                                                                                           zipfile.ZIP_LZMA]))
    members = [(draw(st.sampled_from([f"{k}.npy", f"{k}.npy", k])), npy(v), method) for k, v in arrays.items()]
    if draw(one_in(10)) and members:
        members.append(members[0])  # a duplicate member name
        notes.append("duplicate member")
    if draw(one_in(10)):
        members.append(("readme.txt", draw(st.binary(max_size=40)), zipfile.ZIP_STORED))
    data = write_zip(members, zip64=draw(st.booleans()))
    if method != zipfile.ZIP_STORED:
        notes.append(f"method {method}")
    if draw(one_in(4)):
        data, note = draw(zip_damage(data))
        notes.append(note)
    options = draw(st.fixed_dictionaries({}, optional={
        "mapping": st.sampled_from(["modulo", "random"]), "lookup": st.sampled_from(["exact", "fedscale_pointer"]),
        "time_offset_s": st.sampled_from([0.0, 1.0, 3599.5, 1e9, 86400.0 * 6])}))
    extra = draw(st.fixed_dictionaries({}, optional={
        "round_mode": st.sampled_from([{"name": "deadline", "deadline_s": 50.0}, {"name": "over_commit"}]),
        "selector": st.sampled_from([{"name": "uniform", "clients_per_round": 2},
                                     {"name": "refl_ips", "clients_per_round": 2},
                                     {"name": "oort", "clients_per_round": 2}])}))
    return {"data": data, "options": options, "extra": extra, "describe": "; ".join(notes)}


# ---------------------------------------------------------------------------------------------
# FedScale pickles

def behaviour_entry(draw) -> dict:
    period = draw(st.sampled_from([10, 100, 3600, 86400 * 6]))
    k = draw(st.integers(0, 4))
    cuts = sorted(draw(st.lists(st.integers(0, period + 5), min_size=2 * k, max_size=2 * k)))
    return {"duration": draw(st.integers(0, period)), "inactive": cuts[1::2], "finish_time": period,
            "active": cuts[0::2], "model": draw(st.sampled_from(["SM-G960F", "Pixel 3", "iPhone"]))}


def capacity_entry(draw, links: bool) -> dict:
    out = {"computation": draw(st.sampled_from([1.5, 30.0, 200.0, np.float64(3.5)])),
           "communication": draw(st.sampled_from([100.0, 5000.0, np.float32(20.0)]))}
    if links:
        out.update(dl_kbps=draw(st.sampled_from([1000.0, 2e4])), ul_kbps=draw(st.sampled_from([300.0, 5e3])))
    return out


class ForgedDtype:
    """Pickles as ``numpy.dtype(spec, False, True)`` followed by ``state``, whatever that state says."""

    def __init__(self, spec: str, state: tuple):
        self.spec, self.state = spec, state

    def __reduce__(self):
        return np.dtype, (self.spec, False, True), self.state


class ForgedScalar:
    """Pickles as numpy's scalar reconstructor called with a :class:`ForgedDtype` and some bytes."""

    def __init__(self, dtype: ForgedDtype, data: bytes):
        self.dtype, self.data = dtype, data

    def __reduce__(self):
        from numpy._core.multiarray import scalar

        return scalar, (self.dtype, self.data)


#: What each entry of numpy's dtype state (version, byte order, subarray, names, fields, item size,
#: alignment, flags) is replaced with.
STATE_VALUES = {
    1: ["<", ">", "|", "=", "x", 5],
    2: [None, (np.dtype("f8"), (2,)), (np.dtype("f8"), (10**9,)), (np.dtype("O"), (1,))],
    3: [None, ("a",), ("a", "b"), ()],
    4: [None, {"a": (np.dtype("f8"), 0)}, {"a": (np.dtype("O"), 0)}, {"a": (np.dtype("f8"), 100)},
        {"a": (np.dtype("f8"), -8)}, {"a": (np.dtype("V8"), 0, "a")}],
    5: [-5, -1, 0, 1, 4, 8, 2**40], 6: [-1, 0, 1, 3, 4, 8], 7: [0, 1, 8, 16, 0xFF],
}


@st.composite
def forged_scalars(draw) -> ForgedScalar:
    """A numpy scalar as a pickle spells it, with its dtype's pickled state changed: a few entries of a
    plain type's state, or the names and fields of a structured one (fields that the names lack, object
    fields, offsets beyond the item size)."""
    if draw(st.booleans()):
        spec = draw(st.sampled_from(["f8", ">f8", "f4", "i8", "b1", "U3", "S4", "V8", "O", "M8[s]", "c16"]))
        state = list(np.dtype(spec).__reduce__()[2])
        for i in draw(st.lists(st.sampled_from(sorted(STATE_VALUES)), max_size=3, unique=True)):
            state[i] = copy.deepcopy(draw(st.sampled_from(STATE_VALUES[i])))  # shared, it would be a memo GET
        if draw(one_in(8)):
            state.append(draw(st.sampled_from([{}, None, {"a": 1}])))  # numpy's metadata entry
        size = np.dtype(spec).itemsize
    else:
        size = draw(st.sampled_from([8, 12, 16]))
        spec = f"V{size}"
        names = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
        fields = {n: (draw(st.sampled_from([np.dtype("f8"), np.dtype("i4"), np.dtype("O"), np.dtype("V8")])),
                      draw(st.sampled_from([0, 4, 8, 100, -8])))
                  for n in draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True))}
        state = [3, "|", None, tuple(names), fields, draw(st.sampled_from([size, -1, 0, 2**40])), 1,
                 draw(st.sampled_from([0, 16, 0xFF]))]
    data = draw(st.one_of(st.builds(lambda: bytes(bytearray(b"\x01" * size))), st.binary(max_size=24)))
    return ForgedScalar(ForgedDtype(spec, tuple(state)), data)


def odd_values() -> st.SearchStrategy:
    return st.one_of(
        st.sampled_from([None, True, False, 0, -1, -5, 10**400, -(10**400), 2**63, 2**64, 1e308, 5e-324,
                         float("inf"), float("-inf"), float("nan"), "", "12", "x" * 200, b"12", 1.5, [], {},
                         (), set(), frozenset([1]), (1, 2), [1, [2, [3]]], {"a": 1},
                         np.float64(7.0), np.int64(7), np.float32(np.nan), np.bool_(True), np.int8(-3),
                         np.uint64(2**64 - 1), np.float16(65504), np.longdouble(1.5), np.str_("SM"),
                         np.zeros(1, dtype=[("a", "f8"), ("b", "i4")])[0]]),
        st.integers(-(2**80), 2**80), st.floats(), st.lists(st.integers(-10, 10**6), max_size=6), TEXT,
        forged_scalars(), forged_scalars())


@st.composite
def fedscale_pickles(draw) -> dict:
    """A FedScale behaviour or capacity pickle: valid, mutated in its values, or in its opcodes."""
    kind = draw(st.sampled_from(["behavior", "capacity"]))
    n = draw(st.integers(1, 5))
    links = draw(st.booleans())
    keys = draw(st.lists(st.one_of(st.integers(0, 10**6), st.integers(0, 10**6).map(str)), min_size=n, max_size=n,
                         unique_by=str))
    obj = {k: behaviour_entry(draw) if kind == "behavior" else capacity_entry(draw, links) for k in keys}
    notes = [kind]
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):
        op = draw(st.sampled_from(["value", "value", "forge", "forge", "forge", "key", "drop", "extra", "share", "nest",
                                   "top", "lengths"]))
        entry_key = draw(st.sampled_from(list(obj))) if obj else None
        entry = obj.get(entry_key) if entry_key is not None else None
        if op == "top":
            obj = draw(st.sampled_from([[], {}, None, "x", [obj], (obj,), set(), 7]))
            notes.append(f"top-level {type(obj).__name__}")
            break
        if not isinstance(entry, dict):
            continue
        fields = list(entry)
        if op == "value":
            f = draw(st.sampled_from(fields))
            if isinstance(entry[f], list) and entry[f] and draw(st.booleans()):
                entry[f][draw(st.integers(0, len(entry[f]) - 1))] = draw(odd_values())
            else:
                entry[f] = draw(odd_values())
            notes.append(f"{f} odd")
        elif op == "forge":  # a number becomes a numpy scalar whose dtype's pickled state was changed
            numbers = [f for f in ("finish_time", "computation", "communication", "active", "inactive") if f in entry]
            if numbers:
                f = draw(st.sampled_from(numbers))
                if isinstance(entry[f], list) and entry[f]:
                    entry[f][draw(st.integers(0, len(entry[f]) - 1))] = draw(forged_scalars())
                elif not isinstance(entry[f], list):
                    entry[f] = draw(forged_scalars())
                notes.append(f"{f}: forged numpy scalar")
        elif op == "key":
            obj[draw(st.one_of(st.sampled_from([None, 1.5, (1, 2), frozenset([1]), True, -1, 2**70, "", "x" * 300,
                                                 b"k", "1" * 5000]), TEXT))] = obj.pop(entry_key)
            notes.append("odd key")
        elif op == "drop" and fields:
            del entry[draw(st.sampled_from(fields))]
            notes.append("field dropped")
        elif op == "extra":
            entry[draw(TEXT)] = draw(odd_values())
            notes.append("extra field")
        elif op == "share":
            shared = [1, 2, 3]
            for other in obj.values():
                if isinstance(other, dict):
                    other[draw(st.sampled_from(fields))] = shared
            notes.append("shared list")
        elif op == "nest":
            entry[draw(st.sampled_from(fields))] = nested(draw(st.integers(2, 60)))
            notes.append("nested")
        elif op == "lengths" and kind == "behavior":
            entry["active"] = list(entry.get("active", [])) + [draw(st.integers(0, 100))]
            notes.append("active longer than inactive")
    # numpy scalars need protocol 3 or later (older ones spell their bytes through _codecs.encode, refused)
    protocol = draw(st.integers(3 if any("numpy" in n for n in notes) else 0, pickle.HIGHEST_PROTOCOL))
    try:
        data = pickle.dumps(obj, protocol=protocol)
    except (pickle.PicklingError, RecursionError, TypeError, ValueError) as exc:
        data = pickle.dumps({}, protocol=protocol)
        notes.append(f"unpicklable ({type(exc).__name__})")
    notes.append(f"protocol {protocol}")
    if draw(one_in(4)):
        data, note = draw(opcode_damage(data))
        notes.append(note)
    wrong_kind = draw(one_in(10))
    return {"data": data, "kind": ("capacity" if kind == "behavior" else "behavior") if wrong_kind else kind,
            "describe": "; ".join(notes)}


#: Opcode fragments plain data never needs, and a few it does, to splice into a pickle.
OPCODES = [b"cos\nsystem\n", b"cbuiltins\neval\n", b"c__builtin__\nset\n", b"cnumpy\ndtype\n", b"R", b"b", b"(",
           b")", b"t", b"l", b"d", b"}", b"]", b"a", b"e", b"s", b"u", b"0", b"1", b"2", b"h\x00", b"j\xff\xff\xff\x7f",
           b"q\x05", b"\x94", b"\x81", b"\x92", b"\x82\x01", b"P1\n", b"Q", b"\x8a\x04\xff\xff\xff\xff",
           b"\x8b\xff\xff\xff\x7f" + b"\x01" * 8, b"\x8d\xff\xff\xff\xff\xff\xff\xff\x7f", b"X\xff\xff\xff\x7f",
           b"\x95\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x97", b"\x98", b"\x96", b"I99999999999999999999\n", b"Lx\n",
           b"F1e400\n", b"Fnan\n", b"S'\\x'\n", b"V\\u12\n", b"N", b"\x88", b"\x89", b"K\x01", b"M\xff\xff",
           b"J\xff\xff\xff\xff", b"G\x7f\xf0\x00\x00\x00\x00\x00\x00", b"\x80\x09", b"\x80\x02", b"."]


@st.composite
def opcode_damage(draw, data: bytes) -> tuple[bytes, str]:
    op = draw(st.sampled_from(["truncate", "flip", "splice", "splice", "protocol", "delete"]))
    at = draw(st.integers(0, max(len(data) - 1, 0)))
    if op == "truncate":
        return data[:at], f"cut at {at} of {len(data)}"
    if op == "flip":
        return _flip_bytes(draw, data, 6)
    if op == "protocol":
        return b"\x80" + bytes([draw(st.integers(0, 255))]) + data[2:], "protocol byte changed"
    if op == "delete":
        n = draw(st.integers(1, 16))
        return data[:at] + data[at + n:], f"{n} bytes deleted at {at}"
    s = b"".join(draw(st.lists(st.sampled_from(OPCODES), min_size=1, max_size=6)))
    return data[:at] + s + data[at:], f"spliced {s[:60]!r} at {at}"

