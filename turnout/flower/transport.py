"""The :class:`~turnout.flower.link.Link` over Flower's Message API (a ``Grid`` in a ``ServerApp``).

Start-up registration: the server waits until the expected number of nodes is connected and asks
each, with a ``query.turnout`` message, which turnout client it is and how many training samples
it holds; from then on client ids are mapped to Flower node ids. A round's instructions go out as
``train.turnout`` messages (``group_id`` = the round) with ``Grid.push_messages``, and replies are
collected with ``Grid.pull_messages``: a reply to an earlier round's message is a late report, an
error reply (the node failed or left) is a failure, and a message is pulled until its reply or
error has come, after which Flower forgets it. Records: instructions and reports travel as an
``ArrayRecord`` (numpy arrays), a ``ConfigRecord`` (scalars) and, for reports, a ``MetricRecord``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..core.errors import ConfigError
from .extra import require_flower
from .link import Arrival, Link, Sent
from .protocol import REGISTER_TYPE, TRAIN_TYPE, Instruction, Report

ARRAYS, CONFIG, METRICS = "turnout.arrays", "turnout.config", "turnout.core.metrics"


def flwr_records():
    """Flower's record types (imported here: Flower is an optional extra)."""

    require_flower()
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    return Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict


def to_record_dict(arrays: dict[str, np.ndarray], config: dict, metrics: dict | None = None):
    """numpy arrays and scalars → a Flower ``RecordDict``."""
    Array, ArrayRecord, ConfigRecord, _, MetricRecord, RecordDict = flwr_records()
    content = {ARRAYS: ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()}),
               CONFIG: ConfigRecord(dict(config))}
    if metrics is not None:
        content[METRICS] = MetricRecord(dict(metrics))
    return RecordDict(content)


def from_record_dict(content) -> tuple[dict[str, np.ndarray], dict, dict]:
    """A Flower ``RecordDict`` written by :func:`to_record_dict` → (arrays, config, metrics)."""
    arrays = {k: v.numpy() for k, v in content[ARRAYS].items()} if ARRAYS in content else {}
    config = dict(content[CONFIG]) if CONFIG in content else {}
    metrics = dict(content[METRICS]) if METRICS in content else {}
    return arrays, config, metrics


def record_bytes(content) -> int:
    """Flower's own count of a message's record bytes (array data and keys, config and metric values)."""
    return int(sum(rec.count_bytes() for rec in content.values()))


class FlowerLink(Link):
    """Devices behind a Flower ``Grid``; ``dim`` is the model size (to decode reports)."""

    def __init__(self, grid: Any, dim: int, ttl_s: float | None = None, poll_s: float = 0.01):
        self.grid, self.dim, self.ttl_s, self.poll_s = grid, int(dim), ttl_s, float(poll_s)
        self.node: dict[int, int] = {}  # client → node
        self.client: dict[int, int] = {}  # node → client
        self._next = 0
        self._pending: dict[str, tuple[int, int]] = {}  # message id → (ticket, client)
        self._dropped: set[int] = set()

    # ---- registration ----------------------------------------------------------------------------
    def register(self, num_clients: int, timeout_s: float) -> np.ndarray:
        """Wait for ``num_clients`` nodes, learn each one's client id and size; returns n_train per client."""
        deadline = time.time() + timeout_s
        nodes = list(self.grid.get_node_ids())
        while len(nodes) < num_clients and time.time() < deadline:
            time.sleep(self.poll_s)
            nodes = list(self.grid.get_node_ids())
        if len(nodes) < num_clients:
            raise ConfigError("num_clients", num_clients, f"only {len(nodes)} nodes connected within {timeout_s:g} s; "
                                                          "start more nodes or wait longer (registration_timeout_s)")
        _, _, _, Message, _, _ = flwr_records()
        messages = [Message(to_record_dict({}, {"dim": self.dim}), dst_node_id=int(n), message_type=REGISTER_TYPE,
                            ttl=self.ttl_s) for n in nodes]
        replies = self.grid.send_and_receive(messages, timeout=max(1.0, deadline - time.time()))
        n_train = np.full(num_clients, -1, dtype=np.int64)
        for reply in replies:
            if reply.has_error():
                continue
            _, config, _ = from_record_dict(reply.content)
            c, node = int(config["client"]), int(reply.metadata.src_node_id)
            if not 0 <= c < num_clients:
                raise ConfigError("client", c, f"a node reported client id {c}; ids must be 0 … {num_clients - 1}")
            if c in self.node and self.node[c] != node:
                raise ConfigError("client", c, "two nodes reported the same client id; give every node its own")
            self.node[c], self.client[node] = node, c
            n_train[c] = int(config["n_train"])
        missing = np.flatnonzero(n_train < 0)
        if len(missing):
            raise ConfigError("num_clients", num_clients, f"clients {missing[:8].tolist()} did not register in time; "
                                                          "start their nodes or wait longer (registration_timeout_s)")
        return n_train

    # ---- rounds ------------------------------------------------------------------------------------
    def clients_online(self) -> np.ndarray:
        online = [self.client[n] for n in self.grid.get_node_ids() if n in self.client]
        return np.array(sorted(online), dtype=np.int64)

    def busy_clients(self) -> np.ndarray:
        return np.array(sorted({c for _, c in self._pending.values()}), dtype=np.int64)

    def node_of(self, client: int) -> int:
        return self.node.get(int(client), -1)

    def send(self, instructions: list[Instruction]) -> list[Sent]:
        _, _, _, Message, _, _ = flwr_records()
        messages, sent = [], []
        for ins in instructions:
            arrays, config = ins.to_parts()
            content = to_record_dict(arrays, config)
            messages.append(Message(content, dst_node_id=self.node[ins.client], message_type=TRAIN_TYPE,
                                    group_id=str(ins.round), ttl=self.ttl_s))
            sent.append(Sent(self._next + len(sent), time.time(), record_bytes(content)))
        ids = list(self.grid.push_messages(messages))
        for ins, s, mid in zip(instructions, sent, ids):
            self._pending[mid] = (s.ticket, ins.client)
        self._next += len(sent)
        return sent

    def poll(self) -> list[Arrival]:
        if not self._pending:
            return []
        out = []
        for reply in self.grid.pull_messages(list(self._pending)):
            at = time.time()
            mid = reply.metadata.reply_to_message_id
            if mid not in self._pending:
                continue
            ticket, _ = self._pending.pop(mid)
            if ticket in self._dropped:
                self._dropped.discard(ticket)
                continue
            if reply.has_error():
                out.append(Arrival(ticket, None, at, error=str(reply.error.reason)))
                continue
            arrays, config, metrics = from_record_dict(reply.content)
            out.append(Arrival(ticket, Report.from_parts(arrays, config, metrics, self.dim), at,
                               record_bytes(reply.content)))
        return out

    def drop(self, tickets: list[int]) -> None:
        live = {t for t, _ in self._pending.values()}
        self._dropped.update(t for t in tickets if t in live)


__all__ = ["FlowerLink", "from_record_dict", "record_bytes", "to_record_dict"]
