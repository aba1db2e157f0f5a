"""The round loop of one experiment variant on one seed; it knows no component by name.

A round is five phases over frozen records (:mod:`turnout.sim.phases`):

1. **open** — availability at the round's start, the selector's cohort, loss probes (billed);
2. **train** — what each client downloads (priced by :class:`~turnout.world.wire.WirePricer`), the
   executor runs the algorithm's client rule, the compressor encodes the uploads;
3. **close** — delivery times, the round mode decides who is aggregated, late or wasted, late
   reports in flight are parked or arrive;
4. **aggregate** — the algorithm's server rule over fresh and stale reports, the compressor's
   server step, the ledger records which coordinates changed, the selector learns;
5. **account** — population counters, participation, the ``rounds.csv`` row (:mod:`turnout.core.metrics`).

Evaluation runs every ``eval.every`` rounds and after the last. Observers see each finished
round and may stop the run. Every piece of state is declared (:mod:`turnout.core.state`), so a
simulation can be saved between rounds and resumed bit for bit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping

import numpy as np
import torch

from ..algorithms.base import AlgorithmContext
from ..config.loader import ResolvedExperiment
from ..core import metrics
from ..core import rng as rngmod
from ..core.device import resolve_device
from ..core.errors import ConfigError
from ..core.observers import Observer, RoundRecord
from ..core.records import ClientBatch, Reports, RoundFeedback, SelectionContext
from ..core.state import Stateful
from ..data.federated import FederatedDataset
from ..models.flat import FlatModel
from ..training.local_sgd import LocalTrainer, evaluate, evaluate_many
from ..world.context import WorldContext
from ..world.late import LateBuffer
from ..world.ledger import CoordinateLedger
from ..world.model import GlobalModel
from ..world.participation import ParticipationTracker
from ..world.population import Population
from ..world.probe import LossProbe
from ..world.state_store import ClientStateStore
from ..world.wire import WirePricer
from .composition import BuildContext, Injected, Parts, compose
from .phases import Aggregated, Closed, Opened, Trained

#: Server-side inputs handed to components that compare clients through the model's outputs.
SERVER_INPUTS = 128


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


@dataclass(frozen=True)
class _Accounted:
    delivered_up: np.ndarray
    wasted: np.ndarray
    stale_wasted: float
    tau: int


class Simulation(Stateful):
    """One experiment variant on one seed's simulated population.

    ``components`` injects components instead of the configured ones (``{"selector": obj}`` or
    ``{"selector": lambda ctx: MySelector(cfg, ctx.world)}``; see :func:`turnout.sim.composition.compose`).
    """

    state_attrs = ("next_round", "sim_time", "diverged_at", "global_model", "population", "ledger", "late",
                   "participation", "store", "availability", "selector", "round_mode", "algorithm", "compressor")

    def __new__(cls, exp: ResolvedExperiment, *args, **kwargs):
        """A ``no_train`` experiment gets the system-only simulation (:mod:`turnout.sim.system_only`)."""
        if cls is Simulation and exp.config.no_train:
            from .system_only import SystemOnlySimulation

            cls = SystemOnlySimulation
        return super().__new__(cls)

    def __init__(self, exp: ResolvedExperiment, data: FederatedDataset, seed: int, scratch_dir=None,
                 components: Mapping[str, Injected] | None = None):
        self.exp, self.data, self.seed = exp, data, seed
        cfg = exp.config
        n = data.num_clients
        self.model = build_model(exp, data, seed)
        server_inputs = torch.as_tensor(np.ascontiguousarray(data.x_server_test[:SERVER_INPUTS]))
        self.global_model = GlobalModel(self.model, server_inputs)
        dim = self.model.dim
        self.world = WorldContext(num_clients=n, n_train=data.n_train, seed=seed, rounds=cfg.rounds,
                                  label_hist_fn=data.label_histogram, extras=data.extras,
                                  model=self.global_model.view())
        # Per-client state spills into the run folder's scratch area (removed when the run ends).
        self.store = ClientStateStore(dim, n, int(cfg.runtime.state_budget_mb * 2**20), spill_dir=scratch_dir)
        ctx = BuildContext(exp=exp, seed=seed, num_clients=n, world=self.world,
                           algorithm_context=AlgorithmContext(n, dim, data.n_train, seed, cfg.rounds, self.store,
                                                              train=exp.train),
                           dim=dim, layout=tuple(self.model.sizes), store=self.store)
        self.parts: Parts = compose(ctx, components)
        if self.parts.selector.target() > n:
            raise ConfigError("selector.clients_per_round", self.parts.selector.target(),
                              f"must be <= the number of clients ({n}) of this dataset")
        self.population = Population(n_train=data.n_train, devices=self.parts.devices.profiles(n, seed))
        self.trainer = LocalTrainer(self.model, exp.train, device=resolve_device(cfg.runtime.device))
        self.ledger = CoordinateLedger(dim, cfg.rounds)
        self.late = LateBuffer(dim)
        self.participation = ParticipationTracker(n)
        self.pricer = WirePricer(self.population, self.ledger, self.parts.compressor,
                                 self.parts.algorithm.downlink_vectors, self.model.buffer_bytes())
        self.next_round = 0
        self.sim_time = 0.0
        self.diverged_at: int | None = None  # the round after which the global model stopped being finite
        self.unused_late_s = 0.0

    # ---- the components (read-only: inject replacements at construction) ------------------------
    availability = property(lambda self: self.parts.availability)
    selector = property(lambda self: self.parts.selector)
    round_mode = property(lambda self: self.parts.round_mode)
    algorithm = property(lambda self: self.parts.algorithm)
    compressor = property(lambda self: self.parts.compressor)
    executor = property(lambda self: self.parts.executor)

    @property
    def params(self) -> torch.Tensor:
        return self.global_model.params

    @property
    def buffers(self) -> dict[str, torch.Tensor]:
        return self.global_model.buffers

    # ---- running ---------------------------------------------------------------------------------
    def run(self, observers: Iterable[Observer] = ()) -> RunResult:
        """Run every remaining round, then close the run (late reports still in flight are wasted)."""
        wall0 = time.perf_counter()
        try:
            rows = self.advance(observers=observers)
        finally:
            self.close()
        return self.result(rows, wall_s=time.perf_counter() - wall0)

    def advance(self, until: int | None = None, observers: Iterable[Observer] = ()) -> list[dict]:
        """Run rounds ``next_round … until − 1`` (default: to the end) and return their rows.

        Stops early when an observer's ``after_round`` returns true, and for good when the global
        model diverges (a non-finite parameter or evaluation loss): a diverged model's accuracy is
        not evaluated — an argmax over NaN logits is no result — and :attr:`diverged_at` says when.
        """
        cfg = self.exp.config
        end = cfg.rounds if until is None else min(int(until), cfg.rounds)
        observers = list(observers)
        rows = []
        for r in range(self.next_round, end if self.diverged_at is None else self.next_round):
            with np.errstate(all="ignore"):  # a diverging model is reported below, not as numpy warnings
                row = self.step(r)
                self._evaluate(r, row)
            rows.append(row)
            self.next_round = r + 1
            record = RoundRecord(self.exp.variant, self.seed, r, MappingProxyType(row))
            stop = [bool(o.after_round(r, record)) for o in observers]
            if any(stop) or self.diverged_at is not None:
                break
        return rows

    def _evaluate(self, r: int, row: dict) -> None:
        """Server test accuracy and loss on evaluation rounds; a non-finite model or loss marks divergence."""
        cfg = self.exp.config
        if not bool(torch.isfinite(self.params).all()):
            self.diverged_at = r
            return
        if (r + 1) % cfg.eval.every == 0 or r == cfg.rounds - 1:
            params = self.algorithm.eval_params(self.params)
            if not bool(torch.isfinite(params).all()):
                self.diverged_at = r
                return
            acc, loss = evaluate(self.model, params, self.buffers, self.data.x_server_test, self.data.y_server_test,
                                 cfg.eval.batch_size)
            if not math.isfinite(loss) and len(self.data.y_server_test):
                self.diverged_at = r
                return
            row["accuracy"], row["loss"] = acc, loss

    def result(self, rows: list[dict], wall_s: float = 0.0) -> RunResult:
        """Finish the run and collect its tables (``rows`` = every round's row, from the first)."""
        self.finish()
        summary = {"wall_s": wall_s, "late_unused_s": self.unused_late_s, **self.store.stats(),
                   **self.participation.summary(self.population.times_selected), **self.executor.summary(),
                   **({"diverged_at_round": self.diverged_at} if self.diverged_at is not None else {})}
        return RunResult(self.exp.variant, self.seed, rows, self._client_columns(), summary, self.params)

    def close(self) -> None:
        """Release workers and spill files."""
        self.executor.close()
        self.store.close()

    def step(self, r: int) -> dict:
        """Simulate round ``r`` and return its row of ``rounds.csv`` (accuracy filled in by :meth:`advance`)."""
        opened = self._open(r)
        trained = self._train(opened)
        closed = self._close(opened, trained)
        aggregated = self._aggregate(opened, trained, closed)
        accounted = self._account(opened, trained, closed, aggregated)
        return metrics.round_row(opened, trained, closed, aggregated, accounted.delivered_up, accounted.wasted,
                                 accounted.stale_wasted, accounted.tau, self.sim_time, self._component_metrics())

    def _component_metrics(self) -> dict[str, object]:
        """The selector's and the algorithm's own columns of this round's row."""
        return {**self.selector.round_metrics(), **self.algorithm.round_metrics()}

    # ---- phases ------------------------------------------------------------------------------------
    def _open(self, r: int) -> Opened:
        """Who is reachable (busy devices excluded), whom the selector launches, what probing cost."""
        t0 = self.sim_time
        online = self.availability.available(r, t0)
        if len(self.late):  # a device still computing a late report is busy
            online = online.copy()
            online[self.late.busy_clients()] = False
        available = np.flatnonzero(online)
        probe = LossProbe(self.pricer, self.global_model, self.data, self.seed, r)
        cohort = self.selector.select(SelectionContext(
            round=r, time_s=t0, available=available, launch=self.round_mode.launch_count(self.selector.target()),
            rng=rngmod.stream(self.seed, "selection", r), world=self.world, availability=self.availability,
            probe_loss=probe, pending_clients=self.late.clients.copy(), pending_arrival_s=self.late.arrival_s.copy()))
        bill = probe.settle()  # the round starts when the last probe answer is in
        return Opened(r, t0, t0 + bill.seconds, available, cohort, bill)

    def _train(self, opened: Opened) -> Trained:
        """Downloads, local training through the executor, upload encoding."""
        r, clients = opened.round, opened.clients
        down = self.pricer.download(clients, r)
        lr = self.exp.train.lr_schedule.lr(self.exp.train.lr, r, self.exp.config.rounds)
        steps = self.exp.train.steps_for(self.population.n_train[clients])
        self.algorithm.begin_round(r, clients, steps, lr)
        self.compressor.begin_round(r, opened.cohort)
        result = self.executor.run(ClientBatch(r, clients, steps, lr, self.params, self.buffers, self.seed),
                                   self.algorithm, self.trainer, self.data)
        decoded, up = self.compressor.encode_uploads(r, clients, result.updates)
        up = self.algorithm.upload_bytes(r, clients, result.updates,
                                         np.asarray(up, dtype=np.int64) * self.algorithm.uplink_vectors)
        up = np.asarray(up, dtype=np.int64) + self.model.buffer_bytes() * (len(self.buffers) > 0)
        # Reports that are not finite (diverged client, corrupt payload) never reach the server rule.
        rejected = ~finite_rows(decoded) if opened.size else np.zeros(0, bool)
        return Trained(lr, down, result, decoded, up, rejected)

    def _close(self, opened: Opened, trained: Trained) -> Closed:
        """Delivery times, the round mode's verdict, late reports parked and collected."""
        r, clients, cohort = opened.round, opened.clients, opened.cohort
        t0, probe_s = opened.train_start_s, opened.probe.seconds
        result = trained.result
        finish = self.pricer.delivery_s(clients, trained.down, result.samples, trained.up)
        dropped_at = self.availability.online_until(clients, r, t0) - t0
        close = self.round_mode.close(finish, dropped_at, cohort.target)
        agg = close.aggregated & ~trained.rejected
        late = close.late & ~close.aggregated & ~trained.rejected
        duration = (close.duration_s if opened.size else self.round_mode.empty_round_s) + probe_s
        t_close = t0 - probe_s + duration
        download_s, compute_s, upload_s = metrics.critical_path_s(
            self.pricer.download_s(clients, trained.down), self.pricer.compute_s(clients, result.samples),
            self.pricer.upload_s(clients, trained.up), finish, agg)
        feedback = RoundFeedback(r, clients, agg, late, result.losses, result.samples, finish, close.busy_s,
                                 trained.decoded, duration)
        weights = np.asarray(self.selector.settle_weights(cohort, feedback), dtype=np.float64)
        self.late.add(r, clients[late], t0 + finish[late], trained.decoded[torch.from_numpy(late)], weights[late],
                      self.population.n_train[clients[late]], result.losses[late], close.busy_s[late])
        arrived = self.late.pop_arrived(t_close)
        stale_ok = (np.full(len(arrived), self.algorithm.uses_stale_updates)
                    & (r - arrived.origin_round <= self.algorithm.max_staleness))
        return Closed(finish, dropped_at, close, agg, late, duration, t_close, download_s, feedback, weights,
                      arrived, stale_ok, compute_s, upload_s)

    def _aggregate(self, opened: Opened, trained: Trained, closed: Closed) -> Aggregated:
        """The server rule over fresh and stale reports; the ledger records what changed."""
        r, agg, arrived, ok = opened.round, closed.aggregated, closed.arrived, closed.stale_ok
        fresh_clients = opened.clients[agg]
        # Every report taken (the usual case): no cohort-sized copy, as server rules only read their reports.
        fresh = trained.decoded if agg.all() else trained.decoded[torch.from_numpy(agg)]
        stale = arrived.updates[torch.from_numpy(ok)]
        reports = Reports(clients=np.concatenate([fresh_clients, arrived.clients[ok]]),
                          updates=torch.cat([fresh, stale]) if len(stale) else fresh,  # a cohort-sized copy less
                          weights=np.concatenate([closed.weights[agg], arrived.weights[ok]]),
                          normalize=opened.cohort.normalize,
                          n_samples=np.concatenate([self.population.n_train[fresh_clients], arrived.n_samples[ok]]),
                          losses=np.concatenate([trained.result.losses[agg], arrived.losses[ok]]),
                          staleness=np.concatenate([np.zeros(len(fresh_clients), np.int64),
                                                    r - arrived.origin_round[ok]]))
        old = self.params
        new = self.algorithm.aggregate(r, old, reports)
        new = old + self.compressor.server_update(r, new - old)
        changed = self.ledger.record(r, (new != old).numpy())
        self.global_model.params = new
        if agg.any() and self.buffers:
            self.global_model.buffers = _average_buffers([trained.result.buffers[i] for i in np.flatnonzero(agg)],
                                                         closed.weights[agg])
        self.selector.observe(closed.feedback)
        return Aggregated(reports, changed)

    def _account(self, opened: Opened, trained: Trained, closed: Closed, aggregated: Aggregated) -> _Accounted:
        """Per-client counters (an upload happens when the client delivers, on time or late) and τ(t)."""
        pop, clients, close, arrived, ok = (self.population, opened.clients, closed.close, closed.arrived,
                                            closed.stale_ok)
        stale_wasted = float(arrived.busy_s[~ok].sum())
        pop.wasted_s[arrived.clients[~ok]] += arrived.busy_s[~ok]
        pop.times_aggregated[arrived.clients[ok]] += 1
        delivers = closed.aggregated | closed.late
        delivered_up = np.where(delivers | (trained.rejected & (close.aggregated | close.late)), trained.up, 0)
        pop.times_selected[clients] += 1
        pop.times_aggregated[clients[closed.aggregated]] += 1
        pop.last_round[clients] = opened.round
        pop.bytes_down[clients] += trained.down
        pop.bytes_up[clients] += delivered_up
        pop.resource_s[clients] += close.busy_s
        wasted = np.where(delivers, 0.0, close.busy_s)  # late work is judged when it arrives
        pop.wasted_s[clients] += wasted
        tau = self.participation.record(opened.round, clients, aggregated.reports.clients)
        self.sim_time = closed.end_s
        return _Accounted(delivered_up, wasted, stale_wasted, tau)

    # ---- end of run ------------------------------------------------------------------------------
    def finish(self) -> None:
        """Reports still in flight when the run ends never reach the model: their work is wasted."""
        left = self.late.pop_all()
        self.population.wasted_s[left.clients] += left.busy_s
        self.unused_late_s = float(left.busy_s.sum())

    def _population_columns(self) -> dict[str, np.ndarray]:
        """``clients.csv``'s columns that count what each client did (no evaluation)."""
        pop = self.population
        return {
            "client": np.arange(pop.size), "n_train": pop.n_train, "times_selected": pop.times_selected,
            "times_aggregated": pop.times_aggregated, "bytes_up": pop.bytes_up, "bytes_down": pop.bytes_down,
            "resource_s": pop.resource_s, "wasted_s": pop.wasted_s, "last_round": pop.last_round,
            **self.participation.client_columns(),
        }

    def _client_columns(self) -> dict[str, np.ndarray]:
        d = self.data
        cols = self._population_columns()
        if self.exp.config.eval.per_client:
            acc, loss = evaluate_many(self.model, self.algorithm.eval_params(self.params), self.buffers, d.x_test,
                                      d.y_test, d.test_offsets, self.exp.config.eval.batch_size)
            cols["n_test"], cols["test_accuracy"], cols["test_loss"] = d.n_test, acc, loss
        return cols


def finite_rows(x: torch.Tensor) -> np.ndarray:
    """Which rows of ``x`` hold only finite values: ``isfinite(x).all(1)``, without testing every element.

    A row holding a NaN or an infinity sums to NaN or ±inf (IEEE propagation), so only rows whose sum
    is not finite — such a row, or finite values whose sum overflows — are checked element by element.
    A cohort's stacked reports are large (100 × 159,010 floats for an MLP) and this check runs every round;
    element-wise ``isfinite`` over all of them was the driver's largest single cost in a profiled round.
    """
    ok = torch.isfinite(x.sum(dim=1))
    suspect = torch.nonzero(~ok).flatten()
    if len(suspect):
        ok[suspect] = torch.isfinite(x[suspect]).all(dim=1)
    return ok.numpy()


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


__all__ = ["RunResult", "Simulation", "build_model"]
