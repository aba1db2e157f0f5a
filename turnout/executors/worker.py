"""The process side of the parallel executor: train the clients it is sent, nothing else.

A worker holds the model and training settings, maps the dataset and the parameter board the
driver wrote (:mod:`turnout.executors.shared`), and for each task runs the very
:class:`~turnout.training.local_sgd.LocalTrainer` the sequential executor runs, on one torch
thread, with the client's own (seed, "batches", round, client) stream — so its end points are
bitwise those of the sequential executor. Algorithm hooks never run here.

Messages are pickled tuples; every request gets one reply, ``("ok", value)`` or
``("error", one line, traceback)``.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback

import numpy as np
import torch

from ..models.flat import FlatModel
from ..training.local_sgd import LocalObjective, LocalTrainer
from .cohort import train_client


class WorkerState:
    """What one worker keeps between messages: trainer, mapped data, mapped board."""

    def __init__(self):
        self.trainer: LocalTrainer | None = None
        self.x = self.y = self.offsets = None
        self.board: dict[str, np.ndarray] = {}

    def handle(self, msg: tuple):
        kind = msg[0]
        if kind == "model":
            _, module, cfg, grad_backend = msg
            self.trainer = LocalTrainer(FlatModel(module), cfg, grad_backend)
        elif kind == "data":
            _, x, y, offsets = msg
            self.x, self.y, self.offsets = x.open("c"), y.open("c"), offsets.open("c")
        elif kind == "board":
            self.board = {name: spec.open("r+") for name, spec in msg[1].items()}
        elif kind == "train":
            return self.train(*msg[1:])
        else:
            raise ValueError(f"unknown message {kind!r}")
        return None

    def train(self, round: int, seed: int, lr: float, buffers: dict, tasks: list[tuple]) -> list[tuple]:
        """Train each ``(row, client, steps, start_row, scale, prox_mu, freeze, has_offset)`` task."""
        board, out = self.board, []
        for row, client, steps, start_row, scale, prox_mu, freeze, has_offset in tasks:
            start = torch.from_numpy(np.array(board["start"][start_row]))
            offset = torch.from_numpy(np.array(board["offset"][row])) if has_offset else None
            objective = LocalObjective(offset=offset, scale=scale, prox_mu=prox_mu, freeze=freeze)
            res = train_client(self.trainer, self.x, self.y, self.offsets, round, seed, lr, buffers, client, steps,
                               start, objective)
            board["end"][row] = res.params.numpy()
            if res.grad_sum is not None:
                board["grad"][row] = res.grad_sum.numpy()
            out.append((row, res.mean_loss, res.samples, res.grad_sum is not None, res.buffers))
        return out


def main(conn) -> None:
    """Serve requests on ``conn`` until told to stop or the driver goes away, then exit at once.

    Exiting with ``os._exit`` skips the interpreter's teardown of torch (seconds on a busy machine);
    a worker has nothing to flush but its output streams. Ctrl-C is left to the driver.
    """
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the driver, which stops the pool
    serve(conn)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def serve(conn) -> None:
    state = WorkerState()
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if msg[0] == "stop":
            return
        try:
            reply = ("ok", state.handle(msg))
        except Exception as exc:  # reported to the driver, which stops the simulation with it
            reply = ("error", f"{type(exc).__name__}: {exc}", traceback.format_exc())
        conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
