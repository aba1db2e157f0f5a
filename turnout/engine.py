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
from .world.context import WorldContext
from .selectors.base import RoundFeedback, SelectionContext
from .world.late import LateBuffer
from .world.probe import LossProbe
from .world.state_store import ClientStateStore
from .world.participation import ParticipationTracker
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

    def __init__(self, exp: ResolvedExperiment, data: FederatedDataset, seed: int, scratch_dir=None):
        self.exp, self.data, self.seed = exp, data, seed
        cfg = exp.config
        n_train = data.n_train
        n = data.num_clients
        self.model = build_model(exp, data, seed)
        self.params = self.model.flat_params()
        self.buffers = self.model.buffers()
        dim = self.model.dim

        world = WorldContext(num_clients=n, n_train=n_train, seed=seed, rounds=cfg.rounds,
                             label_hist_fn=data.label_histogram, extras=data.extras)
        world.model_forward = lambda flat, x: self.model.forward(self.model.unflatten(flat), self.buffers, x)
        world.server_inputs = torch.as_tensor(np.ascontiguousarray(data.x_server_test[:128]))
        world.global_params = lambda: self.params
        self.availability = exp["availability"].build(world)
        devices = exp["devices"].build()
        self.population = Population(n_train=n_train, devices=devices.profiles(n, seed))
        self.world = world
        self.selector = exp["selector"].build(world)
        if self.selector.target() > n:
            raise ConfigError("selector.clients_per_round", self.selector.target(),
                              f"must be <= the number of clients ({n}) of this dataset")
        self.round_mode = exp["round_mode"].build()
        # Per-client state spills into the run folder's scratch area (removed when the run ends).
        self.store = ClientStateStore(dim, n, int(cfg.runtime.state_budget_mb * 2**20), spill_dir=scratch_dir)
        self.algorithm = exp["algorithm"].build(AlgorithmContext(n, dim, n_train, seed, cfg.rounds, self.store,
                                                                 train=exp.train))
        self.compressor = exp["compressor"].build(dim, seed, self.store, layout=self.model.sizes)
        self.executor = exp["executor"].build()
        self.trainer = LocalTrainer(self.model, exp.train)
        self.ledger = CoordinateLedger(dim, cfg.rounds)
        self.late = LateBuffer(dim)
        self.participation = ParticipationTracker(n)
        self.sim_time = 0.0
        self.unused_late_s = 0.0
        self.mean_round_s = 0.0  # REFL's μ_t

    # ------------------------------------------------------------------------------------------
    def run(self, on_round: RoundCallback | None = None) -> RunResult:
        cfg = self.exp.config
        wall0 = time.perf_counter()
        rows = []
        try:
            for r in range(cfg.rounds):
                row = self.step(r)
                if (r + 1) % cfg.eval.every == 0 or r == cfg.rounds - 1:
                    row["accuracy"], row["loss"] = evaluate(self.model, self.algorithm.eval_params(self.params),
                                                            self.buffers,
                                                            self.data.x_server_test, self.data.y_server_test,
                                                            cfg.eval.batch_size)
                rows.append(row)
                if on_round is not None:
                    on_round(r, row)
        finally:
            self.executor.close()
            self.store.close()
        self.finish()
        summary = {"wall_s": time.perf_counter() - wall0, "late_unused_s": self.unused_late_s, **self.store.stats(),
                   **self.participation.summary(self.population.times_selected)}
        return RunResult(self.exp.variant, self.seed, rows, self._client_columns(), summary, self.params)

    def step(self, r: int) -> dict:
        """Simulate round ``r`` and return its row of ``rounds.csv`` (accuracy filled in by :meth:`run`)."""
        pop, cfg = self.population, self.exp.config
        t0 = self.sim_time
        online = self.availability.available(r, t0)
        if len(self.late):  # a device still computing a late report is busy
            online = online.copy()
            online[self.late.busy_clients()] = False
        available = np.flatnonzero(online)
        target = self.selector.target()
        probe = LossProbe(self, r)
        cohort = self.selector.select(SelectionContext(
            round=r, time_s=t0, available=available, launch=self.round_mode.launch_count(target),
            rng=rngmod.stream(self.seed, "selection", r), world=self.world, availability=self.availability,
            mean_round_s=self.mean_round_s, probe_loss=probe, pending_clients=self.late.clients.copy(),
            pending_arrival_s=self.late.arrival_s.copy()))
        clients = cohort.clients.astype(np.int64)
        k = len(clients)
        # Probing (Power-of-Choice) happens before training: the round starts when the last answer is in.
        probe_s, probe_down, probe_up, probe_busy = probe.settle()
        t0 += probe_s

        # Downloads: exactly what each client lacks since its last sync, per model vector sent.
        lacking = self.ledger.lacking(pop.synced_through[clients])
        down = (self.compressor.download_bytes(lacking) * self.algorithm.downlink_vectors
                + self.model.buffer_bytes()).astype(np.int64)
        pop.synced_through[clients] = r - 1

        lr = self.exp.train.lr_schedule.lr(self.exp.train.lr, r, cfg.rounds)
        steps = self.exp.train.steps_for(pop.n_train[clients])
        self.algorithm.begin_round(r, clients, steps, lr)
        self.compressor.begin_round(r, clients, np.asarray(cohort.weights, np.float64), cohort.normalize,
                                    getattr(self.selector, "last_sticky", None))
        result = self.executor.run(ClientBatch(r, clients, steps, lr, self.params, self.buffers, self.seed),
                                   self.algorithm, self.trainer, self.data)
        decoded, up = self.compressor.encode_uploads(r, clients, result.updates)
        up = self.algorithm.upload_bytes(r, clients, result.updates,
                                         np.asarray(up, dtype=np.int64) * self.algorithm.uplink_vectors)
        up = np.asarray(up, dtype=np.int64) + self.model.buffer_bytes() * (len(self.buffers) > 0)
        # Reports that are not finite (diverged client, corrupt payload) never reach the server rule.
        rejected = ~torch.isfinite(decoded).all(dim=1).numpy() if k else np.zeros(0, bool)

        dev = pop.devices
        finish = (down / dev.down_bytes_per_s[clients]
                  + result.samples * dev.compute_s_per_sample[clients]
                  + up / dev.up_bytes_per_s[clients])
        dropped_at = self.availability.online_until(clients, r, t0) - t0
        close = self.round_mode.close(finish, dropped_at, cohort.target)
        agg, late = close.aggregated & ~rejected, close.late & ~close.aggregated & ~rejected
        duration = (close.duration_s if k else self.round_mode.empty_round_s) + probe_s
        t_close = t0 - probe_s + duration
        # REFL's moving-average round duration: μ_t = (1 − α)·D_{t−1} + α·μ_{t−1}, α = 0.25 (spec §6.1).
        self.mean_round_s = duration if r == 0 else 0.75 * duration + 0.25 * self.mean_round_s

        # GlueFL's download time (DT): the download part of the critical path, i.e. of the last on-time
        # report the round waited for; Σ over rounds = time the run spent synchronising the model.
        down_s = down / dev.down_bytes_per_s[clients]
        critical = np.flatnonzero(agg)[np.argmax(finish[agg])] if agg.any() else None
        download_s = float(down_s[critical]) if critical is not None else 0.0

        feedback = RoundFeedback(r, clients, agg, late, result.losses, result.samples, finish, close.busy_s,
                                 decoded, duration)
        weights = np.asarray(self.selector.settle_weights(cohort, feedback), dtype=np.float64)

        # Late reports: park this round's, collect earlier ones that have arrived by the close.
        self.late.add(r, clients[late], t0 + finish[late], decoded[torch.from_numpy(late)], weights[late],
                      pop.n_train[clients[late]], result.losses[late], close.busy_s[late])
        arrived = self.late.pop_arrived(t_close)
        stale_ok = (np.full(len(arrived), self.algorithm.uses_stale_updates)
                    & (r - arrived.origin_round <= self.algorithm.max_staleness))
        stale_wasted = float(arrived.busy_s[~stale_ok].sum())
        pop.wasted_s[arrived.clients[~stale_ok]] += arrived.busy_s[~stale_ok]
        pop.times_aggregated[arrived.clients[stale_ok]] += 1

        fresh_clients = clients[agg]
        ok_t = torch.from_numpy(stale_ok)
        reports = Reports(clients=np.concatenate([fresh_clients, arrived.clients[stale_ok]]),
                          updates=torch.cat([decoded[torch.from_numpy(agg)], arrived.updates[ok_t]]),
                          weights=np.concatenate([weights[agg], arrived.weights[stale_ok]]),
                          normalize=cohort.normalize,
                          n_samples=np.concatenate([pop.n_train[fresh_clients], arrived.n_samples[stale_ok]]),
                          losses=np.concatenate([result.losses[agg], arrived.losses[stale_ok]]),
                          staleness=np.concatenate([np.zeros(len(fresh_clients), np.int64),
                                                    r - arrived.origin_round[stale_ok]]))
        new = self.algorithm.aggregate(r, self.params, reports)
        new = self.params + self.compressor.server_update(r, new - self.params)
        changed = self.ledger.record(r, (new != self.params).numpy())
        self.params = new
        if agg.any() and self.buffers:
            self.buffers = _average_buffers([result.buffers[i] for i in np.flatnonzero(agg)], weights[agg])

        self.selector.observe(feedback)
        # Per-client accounting: an upload happens when the client delivers (on time or late).
        delivers = agg | late
        delivered_up = np.where(delivers | (rejected & (close.aggregated | close.late)), up, 0)
        pop.times_selected[clients] += 1
        pop.times_aggregated[fresh_clients] += 1
        pop.last_round[clients] = r
        pop.bytes_down[clients] += down
        pop.bytes_up[clients] += delivered_up
        pop.resource_s[clients] += close.busy_s
        wasted = np.where(delivers, 0.0, close.busy_s)  # late work is judged when it arrives
        pop.wasted_s[clients] += wasted
        tau = self.participation.record(r, clients, reports.clients)
        self.sim_time = t_close

        return {
            "round": r, "sim_time_s": self.sim_time, "round_duration_s": duration,
            "accuracy": float("nan"), "loss": float("nan"),
            "train_loss": float(np.average(result.losses[agg], weights=np.maximum(result.samples[agg], 1)))
            if agg.any() else float("nan"),
            "lr": lr, "bytes_up": int(delivered_up.sum()) + probe_up, "bytes_down": int(down.sum()) + probe_down,
            "n_available": int(len(available)), "n_selected": k, "n_aggregated": len(reports),
            "n_stale": int(stale_ok.sum()), "n_late": int(late.sum()), "n_stale_dropped": int((~stale_ok).sum()),
            "n_dropped": int((finish > dropped_at).sum()), "n_rejected": int(rejected.sum()),
            "download_s": download_s, "resource_s": float(close.busy_s.sum()) + probe_busy, "wasted_s": float(wasted.sum()) + stale_wasted,
            "tau": tau, "coords_changed": int(changed),
            **self.selector.round_metrics(), **self.algorithm.round_metrics(),
        }

    def finish(self) -> None:
        """Reports still in flight when the run ends never reach the model: their work is wasted."""
        left = self.late.pop_all()
        self.population.wasted_s[left.clients] += left.busy_s
        self.unused_late_s = float(left.busy_s.sum())

    def _client_columns(self) -> dict[str, np.ndarray]:
        pop, d = self.population, self.data
        cols = {
            "client": np.arange(pop.size), "n_train": pop.n_train, "times_selected": pop.times_selected,
            "times_aggregated": pop.times_aggregated, "bytes_up": pop.bytes_up, "bytes_down": pop.bytes_down,
            "resource_s": pop.resource_s, "wasted_s": pop.wasted_s, "last_round": pop.last_round,
            **self.participation.client_columns(),
        }
        if self.exp.config.eval.per_client:
            acc, loss = evaluate_many(self.model, self.algorithm.eval_params(self.params), self.buffers, d.x_test, d.y_test, d.test_offsets,
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
