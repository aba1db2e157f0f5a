"""The round loop of one experiment variant on one seed; it knows no component by name.

A round is five phases over frozen records (:mod:`turnout.sim.phases`); the same loop runs a trained
simulation, the system-only proxy and a deployment on real devices, each handing it a
:class:`~turnout.sim.work.Work` that says how the cohort's reports are produced and aggregated:

1. **open** — availability at the round's start, the selector's cohort, loss probes (billed);
2. **train** — what each client downloads (priced by :class:`~turnout.world.wire.WirePricer`), the
   executor runs the algorithm's client rule, the compressor encodes the uploads;
3. **settle** — delivery times, the round mode's verdict on who is aggregated, late or wasted, late
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
from ..core.observers import Observer, Observers, RoundRecord, RunEnd, RunStart
from ..core.records import HeldReports, Reports, RoundClose, RoundFeedback, SelectionContext
from ..core.state import Stateful
from ..core.wire import VALUE_BYTES
from ..data.federated import FederatedDataset
from ..models.flat import FlatModel
from ..privacy.base import SelectionFacts
from ..training.local_sgd import LocalTrainer, evaluate, evaluate_many
from ..world.context import WorldContext
from ..world.late import LateBuffer
from ..world.ledger import CoordinateLedger
from ..world.lost import LostTasks
from ..world.model import GlobalModel
from ..world.participation import ParticipationTracker
from ..world.population import Population
from ..world.probe import LossProbe
from ..world.state_store import ClientStateStore
from ..world.wire import WirePricer
from .composition import BuildContext, Injected, Parts, compose
from .phases import Accounted, Aggregated, Launched, Opened, Settled, Trained, round_row
from .system_only import SystemOnlyWork
from .timing import Timing, timing_for
from .work import TrainedWork, TrainOrder, Work, finite_rows, held_reports, report_device, take_rows

#: Server-side inputs handed to components that compare clients through the model's outputs.
SERVER_INPUTS = 128


def build_model(exp: ResolvedExperiment, data: FederatedDataset, seed: int) -> FlatModel:
    """The model, initialised from the (seed, "model-init") stream so every variant starts equal."""
    comp = exp["model"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(rngmod.int_seed(seed, "model-init"))
        module = comp.cls.build(comp.cfg, tuple(data.input_shape), int(data.num_classes))
    if data.input_scaling is not None:  # uint8 images stay uint8 until this forward reads them
        data.input_scaling.attach(module)
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


class Simulation(Stateful):
    """One experiment variant on one seed's simulated population.

    ``components`` injects components instead of the configured ones (``{"selector": obj}`` or
    ``{"selector": lambda ctx: MySelector(cfg, ctx.world)}``; see :func:`turnout.sim.composition.compose`).
    ``work`` says how the cohort's reports are produced and aggregated (:mod:`turnout.sim.work`): by
    default the executor trains the model, or, for a ``no_train`` experiment, the system-only proxy
    prices the work instead (:mod:`turnout.sim.system_only`).
    """

    state_attrs = ("next_round", "sim_time", "diverged_at", "global_model", "population", "ledger", "late",
                   "lost", "participation", "store", "availability", "selector", "round_mode",
                   "algorithm", "compressor", "privacy", "secure_aggregation")

    def __init__(self, exp: ResolvedExperiment, data: FederatedDataset, seed: int, scratch_dir=None,
                 components: Mapping[str, Injected] | None = None, work: Work | None = None):
        self.exp, self.data, self.seed = exp, data, seed
        cfg = exp.config
        self.work: Work = work if work is not None else SystemOnlyWork() if cfg.no_train else TrainedWork()
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
        if self.trainer.device.type == "cuda":  # torch's switch is per process; the run's config sets it
            torch.backends.cudnn.benchmark = cfg.runtime.cudnn_benchmark
        self.ledger = CoordinateLedger(dim, cfg.rounds)
        self.late = LateBuffer(self.work.report_dim(dim))
        self.lost = LostTasks()  # doomed tasks still running: their devices are busy until their clients go offline
        #: what the reports in flight mean to a round, chosen once from the round mode (:mod:`turnout.sim.timing`)
        self.timing: Timing = timing_for(type(self.round_mode))(self.algorithm)
        self.participation = ParticipationTracker(n)
        self.pricer: WirePricer = self.work.pricer(self)
        self.next_round = 0
        self.sim_time = 0.0
        self.diverged_at: int | None = None  # the round after which the global model stopped being finite
        self.unused_late_s = 0.0
        self.work.attach(self)
        sel = self.exp["selector"]
        self.privacy.attach(SelectionFacts(sel.name, type(self.selector).reads_client_data, self.selector.target()))
        self.report_device, self._cpu_because = report_device(self)
        self.hold_reports, self._held_off_because = held_reports(self)

    # ---- the components (read-only: inject replacements at construction) ------------------------
    availability = property(lambda self: self.parts.availability)
    selector = property(lambda self: self.parts.selector)
    round_mode = property(lambda self: self.parts.round_mode)
    algorithm = property(lambda self: self.parts.algorithm)
    compressor = property(lambda self: self.parts.compressor)
    executor = property(lambda self: self.parts.executor)
    privacy = property(lambda self: self.parts.privacy)
    secure_aggregation = property(lambda self: self.parts.secure_aggregation)

    @property
    def params(self) -> torch.Tensor:
        return self.global_model.params

    def load_state_dict(self, state: dict) -> None:
        if "models" not in state["late"]:  # a checkpoint from before parked reports carried their origin model
            versions = state.get("versions", {"models": {}})  # held apart then (none before FedAsync's mixing)
            state = {**{k: v for k, v in state.items() if k != "versions"},
                     "late": {**state["late"], "models": dict(versions["models"])}}
        if "privacy" not in state:  # a checkpoint from before these seams: they were off
            state = {**state, "privacy": self.privacy.state_dict(),
                     "secure_aggregation": self.secure_aggregation.state_dict()}
        if "lost" not in state:  # a checkpoint from before lost tasks were kept busy: none was recorded
            state = {**state, "lost": LostTasks().state_dict()}
        super().load_state_dict(state)

    @property
    def buffers(self) -> dict[str, torch.Tensor]:
        return self.global_model.buffers

    # ---- running ---------------------------------------------------------------------------------
    def run(self, observers: Iterable[Observer] = ()) -> RunResult:
        """Run every remaining round, then end the run (late reports still in flight are wasted).

        Each observer is begun, told of every round and ended (with the run's summary) exactly once.
        """
        wall0 = time.perf_counter()
        watching = Observers(observers)
        start = RunStart(variant=self.exp.variant, seed=self.seed, rounds=self.exp.config.rounds,
                         next_round=self.next_round)
        with watching.running(start):
            with self:  # workers and spill files are released when the rounds are done
                rows = self.advance(observers=[watching])
                self.finish()
            result = self.result(rows, wall_s=time.perf_counter() - wall0)
            watching.end(RunEnd(finished=True, summary=result.summary, clients=result.clients))
        return result

    def __enter__(self) -> "Simulation":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

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
                self.work.evaluate(self, r, row)
            rows.append(row)
            self.next_round = r + 1
            record = RoundRecord(self.exp.variant, self.seed, r, MappingProxyType(row))
            stop = [bool(o.after_round(r, record)) for o in observers]
            if any(stop) or self.diverged_at is not None:
                break
        return rows

    def evaluate(self, r: int, row: dict) -> None:
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
                                 cfg.eval.batch_size, device=self.trainer.device)
            if not math.isfinite(loss) and len(self.data.y_server_test):
                self.diverged_at = r
                return
            row["accuracy"], row["loss"] = acc, loss

    def finish(self) -> None:
        """End the run: reports still in flight never reach the model, so their work is wasted."""
        self.work.end(self)
        left = self.late.pop_all()
        self.population.wasted_s[left.clients] += left.busy_s
        self.unused_late_s = float(left.busy_s.sum())

    def result(self, rows: list[dict], wall_s: float = 0.0) -> RunResult:
        """The run's tables, once it is finished (``rows`` = every round's row, from the first)."""
        # vector_bytes: one dense model-sized vector on the wire, the unit the seed papers count communication in
        # (docs/results); the report turns cum bytes into vectors with it (turnout.app.report)
        private, private_cols = self.privacy.summary(self.population.times_aggregated, self.next_round)
        summary = {"wall_s": wall_s, "late_unused_s": self.unused_late_s,
                   "vector_bytes": int(self.model.dim * VALUE_BYTES), **self.store.stats(),
                   **self.participation.summary(self.population.times_selected), **self.executor.summary(),
                   **({"diverged_at_round": self.diverged_at} if self.diverged_at is not None else {}),
                   **self._aggregation_summary(), **private, **self.work.summary(self)}
        return RunResult(self.exp.variant, self.seed, rows, {**self._client_columns(), **private_cols}, summary,
                         self.params)

    def _aggregation_summary(self) -> dict:
        """Whether reports were summed where they were trained (when the executor offers it) and, when training ran
        on an accelerator, on which device."""
        held = ({"partial_sums": self.hold_reports, **({"partial_sums_off_because": self._held_off_because}
                                                       if self._held_off_because else {})}
                if self.executor.holds_reports() else {})
        if self.trainer.device.type == "cpu":
            return held
        if self.report_device is not None:
            return {**held, "aggregation_device": str(self.report_device)}
        return {**held, "aggregation_device": "cpu", "aggregation_cpu_because": self._cpu_because}

    def release(self) -> None:
        """Release the executor's workers and the state store's spill files."""
        self.executor.close()
        self.store.close()

    def step(self, r: int) -> dict:
        """Simulate round ``r`` and return its row of ``rounds.csv`` (accuracy filled in by :meth:`advance`)."""
        self.sim_time = self.work.start_round(self, r)
        opened = self._open(r)
        trained = self._train(opened)
        settled = self._settle(opened, trained)
        aggregated = self._aggregate(opened, trained, settled)
        accounted = self._account(opened, trained, settled, aggregated)
        extra = self.work.component_columns(self)
        if settled.secagg is not None:
            extra = {**extra, **settled.secagg.columns()}
        extra = {**extra, **self.timing.extra_columns(settled, aggregated, in_flight=len(self.late))}
        row = round_row(opened=opened, trained=trained, settled=settled, aggregated=aggregated, accounted=accounted,
                        sim_time_s=self.sim_time, timed=self.timing.cohort_columns(trained, settled, aggregated),
                        extra=extra)
        self.work.extend_row(self, row)
        return row

    def upload_bytes(self, payload: np.ndarray, replied: np.ndarray | None = None) -> np.ndarray:
        """What each client's upload costs: its payload plus the model's buffers; nothing for who did not reply."""
        up = np.asarray(payload, dtype=np.int64) + self.model.buffer_bytes() * (len(self.buffers) > 0)
        if replied is not None:
            up[~replied] = 0  # nothing delivered yet; a late reply is charged when it arrives
        return up

    # ---- phases ------------------------------------------------------------------------------------
    def _open(self, r: int, at_s: float | None = None, launch: int | None = None, event: int = 0) -> Opened:
        """Who is reachable (busy devices excluded), whom the selector launches, what probing cost: at the round's
        start, or for launch ``event`` of the round at ``at_s`` into ``launch`` free slots (:meth:`launch_at`)."""
        t0 = self.sim_time if at_s is None else float(at_s)
        online = self.availability.available(r, t0)
        self.lost.release(t0)  # a client lost by now has gone offline: its device and its slot are free
        pending = np.ones(len(self.late), bool) if at_s is None else self.late.arrival_s > t0  # not yet delivered
        if len(self.late) or len(self.lost):  # a device still computing a late report or a doomed task is busy
            online = online.copy()
            online[self.late.busy_clients()[pending]] = False
            online[self.lost.busy_clients()] = False
        available = np.flatnonzero(online)
        probe = LossProbe(self.pricer, self.global_model, self.data, self.seed, r)
        if launch is None:
            launch = self.round_mode.launch(self.selector.target(), len(self.late) + len(self.lost))
        cohort = self.selector.select(SelectionContext(
            round=r, time_s=t0, available=available, launch=launch,
            rng=rngmod.stream(self.seed, "selection", rngmod.launch_round(r, event)), world=self.world,
            availability=self.availability, probe_loss=probe, pending_clients=self.late.clients[pending],
            pending_arrival_s=self.late.arrival_s[pending]))
        bill = probe.settle()  # the round starts when the last probe answer is in
        if self.privacy.active:  # who could have been chosen, for amplified accounting
            self.privacy.record_selection(r, available, self.selector.inclusion_probabilities(available, launch))
        return Opened(round=r, start_s=t0, train_start_s=t0 + bill.seconds, available=available, cohort=cohort,
                      probe=bill, launch=event)

    def launch_at(self, r: int, at_s: float, launch: int, event: int) -> Launched:
        """Launch up to ``launch`` clients at ``at_s`` (simulated seconds) within round ``r``, without aggregating.

        Opened and trained as a round's cohort is, from the current model (launch ``event`` keys their selection
        and minibatch streams), then put in flight: a report in the late buffer (it started in round ``r``), a task
        that ends with its client offline among the lost tasks (its device busy until then). Charged to the
        population with the round (:meth:`_account`). A timing that refills slots at arrivals calls it
        (:meth:`turnout.sim.timing.Timing.refill`).
        """
        opened = self._open(r, at_s=at_s, launch=launch, event=event)
        trained = self._train(opened)
        finish, dropped_at = self._deliver(opened, trained)
        verdict = self.round_mode.close_in_flight(finish, dropped_at, opened.cohort.target, np.zeros(0))
        clients, result = opened.clients, trained.result
        late = verdict.late & ~verdict.aggregated & ~trained.rejected
        feedback = RoundFeedback(r, clients, verdict.aggregated, late, result.losses, result.samples, finish,
                                 verdict.busy_s, trained.decoded, verdict.duration_s)
        weights = np.asarray(self.selector.settle_weights(opened.cohort, feedback), dtype=np.float64)
        self._park(r, opened, trained, finish, late, weights, verdict.busy_s)
        running = ~late & np.isfinite(verdict.busy_s)  # everyone not in flight is still computing now
        self.lost.add(clients[running], opened.train_start_s + verdict.busy_s[running])
        delivered_up, wasted = self._delivered(verdict, late, trained)
        return Launched(clients=clients, start_s=np.full(len(clients), opened.train_start_s), finish_s=finish,
                        busy_s=np.asarray(verdict.busy_s, np.float64),
                        down=trained.down, up=delivered_up,
                        wasted_s=wasted, late=late, dropped=finish > dropped_at, rejected=trained.rejected,
                        samples=result.samples, probe_bytes_up=opened.probe.bytes_up,
                        probe_bytes_down=opened.probe.bytes_down, probe_busy_s=opened.probe.busy_s)

    def _train(self, opened: Opened) -> Trained:
        """Downloads, the round's lr and local steps, the cohort's work, upload bytes, rejected reports."""
        r, clients = opened.round, opened.clients
        synced_through = self.population.synced_through[clients]  # a copy: what each client lacked
        down = self.pricer.download(clients, r)
        train = self.exp.train
        lr = train.lr_schedule.lr(train.lr, r, self.exp.config.rounds)
        steps = train.steps_for(self.population.n_train[clients])
        self.work.begin_round(self, r, clients, steps, lr)
        self.compressor.begin_round(r, opened.cohort)
        done = self.work.train(self, opened, TrainOrder(lr=lr, steps=steps, down=down, synced_through=synced_through))
        up = self.upload_bytes(done.payload_up, done.replied)
        # Reports that are not finite (diverged client, corrupt payload) never reach the server rule.
        rejected = ~finite_rows(done.decoded) if opened.size else np.zeros(0, bool)
        return Trained(lr=lr, down=down, result=done.result, decoded=done.decoded, up=up, rejected=rejected)

    def _settle(self, opened: Opened, trained: Trained) -> Settled:
        """Delivery times, the round mode's verdict, late reports parked and collected."""
        r, clients, cohort = opened.round, opened.clients, opened.cohort
        t0, probe_s = opened.train_start_s, opened.probe.seconds
        result = trained.result
        finish, dropped_at = self._deliver(opened, trained)
        mode = self.round_mode
        in_flight_s, lost_s = self.timing.in_flight(r, t0, self.late, self.lost)  # what the close sees of them
        verdict = mode.close_in_flight(finish, dropped_at, cohort.target, in_flight_s, lost_s)
        duration = (verdict.duration_s if opened.size or len(in_flight_s) or len(lost_s) else mode.empty_round_s
                    ) + probe_s
        verdict = self.work.settle(self, opened, trained, verdict, duration)
        verdict, secagg = self.secure_aggregation.close(
            verdict, duration - probe_s, dropped_at, lambda j, b: self.pricer.upload_s(clients[j], b),
            lambda j, b: self.pricer.download_s(clients[j], b), self.model.dim, trained.up)
        if secagg is not None:  # its exchanges before training and its unmasking after the close take time
            duration += secagg.extra_s
        agg = verdict.aggregated & ~trained.rejected
        late = verdict.late & ~verdict.aggregated & ~trained.rejected
        t_end = t0 - probe_s + duration
        download_s, compute_s, upload_s = metrics.critical_path_s(
            self.pricer.download_s(clients, trained.down), self.pricer.compute_s(clients, result.samples),
            self.pricer.upload_s(clients, trained.up), finish, agg)
        feedback = RoundFeedback(r, clients, agg, late, result.losses, result.samples, finish, verdict.busy_s,
                                 trained.decoded, duration)
        weights = np.asarray(self.selector.settle_weights(cohort, feedback), dtype=np.float64)
        self._park(r, opened, trained, finish, late, weights, verdict.busy_s)
        # A launched client still computing at the close that will not deliver (it goes offline first, or its
        # report is rejected) keeps its device busy until then; a late one is busy in the late buffer.
        # (Compared with the round mode's own close, on its own clock: the slowest client of a round that waited for
        # it is never still running, whatever the rounding of the absolute times.) Held in every round mode
        # (turnout.world.lost).
        busy = np.asarray(verdict.busy_s, np.float64)
        running = ~late & (busy > verdict.duration_s) & np.isfinite(busy)
        self.lost.add(clients[running], t0 + busy[running])
        # slots refilled at arrivals before the close (a timing that does), and the close they make
        refilled = self.timing.refill(self, opened, verdict, late, duration, t_end)
        duration, t_end = refilled.duration_s, refilled.end_s
        arrived = self.timing.arrivals(r, t_end, self.late, mode.arrivals_taken())
        stale_ok = self.timing.usable(r, arrived.origin_round)
        settled = Settled(finish_s=finish, dropped_at_s=dropped_at, verdict=verdict, aggregated=agg, late=late,
                          duration_s=duration, end_s=t_end, download_s=download_s, feedback=feedback, weights=weights,
                          arrived=arrived, stale_ok=stale_ok, compute_s=compute_s, upload_s=upload_s, secagg=secagg,
                          refilled=refilled)
        self.work.settled(self, opened, trained, settled)
        return settled

    def _deliver(self, opened: Opened, trained: Trained) -> tuple[np.ndarray, np.ndarray]:
        """Seconds from the cohort's start to each client's delivery, and to when it goes offline."""
        clients, t0 = opened.clients, opened.train_start_s
        finish = self.pricer.delivery_s(clients, trained.down, trained.result.samples, trained.up)
        return finish, self.availability.online_until(clients, opened.round, t0) - t0

    def _park(self, r: int, opened: Opened, trained: Trained, finish: np.ndarray, late: np.ndarray,
              weights: np.ndarray, busy_s: np.ndarray) -> None:
        """Put the ``late`` reports of a cohort launched in round ``r`` in flight (the late buffer)."""
        clients, result = opened.clients, trained.result
        # a rule that mixes models (FedAsync) reads the model each parked report started from: version r
        self.late.add(r, clients[late], opened.train_start_s + finish[late], take_rows(trained.decoded, late),
                      weights[late], self.population.n_train[clients[late]], result.losses[late], busy_s[late],
                      self.params if self.algorithm.reads_origin_models else None)

    @staticmethod
    def _delivered(verdict: RoundClose, delivers: np.ndarray, trained: Trained) -> tuple[np.ndarray, np.ndarray]:
        """What each launched client uploads (a report delivered, on time or late, or one rejected on arrival) and the
        seconds it works for nothing (late work is judged when it arrives)."""
        delivered_up = np.where(delivers | (trained.rejected & (verdict.aggregated | verdict.late)), trained.up, 0)
        return delivered_up, np.where(delivers, 0.0, verdict.busy_s)

    def _aggregate(self, opened: Opened, trained: Trained, settled: Settled) -> Aggregated:
        """Fresh and stale reports as one batch; the work's server step; the selector learns."""
        r, agg, arrived, ok = opened.round, settled.aggregated, settled.arrived, settled.stale_ok
        fresh_clients = opened.clients[agg]
        stale = arrived.updates[torch.from_numpy(ok)]  # parked on the CPU
        held = None
        if isinstance(trained.decoded, HeldReports):  # summed where they are held; stale ones are here
            held, updates = (trained.decoded, np.flatnonzero(agg)), stale
        else:
            # Every report taken (the usual case): no cohort-sized copy, as server rules only read their reports.
            fresh = trained.decoded if agg.all() else take_rows(trained.decoded, agg)
            updates = torch.cat([fresh, stale.to(fresh.device)]) if len(stale) else fresh  # a cohort-sized copy less
        reports = Reports(clients=np.concatenate([fresh_clients, arrived.clients[ok]]), updates=updates, held=held,
                          weights=np.concatenate([settled.weights[agg], arrived.weights[ok]]),
                          normalize=opened.cohort.normalize,
                          n_samples=np.concatenate([self.population.n_train[fresh_clients], arrived.n_samples[ok]]),
                          losses=np.concatenate([trained.result.losses[agg], arrived.losses[ok]]),
                          staleness=np.concatenate([np.zeros(len(fresh_clients), np.int64),
                                                    r - arrived.origin_round[ok]]),
                          origin_models=arrived.origin_rows(len(fresh_clients), self.params, ok)
                          if self.algorithm.reads_origin_models else None)
        changed = self.work.aggregate(self, r, reports, trained, settled)
        self.selector.observe(self.timing.feedback(opened, trained, settled))
        return Aggregated(reports=reports, coords_changed=changed)

    def _account(self, opened: Opened, trained: Trained, settled: Settled, aggregated: Aggregated) -> Accounted:
        """Per-client counters (an upload happens when the client delivers, on time or late) and τ(t)."""
        pop, clients, verdict, arrived, ok = (self.population, opened.clients, settled.verdict, settled.arrived,
                                              settled.stale_ok)
        stale_wasted = float(arrived.busy_s[~ok].sum())
        np.add.at(pop.wasted_s, arrived.clients[~ok], arrived.busy_s[~ok])  # a client may deliver twice in a round
        np.add.at(pop.times_aggregated, arrived.clients[ok], 1)
        delivers = settled.aggregated | settled.late
        delivered_up, wasted = self._delivered(verdict, delivers, trained)
        pop.times_aggregated[clients[settled.aggregated]] += 1
        self._charge(opened.round, clients, trained.down, delivered_up, verdict.busy_s, wasted)
        if settled.secagg is not None:  # keys and shares: every launched client sent and received them
            pop.bytes_up[clients] += settled.secagg.up
            pop.bytes_down[clients] += settled.secagg.down
        more = settled.refilled.launched if settled.refilled is not None else None  # launched mid-round
        if more is not None and len(more):
            self._charge(opened.round, more.clients, more.down, more.up, more.busy_s, more.wasted_s)
            clients = np.concatenate([clients, more.clients])
        tau = self.participation.record(opened.round, clients, aggregated.reports.clients)
        self.sim_time = settled.end_s
        return Accounted(delivered_up=delivered_up, wasted=wasted, stale_wasted=stale_wasted, tau=tau)

    def _charge(self, r: int, clients: np.ndarray, down: np.ndarray, up: np.ndarray, busy_s: np.ndarray,
                wasted_s: np.ndarray) -> None:
        """Charge clients launched in round ``r`` (one may be launched twice in a round that refills at arrivals)."""
        pop = self.population
        np.add.at(pop.times_selected, clients, 1)
        pop.last_round[clients] = r
        np.add.at(pop.bytes_down, clients, down)
        np.add.at(pop.bytes_up, clients, up)
        np.add.at(pop.resource_s, clients, busy_s)
        np.add.at(pop.wasted_s, clients, wasted_s)

    # ---- end of run ------------------------------------------------------------------------------
    def population_columns(self) -> dict[str, np.ndarray]:
        """``clients.csv``'s columns that count what each client did (no evaluation)."""
        pop = self.population
        return {
            "client": np.arange(pop.size), "n_train": pop.n_train, "times_selected": pop.times_selected,
            "times_aggregated": pop.times_aggregated, "bytes_up": pop.bytes_up, "bytes_down": pop.bytes_down,
            "resource_s": pop.resource_s, "wasted_s": pop.wasted_s, "last_round": pop.last_round,
            **self.participation.client_columns(),
        }

    def _client_columns(self) -> dict[str, np.ndarray]:
        return {**self.population_columns(), **self.work.client_columns(self)}

    def evaluate_clients(self) -> dict[str, np.ndarray]:
        """Each client's test accuracy and loss under the evaluated model (``eval.per_client``)."""
        d = self.data
        acc, loss = evaluate_many(self.model, self.algorithm.eval_params(self.params), self.buffers, d.x_test,
                                  d.y_test, d.test_offsets, self.exp.config.eval.batch_size)
        return {"n_test": d.n_test, "test_accuracy": acc, "test_loss": loss}


__all__ = ["RunResult", "Simulation", "build_model", "finite_rows"]
