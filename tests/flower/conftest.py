"""An in-process :class:`~turnout.flower.link.Link` for testing the deployment's server loop without Flower.

Each instruction is serialised to parts and back (as a transport would), run at once by a real
:class:`~turnout.flower.device.DeviceRule` on the client's data, and its report becomes visible to
``poll`` after the client's ``delay_s``. ``fail`` makes a client's device answer with an error,
``forget`` makes it lose its model copy before its next instruction.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest

from turnout.flower.device import DeviceRule, DeviceState
from turnout.flower.link import Arrival, Link, Sent
from turnout.flower.protocol import Instruction, Report

#: 10 digits clients, logistic regression, 4 per round: a deployment test's experiment.
DIGITS = {"name": "deploy", "rounds": 8, "data": {"name": "digits", "num_clients": 10}, "model": {"name": "logreg"},
          "train": {"batch_size": 20, "local_steps": 5, "lr": 0.2},
          "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 2},
          "output": {"progress": False, "plots": False}}


class LocalLink(Link):
    def __init__(self, exp, data, delay_s=None, fail=(), forget=()):
        self.data = data
        self.rule = DeviceRule(exp, data.input_shape, data.num_classes)
        self.state = {c: DeviceState() for c in range(data.num_clients)}
        self.delay_s, self.fail, self.forget = dict(delay_s or {}), set(fail), set(forget)
        self.queue: list[tuple[float, int, Report | None, int]] = []
        self.dropped: set[int] = set()
        self.sent_instructions: list[Instruction] = []
        self.next = 0

    def clients_online(self):
        return np.arange(self.data.num_clients)

    def busy_clients(self):
        return np.array(sorted({c for _, _, _, c in self.queue}), dtype=np.int64)

    def send(self, instructions):
        out = []
        for ins in instructions:
            arrays, config = ins.to_parts()
            ins = Instruction.from_parts(copy.deepcopy(arrays), dict(config), self.rule.dim)
            self.sent_instructions.append(ins)
            c = ins.client
            if c in self.forget:
                self.forget.discard(c)
                self.state[c] = DeviceState()
            report = None
            if c not in self.fail:
                x, y = self.data.client_train(c)
                report, self.state[c] = self.rule.run(ins, self.state[c], x, y)
                report = Report.from_parts(*report.to_parts(), dim=self.rule.dim)
            now = time.time()
            self.queue.append((now + self.delay_s.get(c, 0.0), self.next, report, c))
            out.append(Sent(self.next, now))
            self.next += 1
        return out

    def poll(self):
        now, out, keep = time.time(), [], []
        for item in self.queue:
            if item[0] > now:
                keep.append(item)
            elif item[1] not in self.dropped:
                out.append(Arrival(item[1], item[2], now, error="" if item[2] is not None else "device failed"))
        self.queue = keep
        return out

    def drop(self, tickets):
        self.dropped.update(tickets)


@pytest.fixture(scope="session")
def local_link():
    """The :class:`LocalLink` class."""
    return LocalLink


@pytest.fixture
def digits() -> dict:
    """A fresh copy of :data:`DIGITS` to edit."""
    return copy.deepcopy(DIGITS)
