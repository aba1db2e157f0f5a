"""Every stateful part of a run is declared and round-trips: snapshot, rebuild, load, continue ⇒ bit for bit.

For every registered selector, algorithm, compressor, round mode and availability model (the
registries are iterated, so a new component joins automatically): run ``R`` rounds uninterrupted;
separately run ``r`` rounds, take the simulation's state, push it through the on-disk encoding
(arrays + JSON, no pickle), build a *fresh* simulation, load the state and run the rest. The
rows, the per-client table and the final parameters must be identical. A second test checks
that every attribute a component changes while running is declared as state or scratch.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch

from turnout.core.state import Stateful, decode_state, encode_state, same_state
from turnout.sim.catalogue import registries
from turnout.world.context import WorldContext
from turnout.world.state_store import ClientStateStore

N, K, ROUNDS, SPLIT = 20, 4, 6, 3
BASE = {"name": "roundtrip", "rounds": ROUNDS, "data": {"name": "synthetic", "num_clients": N},
        "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": K}, "devices": {"name": "flash"},
        "eval": {"every": 2}, "output": {"progress": False, "plots": False}}
#: options for components whose defaults do not fit a 20-client, 4-per-round world
OPTIONS = {"selector": {"sticky": {"sticky_size": 8, "sticky_per_round": 3}},
           "availability": {"p1_uniform": {"m": 8}, "cyclic": {"m": 5}, "reshuffled_cyclic": {"m": 5}},
           "round_mode": {"deadline": {"deadline_s": 0.1}}}
#: a setting where the component's state matters: late reports in flight, spilled rows, learned graphs
SETTINGS = {
    "deadline_late_reports": {"round_mode": {"name": "deadline", "deadline_s": 0.1},
                              "algorithm": {"name": "stale_aware", "rule": "refl", "timing": "refl_code",
                                            "combine": "models"},
                              "selector": {"name": "refl_ips", "clients_per_round": K, "apt": "paper"}},
    "scaffold_spilled": {"algorithm": {"name": "scaffold"}, "runtime": {"state_budget_mb": 0.005}},
    "gluefl_sticky_mask_ec": {"selector": {"name": "sticky", "clients_per_round": K, "sticky_size": 8,
                                           "sticky_per_round": 3},
                              "compressor": {"name": "gluefl", "ratio": 0.2, "shared_ratio": 0.1,
                                             "regenerate_every": 4},
                              "round_mode": {"name": "over_commit", "oc": 1.5}},
    "oort_over_commit": {"selector": {"name": "oort", "clients_per_round": K},
                         "round_mode": {"name": "over_commit", "oc": 1.5}, "availability": {"name": "trace"}},
    "fedgs_update_cosine": {"selector": {"name": "fedgs", "clients_per_round": K, "graph": "update_cosine",
                                         "rebuild_every": 2}, "availability": {"name": "ln", "beta": 0.5}},
    "fedgs_functional": {"selector": {"name": "fedgs", "clients_per_round": K, "graph": "functional"}},
    "adaptive_ou": {"algorithm": {"name": "adaptive_ou", "strategy": "ou", "min_pairs": 2},
                    "selector": {"name": "power_of_choice", "clients_per_round": K}},
    "fedawe_trace_fedscale_pointer": {"algorithm": {"name": "fedawe"},
                                      "availability": {"name": "trace", "lookup": "fedscale_pointer"}},
    "fedyogi_refl_history": {"algorithm": {"name": "fedyogi"},
                             "selector": {"name": "refl_ips", "clients_per_round": K, "predictor": "history"},
                             "availability": {"name": "trace"}},
    "dp_adaptive_clip_trace": {"privacy": {"name": "gaussian", "clip_norm": 0.05, "noise_multiplier": 1.0,
                                           "adaptive": {"target_quantile": 0.5, "count_noise": 1.0}},
                               "availability": {"name": "trace"}},
    "secagg_plus_deadline": {"secure_aggregation": {"name": "secagg_plus"},
                             "round_mode": {"name": "deadline", "deadline_s": 0.1}},
}


def _block(seam, name):
    extra = OPTIONS.get(seam, {}).get(name, {})
    return {"name": name, **({"clients_per_round": K} if seam == "selector" else {}), **extra}


def _compatible(compressor, algorithm):
    regs = registries()
    algo = regs["algorithm"].get(algorithm)
    accepts = regs["compressor"].get(compressor).accepts
    return accepts is None or algo.upload_kind(algo.Config()) in accepts


def cases():
    out = {f"setting:{k}": v for k, v in SETTINGS.items()}
    for seam in ("selector", "algorithm", "compressor", "round_mode", "availability"):
        for name in registries()[seam].names():
            if seam == "compressor" and not _compatible(name, "fedavg"):
                continue
            out[f"{seam}:{name}"] = {seam: _block(seam, name)}
    return out


def through_disk(state):
    """The state as a checkpoint would carry it: plain arrays plus a JSON skeleton."""
    arrays, meta = encode_state(state)
    return decode_state({k: np.array(v) for k, v in arrays.items()}, json.loads(json.dumps(meta)))


def rows_equal(a, b):
    assert [list(r) for r in a] == [list(r) for r in b]
    for ra, rb in zip(a, b):
        for k in ra:
            x, y = ra[k], rb[k]
            assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (ra["round"], k, x, y)


@pytest.mark.parametrize("case", list(cases()))
def test_snapshot_load_continue_is_bit_identical(case, build_simulation, tmp_path):
    raw = copy.deepcopy({**BASE, **cases()[case]})
    full_sim = build_simulation(raw, scratch_dir=tmp_path / "full")
    full = full_sim.run()

    first = build_simulation(raw, scratch_dir=tmp_path / "first")
    head = first.advance(until=SPLIT)
    state = through_disk(first.state_dict())
    first.release()
    second = build_simulation(raw, scratch_dir=tmp_path / "second")
    second.load_state_dict(state)
    assert same_state(second.state_dict(), state)  # loading restores exactly what was saved
    tail = second.advance()
    second.finish()
    resumed = second.result(head + tail)
    second.release()

    rows_equal(head + tail, full.rounds)
    assert torch.equal(resumed.final_params, full.final_params)
    assert list(resumed.clients) == list(full.clients)
    for k in full.clients:
        np.testing.assert_array_equal(resumed.clients[k], full.clients[k])
    for k in ("state_rows", "state_spilled_bytes", "state_peak_ram_bytes", "late_unused_s", "tau_max"):
        assert resumed.summary[k] == full.summary[k], k
    if case == "setting:scaffold_spilled":  # the rows that crossed the budget went through the checkpoint
        assert full.summary["state_spilled_bytes"] > 0
    if case == "setting:deadline_late_reports":
        assert sum(r["n_late"] for r in head) > 0 and sum(r["n_stale"] for r in tail) > 0


# ---- every attribute a component changes is declared -----------------------------------------------
SERVICES = (WorldContext, ClientStateStore)  # shared services, checkpointed by the simulation itself


def _fingerprint(value, depth=0):
    """A comparable copy of an attribute's value (objects by identity, plain state by value)."""
    if isinstance(value, torch.Tensor):
        return ("array", value.detach().cpu().numpy().copy())
    if isinstance(value, np.ndarray):
        return ("array", np.array(value, copy=True))
    if value is None or isinstance(value, (bool, int, float, str, np.generic)):
        return ("scalar", value)
    if isinstance(value, (list, tuple)) and depth < 3:
        return ("seq", [_fingerprint(v, depth + 1) for v in value])
    if isinstance(value, dict) and depth < 3:
        return ("map", {k: _fingerprint(v, depth + 1) for k, v in value.items()})
    return ("object", id(value))


def _same(a, b):
    if a[0] != b[0]:
        return False
    if a[0] == "array":
        return a[1].shape == b[1].shape and np.array_equal(a[1], b[1], equal_nan=a[1].dtype.kind in "fc")
    if a[0] == "seq":
        return len(a[1]) == len(b[1]) and all(_same(x, y) for x, y in zip(a[1], b[1]))
    if a[0] == "map":
        return a[1].keys() == b[1].keys() and all(_same(a[1][k], b[1][k]) for k in a[1])
    if a[0] == "scalar":
        return a[1] == b[1] or (isinstance(a[1], float) and math.isnan(a[1]) and math.isnan(b[1]))
    return a[1] == b[1]


def _undeclared_changes(obj, before, path):
    """Attributes of ``obj`` (and its Stateful parts) that changed but are neither state nor scratch."""
    if not isinstance(obj, Stateful) or type(obj).state_dict is not Stateful.state_dict:
        return []  # custom state_dict: the component serialises itself (tested by the round trip)
    declared = set(type(obj).declared_state()) | set(type(obj).declared_scratch())
    out = []
    for name, value in vars(obj).items():
        if isinstance(value, SERVICES) or name in declared:
            continue
        if name not in before or not _same(before[name], _fingerprint(value)):
            out.append(f"{path}.{name}")
    for name in type(obj).declared_state():
        value = getattr(obj, name)
        if isinstance(value, Stateful):
            out += _undeclared_changes(value, before.get(f"__{name}", {}), f"{path}.{name}")
    return out


def _record(obj):
    rec = {name: _fingerprint(v) for name, v in vars(obj).items()}
    if isinstance(obj, Stateful):
        for name in type(obj).declared_state():
            value = getattr(obj, name)
            if isinstance(value, Stateful):
                rec[f"__{name}"] = _record(value)
    return rec


@pytest.mark.parametrize("case", list(cases()))
def test_every_changed_attribute_is_declared(case, build_simulation):
    sim = build_simulation(copy.deepcopy({**BASE, **cases()[case]}))
    parts = {seam: getattr(sim, seam) for seam in ("availability", "selector", "round_mode", "algorithm",
                                                   "compressor")}
    before = {seam: _record(obj) for seam, obj in parts.items()}
    sim.advance(until=ROUNDS)
    sim.release()
    undeclared = [p for seam, obj in parts.items() for p in _undeclared_changes(obj, before[seam], seam)]
    assert not undeclared, f"attributes that change during a run but are not in state_attrs/scratch_attrs: {undeclared}"


def test_numpy_scalars_round_trip_with_their_type_even_when_infinite():
    """np.float64 is a float subclass: it must not take the plain-float path (repr 'np.float64(inf)' broke)."""
    state = {"t_pref": np.float64(np.inf), "calls": np.int64(3), "plain": float("-inf"), "x": 0.5}
    arrays, meta = encode_state(state)
    back = decode_state(arrays, json.loads(json.dumps(meta)))
    assert type(back["t_pref"]) is np.float64 and back["t_pref"] == np.inf
    assert type(back["calls"]) is np.int64 and back["calls"] == 3
    assert back["plain"] == -math.inf and back["x"] == 0.5


# ---- a checkpoint written before the server step was one component ---------------------------------
#: rules whose moments lived in the rule itself then: FedAvg's server momentum (``momentum_buf``), FedYogi's
#: moments (``opt``), and a rule without any (MIFA: the checkpoint had no server-step entry at all)
BEFORE_SERVER_STEP = {"fedavg_momentum": ({"name": "fedavg", "server_momentum": 0.5}, "momentum_buf"),
                      "fedyogi": ({"name": "fedyogi"}, "opt"), "mifa": ({"name": "mifa"}, None)}


def _old_layout(algorithm_state: dict, key: str | None) -> dict:
    old = {k: v for k, v in algorithm_state.items() if k != "server_step"}
    step = algorithm_state["server_step"]
    if key == "momentum_buf":
        assert step["m"] is not None and step["v"] is None
        old[key] = step["m"]
    elif key == "opt":
        assert step["m"] is not None and step["v"] is not None
        old[key] = {"m": step["m"], "v": step["v"]}
    else:
        assert step["m"] is None and step["v"] is None
    return old


@pytest.mark.parametrize("case", list(BEFORE_SERVER_STEP))
def test_a_checkpoint_from_before_the_server_step_component_resumes_bit_for_bit(case, build_simulation, tmp_path):
    algorithm, key = BEFORE_SERVER_STEP[case]
    raw = copy.deepcopy({**BASE, "algorithm": algorithm})
    full = build_simulation(raw, scratch_dir=tmp_path / "full").run()
    first = build_simulation(raw, scratch_dir=tmp_path / "first")
    head = first.advance(until=SPLIT)
    state = first.state_dict()
    first.release()
    state["algorithm"] = _old_layout(state["algorithm"], key)
    second = build_simulation(raw, scratch_dir=tmp_path / "second")
    second.load_state_dict(through_disk(state))
    tail = second.advance()
    second.finish()
    rows_equal(head + tail, full.rounds)
    assert torch.equal(second.result(head + tail).final_params, full.final_params)
    second.release()
