"""Flower's records end to end without Ray: FlowerLink (server) and the turnout ClientApp (nodes) over a
minimal in-memory grid that calls the ClientApp the way Flower's runtime does (errors become error replies).

Needs Flower (skipped without it) but no simulation engine, so it is part of the default suite."""

import copy
import uuid

import numpy as np
import pytest
import torch

flwr_app = pytest.importorskip("flwr.app")

from turnout.core.errors import ConfigError  # noqa: E402
from turnout.flower import client_app  # noqa: E402
from turnout.flower.clientapp import STATE_ARRAYS, NodeData  # noqa: E402
from turnout.flower.run import FlowerRun, ServerData  # noqa: E402
from turnout.flower.transport import FlowerLink  # noqa: E402
from turnout.runs.experiment import prepare  # noqa: E402
from turnout.sim.composition import expand  # noqa: E402
from turnout.sim.engine import Simulation  # noqa: E402


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """What Flower's runtime sets in a ServerApp's process before ``main`` runs (messages are stamped with it)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


class MemoryGrid:
    """Nodes in this process: a pushed message is answered at once by the ClientApp (an exception → an error)."""

    def __init__(self, app, n: int, ids=None):
        self.app = app
        self.contexts = {1000 + i: flwr_app.Context(run_id=1, node_id=1000 + i, node_config={"partition-id": i},
                                                    state=flwr_app.RecordDict(), run_config={}) for i in range(n)}
        self.replies = {}

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        ids = []
        for m in messages:
            mid = uuid.uuid4().hex
            m.metadata.__dict__["_message_id"] = mid
            try:
                reply = self.app(m, self.contexts[m.metadata.dst_node_id])
            except Exception as exc:  # Flower's runtime turns a failing ClientApp into an error reply
                reply = flwr_app.Message(flwr_app.Error(code=1, reason=str(exc)), reply_to=m)
            self.replies[mid] = reply
            ids.append(mid)
        return ids

    def pull_messages(self, ids):
        return [self.replies.pop(i) for i in list(ids) if i in self.replies]

    def send_and_receive(self, messages, timeout=None):
        return self.pull_messages(self.push_messages(messages))


def node_loader(exp, data, client_of=lambda i: i, broken=()):
    def load(context):
        i = int(context.node_config["partition-id"])
        if i in broken:
            raise RuntimeError(f"node {i} is broken")
        x, y = data.client_train(i)
        return NodeData(exp, client_of(i), x, y, tuple(data.input_shape), data.num_classes)
    return load


def setup(digits, **overrides):
    digits.update(copy.deepcopy(overrides))
    exp = expand(digits)[0]
    return exp, prepare([exp]).dataset_for(exp, 0)


def test_flower_records_carry_the_gluefl_run_bit_for_bit(digits):
    exp, data = setup(digits, selector={"name": "sticky", "clients_per_round": 4, "sticky_size": 6,
                                        "sticky_per_round": 3},
                      compressor={"name": "gluefl", "ratio": 0.3, "shared_ratio": 0.2, "regenerate_every": 3})
    grid = MemoryGrid(client_app(node_loader(exp, data)), data.num_clients)
    link = FlowerLink(grid, dim=0, poll_s=0.001)
    n_train = link.register(data.num_clients, timeout_s=5)
    assert np.array_equal(n_train, data.n_train)
    task = ServerData(tuple(data.input_shape), data.num_classes, data.x_server_test, data.y_server_test, n_train)
    run = FlowerRun(exp, task, 0, link, clock="modelled", poll_s=0.001)
    link.dim = run.model.dim
    deployed = run.run()
    simulated = Simulation(exp, data, 0).run()
    assert torch.equal(deployed.final_params, simulated.final_params)
    assert [r["bytes_down"] for r in deployed.rounds] == [r["bytes_down"] for r in simulated.rounds]
    assert all(r["record_bytes_down"] > r["payload_bytes_down"] > 0 for r in deployed.rounds)  # + npy headers, keys
    kept = [c for c in grid.contexts.values() if STATE_ARRAYS in c.state]  # copies and residuals live on the nodes
    assert kept and all("params" in c.state[STATE_ARRAYS] for c in kept)
    assert any("row.gluefl/residual" in c.state[STATE_ARRAYS] for c in kept)
    assert {e["node"] for e in run.cohort_log} <= set(grid.contexts)


def test_a_node_whose_clientapp_fails_is_a_dropout(digits):
    exp, data = setup(digits, rounds=3, selector={"name": "uniform", "clients_per_round": 10})
    load = node_loader(exp, data)
    grid = MemoryGrid(client_app(load), data.num_clients)
    link = FlowerLink(grid, dim=0, poll_s=0.001)
    n_train = link.register(data.num_clients, timeout_s=5)
    grid.app = client_app(node_loader(exp, data, broken={4}))  # node 4 breaks after registering
    task = ServerData(tuple(data.input_shape), data.num_classes, data.x_server_test, data.y_server_test, n_train)
    run = FlowerRun(exp, task, 0, link, clock="modelled", poll_s=0.001)
    link.dim = run.model.dim
    rows = run.run().rounds
    assert [r["n_failed"] for r in rows] == [1, 1, 1] and [r["n_aggregated"] for r in rows] == [9, 9, 9]
    assert [e["failed"] for e in run.cohort_log if e["client"] == 4] == [True, True, True]


def test_registration_refuses_duplicate_and_out_of_range_client_ids(digits):
    exp, data = setup(digits)
    dup = MemoryGrid(client_app(node_loader(exp, data, client_of=lambda i: min(i, 8))), data.num_clients)
    with pytest.raises(ConfigError, match="two nodes reported the same client id"):
        FlowerLink(dup, dim=0).register(data.num_clients, timeout_s=5)
    far = MemoryGrid(client_app(node_loader(exp, data, client_of=lambda i: i + 1)), data.num_clients)
    with pytest.raises(ConfigError, match=r"client = 10: a node reported client id 10; ids must be 0 … 9"):
        FlowerLink(far, dim=0).register(data.num_clients, timeout_s=5)
    few = MemoryGrid(client_app(node_loader(exp, data)), 3)
    with pytest.raises(ConfigError, match=r"num_clients = 10: only 3 nodes connected within 0.05 s"):
        FlowerLink(few, dim=0).register(data.num_clients, timeout_s=0.05)
