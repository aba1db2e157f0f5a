"""A Flower ``ClientApp`` that runs turnout's client rule on one node's data, for a torch model.

The node answers two message types: ``query.turnout`` at start-up (which turnout client it is and
how many training samples it holds) and ``train.turnout`` every round it is launched
(:class:`~turnout.flower.device.DeviceRule`). What the device keeps between rounds — its copy of
the global model and the compressor's residual rows for it — lives in Flower's ``Context.state``,
which Flower keeps per node across messages.

The caller says where a node's data comes from: ``load(context) -> NodeData`` (the experiment, the
client id, its training arrays and the model's input shape and classes). ``load`` is called on
every message, so it should cache what it reads.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from ..config.loader import ResolvedExperiment
from ..sim.composition import expand
from .device import DeviceRule, DeviceState
from .extra import require_flower
from .protocol import Instruction
from .transport import flwr_records, from_record_dict, to_record_dict

STATE_ARRAYS, STATE_META = "turnout.core.device", "turnout.core.device.meta"
ACTION = "turnout"  # the action of REGISTER_TYPE / TRAIN_TYPE


@dataclass(frozen=True)
class NodeData:
    """What a node brings: the experiment it takes part in, its client id and its training data."""

    exp: ResolvedExperiment
    client: int
    x_train: np.ndarray
    y_train: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    delay_s: float = 0.0  # seconds the node waits before it answers a round (emulates a slow device)
    input_scaling: object = None  # the dataset's InputScaling: stored uint8 inputs become floats in the model


class SimulatedPartition:
    """``load`` for Flower's simulation engine: node ``partition-id`` holds that client's training data.

    The dataset is the experiment's own ``data`` block on ``seed`` — the very split a simulation
    of the same experiment and seed gives client ``partition-id`` — so a Flower simulation and
    ``turnout run`` train on the same data. Built once per process (a Flower simulation runs its
    ``ClientApp`` in a few worker processes) and picklable, as the simulation engine requires.
    ``delay_s`` (client → seconds) makes those nodes answer late, to try the measured clock's
    deadlines and late reports on one machine.
    """

    def __init__(self, raw: dict, variant: str, seed: int, overrides: dict | None = None,
                 delay_s: dict[int, float] | None = None):
        self.raw, self.variant, self.seed, self.overrides = raw, variant, int(seed), dict(overrides or {})
        self.delay_s = {int(k): float(v) for k, v in (delay_s or {}).items()}

    def __call__(self, context: Any) -> NodeData:
        exp, data = _experiment_data(json.dumps([self.raw, self.overrides], sort_keys=True), self.variant, self.seed)
        client = int(context.node_config["partition-id"])
        x, y = data.client_train(client)
        return NodeData(exp, client, x, y, tuple(data.input_shape), int(data.num_classes),
                        self.delay_s.get(client, 0.0), data.input_scaling)


_LOADED: dict[tuple, tuple] = {}


def _experiment_data(spec: str, variant: str, seed: int):
    """(the resolved variant, its dataset on ``seed``), built once per process."""
    key = (spec, variant, seed)
    if key not in _LOADED:
        raw, overrides = json.loads(spec)
        exp = next(v for v in expand(raw, overrides) if v.variant == variant)
        data = exp["data"]
        _LOADED[key] = (exp, data.cls.build(data.cfg, seed))
    return _LOADED[key]


def load_state(context: Any) -> DeviceState:
    """The device state kept in ``context.state`` (empty on a node's first round)."""
    if STATE_META not in context.state:
        return DeviceState()
    meta = context.state[STATE_META]
    arrays = {k: v.numpy() for k, v in context.state[STATE_ARRAYS].items()}
    params = arrays.pop("params") if bool(meta["has_params"]) else None
    rows = {k[len("row."):]: v for k, v in arrays.items() if k.startswith("row.")}
    return DeviceState(params, int(meta["through"]), rows)


def save_state(context: Any, state: DeviceState) -> None:
    """Keep the device state in ``context.state`` for the node's next message."""
    Array, ArrayRecord, ConfigRecord, _, _, _ = flwr_records()
    arrays = {f"row.{k}": Array(np.ascontiguousarray(v)) for k, v in state.rows.items()}
    if state.params is not None:
        arrays["params"] = Array(np.ascontiguousarray(state.params))
    context.state[STATE_ARRAYS] = ArrayRecord(arrays)
    context.state[STATE_META] = ConfigRecord({"through": int(state.through), "has_params": state.params is not None})


def client_app(load: Callable[[Any], NodeData]):
    """The ``ClientApp``; ``load(context)`` gives the node's :class:`NodeData`."""
    require_flower()
    from flwr.clientapp import ClientApp

    _, _, _, Message, _, _ = flwr_records()
    app = ClientApp()
    rules: dict[int, tuple[ResolvedExperiment, DeviceRule]] = {}

    def rule_for(data: NodeData) -> DeviceRule:
        key = id(data.exp)
        if key not in rules:
            rules[key] = (data.exp, DeviceRule(data.exp, data.input_shape, data.num_classes, data.input_scaling))
        return rules[key][1]

    @app.query(ACTION)
    def register(message, context):
        data = load(context)
        content = to_record_dict({}, {"client": int(data.client), "n_train": int(len(data.y_train))})
        return Message(content, reply_to=message)

    @app.train(ACTION)
    def train(message, context):
        data = load(context)
        torch.set_num_threads(data.exp.config.runtime.torch_threads)
        rule = rule_for(data)
        arrays, config, _ = from_record_dict(message.content)
        ins = Instruction.from_parts(arrays, config, rule.dim)
        if ins.client != data.client:
            raise ValueError(f"an instruction for client {ins.client} reached the node of client {data.client}")
        report, kept = rule.run(ins, load_state(context), data.x_train, data.y_train)
        save_state(context, kept)
        if data.delay_s > 0:
            time.sleep(data.delay_s)
        return Message(to_record_dict(*report.to_parts()), reply_to=message)

    return app


__all__ = ["NodeData", "SimulatedPartition", "client_app", "load_state", "save_state"]
