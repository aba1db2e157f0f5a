"""The round loop of DESIGN.md, wiring the seams together; nothing here knows a component by name.

One round: availability → selector → (download bytes from the coordinate ledger) → executor
runs the algorithm's client rule → compressor encodes uploads → per-client simulated time →
round mode closes the round → algorithm's server rule → ledger records what changed →
recorder row. Evaluation runs every ``eval.every`` rounds and after the last.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from . import rng as rngmod
from .algorithms.base import AlgorithmContext, Reports
from .config.loader import ResolvedExperiment
from .data.federated import FederatedDataset
from .errors import ConfigError
from .executors.base import ClientBatch
from .models.flat import FlatModel
from .training.local_sgd import LocalTrainer, evaluate, evaluate_many
from .world.ledger import CoordinateLedger
from .world.population import Population

#: ``callback(round_index, row)`` after every round (progress bars).
RoundCallback = Callable[[int, dict], None]


def build_model(exp: ResolvedExperiment, data: FederatedDataset, seed: int) -> FlatModel:
    """The model, initialised from the (seed, "model-init") stream so every variant starts equal."""
    comp = exp["model"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(rngmod.int_seed(seed, "model-init"))
        module = comp.cls.build(comp.cfg, tuple(data.input_shape), int(data.num_classes))
    return FlatModel(module)


@dataclass
class RunResult:
    """Everything one (variant, seed) run produced, for the run-folder writer."""

    variant: str
    seed: int
    rounds: list[dict]
    clients: dict[str, np.ndarray]  # per-client columns
    summary: dict
    final_params: torch.Tensor = field(repr=False)


class Simulation:
    """One experiment variant on one seed's simulated population."""

    def __init__(self, exp: ResolvedExperiment, data: FederatedDataset, seed: int):
        self.exp, self.data, self.seed = exp, data, seed
        cfg = exp.config
        n_train = data.n_train
        n = data.num_clients
        self.model = build_model(exp, data, seed)
        self.params = self.model.flat_params()
        self.buffers = self.model.buffers()
        dim = self.model.dim

        self.availability = exp["availability"].build(n_train, seed, data.extras)
        devices = exp["devices"].build()
        self.population = Population(n_train=n_train, devices=devices.profiles(n, seed))
        self.selector = exp["selector"].build(n_train, seed)
        if self.selector.target() > n:
            raise ConfigError("selector.clients_per_round", self.selector.target(),
                              f"must be <= the number of clients ({n}) of this dataset")
        self.round_mode = exp["round_mode"].build()
        self.algorithm = exp["algorithm"].build(AlgorithmContext(n, dim, n_train, seed, cfg.rounds))
        self.compressor = exp["compressor"].build(dim, seed)
        self.executor = exp["executor"].build()
        self.trainer = LocalTrainer(self.model, exp.train)
        self.ledger = CoordinateLedger(dim, cfg.rounds)
        self.sim_time = 0.0

    # ------------------------------------------------------------------------------------------
    def run(self, on_round: RoundCallback | None = None) -> RunResult:
        cfg = self.exp.config
        wall0 = time.perf_counter()
        rows = []
        try:
            for r in range(cfg.rounds):
                row = self.step(r)
                if (r + 1) % cfg.eval.every == 0 or r == cfg.rounds - 1:
                    row["accuracy"], row["loss"] = evaluate(self.model, self.params, self.buffers,
                                                            self.data.x_server_test, self.data.y_server_test,
                                                            cfg.eval.batch_size)
                rows.append(row)
                if on_round is not None:
                    on_round(r, row)
        finally:
            self.executor.close()
        return RunResult(self.exp.variant, self.seed, rows, self._client_columns(),
                         {"wall_s": time.perf_counter() - wall0}, self.params)

    def step(self, r: int) -> dict:
        """Simulate round ``r`` and return its row of ``rounds.csv`` (accuracy filled in by :meth:`run`)."""
        pop, cfg = self.population, self.exp.config
        t0 = self.sim_time
        available = np.flatnonzero(self.availability.available(r, t0))
        target = self.selector.target()
        cohort = self.selector.select(r, available, self.round_mode.launch_count(target),
                                      rngmod.stream(self.seed, "selection", r))
        clients = cohort.clients.astype(np.int64)
        k = len(clients)

        # Downloads: exactly what each client lacks since its last sync, per model vector sent.
        lacking = self.ledger.lacking(pop.synced_through[clients])
        down = (self.compressor.download_bytes(lacking) * self.algorithm.downlink_vectors
                + self.model.buffer_bytes()).astype(np.int64)
        pop.synced_through[clients] = r - 1

        lr = self.exp.train.lr_schedule.lr(self.exp.train.lr, r, cfg.rounds)
        steps = self.exp.train.steps_for(pop.n_train[clients])
        result = self.executor.run(ClientBatch(r, clients, steps, lr, self.params, self.buffers, self.seed),
                                   self.algorithm, self.trainer, self.data)
        decoded, up = self.compressor.encode_uploads(r, clients, result.updates)
        up = np.asarray(up, dtype=np.int64) + self.model.buffer_bytes() * (len(self.buffers) > 0)

        dev = pop.devices
        finish = (down / dev.down_bytes_per_s[clients]
                  + result.samples * dev.compute_s_per_sample[clients]
                  + up / dev.up_bytes_per_s[clients])
        dropped_at = self.availability.online_until(clients, r, t0) - t0
        close = self.round_mode.close(finish, dropped_at, cohort.target)
        agg = close.aggregated

        reports = Reports(clients=clients[agg], updates=decoded[torch.from_numpy(agg)],
                          weights=cohort.weights[agg], normalize=cohort.normalize,
                          n_samples=pop.n_train[clients[agg]], losses=result.losses[agg],
                          staleness=np.zeros(int(agg.sum()), dtype=np.int64))
        new = self.algorithm.aggregate(r, self.params, reports)
        new = self.params + self.compressor.server_update(r, new - self.params)
        changed = self.ledger.record(r, (new != self.params).numpy())
        self.params = new
        if agg.any() and self.buffers:
            self.buffers = _average_buffers([result.buffers[i] for i in np.flatnonzero(agg)], cohort.weights[agg])

        self.selector.observe(r, clients, agg, result.losses, close.busy_s)
        # Per-client accounting: uploads only count for clients that delivered (or were cut while sending).
        delivered_up = np.where(close.busy_s >= finish, up, 0)
        pop.times_selected[clients] += 1
        pop.times_aggregated[clients[agg]] += 1
        pop.last_round[clients] = r
        pop.bytes_down[clients] += down
        pop.bytes_up[clients] += delivered_up
        pop.resource_s[clients] += close.busy_s
        wasted = np.where(agg | close.late, 0.0, close.busy_s)
        pop.wasted_s[clients] += wasted
        self.sim_time = t0 + close.duration_s

        return {
            "round": r, "sim_time_s": self.sim_time, "round_duration_s": close.duration_s,
            "accuracy": float("nan"), "loss": float("nan"),
            "train_loss": float(np.average(result.losses[agg], weights=np.maximum(result.samples[agg], 1)))
            if agg.any() else float("nan"),
            "lr": lr, "bytes_up": int(delivered_up.sum()), "bytes_down": int(down.sum()),
            "n_available": int(len(available)), "n_selected": k, "n_aggregated": int(agg.sum()),
            "n_stale": 0, "n_dropped": int((finish > dropped_at).sum()),
            "resource_s": float(close.busy_s.sum()), "wasted_s": float(wasted.sum()),
            "coords_changed": int(changed),
        }

    def _client_columns(self) -> dict[str, np.ndarray]:
        pop, d = self.population, self.data
        cols = {
            "client": np.arange(pop.size), "n_train": pop.n_train, "times_selected": pop.times_selected,
            "times_aggregated": pop.times_aggregated, "bytes_up": pop.bytes_up, "bytes_down": pop.bytes_down,
            "resource_s": pop.resource_s, "wasted_s": pop.wasted_s, "last_round": pop.last_round,
        }
        if self.exp.config.eval.per_client:
            acc, loss = evaluate_many(self.model, self.params, self.buffers, d.x_test, d.y_test, d.test_offsets,
                                      self.exp.config.eval.batch_size)
            cols["n_test"], cols["test_accuracy"], cols["test_loss"] = d.n_test, acc, loss
        return cols


def _average_buffers(buffers: list[dict[str, torch.Tensor]], weights: np.ndarray) -> dict[str, torch.Tensor]:
    """Weighted mean of float buffers (BatchNorm statistics); integer counters take the max."""
    w = torch.as_tensor(weights / weights.sum() if weights.sum() > 0 else np.full(len(weights), 1 / len(weights)),
                        dtype=torch.float32)
    out = {}
    for name in buffers[0]:
        stack = torch.stack([b[name] for b in buffers])
        out[name] = (torch.tensordot(w, stack.float(), dims=1).to(stack.dtype) if stack.is_floating_point()
                     else stack.max(0).values)
    return out
