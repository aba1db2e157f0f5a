"""The server's round loop on real devices: turnout's engine with connected nodes instead of a simulated world.

:class:`FlowerRun` is the engine's :class:`~turnout.sim.engine.Simulation` — the same round loop —
whose availability is the set of connected devices (:class:`~turnout.flower.nodes.ConnectedClients`)
and whose work (:class:`DeviceWork`, a :class:`~turnout.sim.work.Work`) sends each launched client
an :class:`~turnout.flower.protocol.Instruction` and collects its
:class:`~turnout.flower.protocol.Report`. Everything else is the engine's own code: the selector,
the round mode's verdict, late reports, the algorithm's server rule, the compressor's server step,
the coordinate ledger that prices (and here also cuts) each download, the population counters,
participation metrics and the ``rounds.csv`` row. Per-client model-sized state of the server rule
(control variates, memories) stays in the engine's client-state store on the server; a
compressor's per-client residuals live on the device (:class:`~turnout.flower.device.NodeStore`).

Timing follows the chosen clock (:mod:`turnout.flower.clock`). With ``measured`` the server waits
in real time and closes the round as soon as the round mode's verdict, given who has replied so
far, ends no later than now (clients still silent have not delivered: their delivery time is
``inf``); a late report stays in the engine's late buffer with an unknown arrival time and is
completed when its reply comes, in whatever later round that is (an upload the server derives
from the device's parameters is then derived on arrival). With ``modelled`` the server
waits for every reply and the round mode judges the device model's seconds, which makes a
deployment decide exactly what its simulation decides.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..config.loader import ResolvedExperiment
from ..core.errors import ConfigError
from ..core.records import Cohort, CohortResult, RoundClose
from ..sim.engine import Simulation
from ..sim.phases import Opened, Settled, Trained
from ..sim.work import TrainedWork, TrainOrder, WorkDone
from ..world.population import NEVER
from . import codec
from .clock import CLOCKS, Clock, ReportedTiming
from .deployable import check_deployable, derives_upload
from .link import Arrival, Link, Sent
from .nodes import ConnectedClients
from .protocol import Instruction, Report


@dataclass
class ServerData:
    """What a deployment's server knows of the task: each client's training-set size (reported by the
    devices at registration), the model's input shape and classes, and its own test set (may be empty)."""

    input_shape: tuple[int, ...]
    num_classes: int
    x_server_test: np.ndarray
    y_server_test: np.ndarray
    n_train: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    name: str = "deployment"
    extras: dict = field(default_factory=dict)
    input_scaling: object = None  # the dataset's InputScaling: stored uint8 inputs become floats in the model

    @property
    def num_clients(self) -> int:
        return len(self.n_train)

    def label_histogram(self) -> np.ndarray:
        raise ConfigError("data", self.name, "a deployment's server holds no client labels; "
                                             "use components that do not read them")


def member_weights(cohort: Cohort) -> np.ndarray:
    """Each member's aggregation weight as its compressor sees it: a share of the cohort when relative."""
    w = np.asarray(cohort.weights, dtype=np.float64)
    if not cohort.normalize:
        return w
    total = float(w.sum())
    return w / total if total > 0 else np.full(len(w), 1.0 / max(len(w), 1))


@dataclass
class _InFlight:
    """A late report whose reply has not come yet (measured clock)."""

    client: int
    round: int
    t_open: float  # wall clock of its round's start
    counted_s: float  # client-seconds already counted as its resource
    start: torch.Tensor  # where it started training (a derived upload needs it)


class DeviceWork(TrainedWork):
    """The round's work done by devices: instructions out, replies in, decoded on the server.

    The server rule and the compressor's server step are the simulation's (:class:`TrainedWork`);
    what differs is who computes the reports, how their seconds are priced (:class:`ReportedTiming`)
    and, on the measured clock, that a round may close with replies still on their way.
    """

    def __init__(self, link: Link, clock: Clock = "measured", round_timeout_s: float = 600.0, poll_s: float = 0.01):
        self.link, self.clock = link, clock
        self.round_timeout_s, self.poll_s = float(round_timeout_s), float(poll_s)
        self.in_flight: dict[int, _InFlight] = {}
        self.cohort_log: list[dict] = []
        self.derive = False
        self.wall0 = self._t_open = time.time()
        self._wall = time.perf_counter()
        self._extra: dict[str, float] = {}
        self._round: dict = {}

    def pricer(self, sim: Simulation) -> ReportedTiming:
        down = sim.algorithm.traffic_for(sim.algorithm.cfg).down
        return ReportedTiming(sim.population, sim.ledger, sim.compressor, down, sim.model.buffer_bytes(),
                              clock=self.clock)

    def attach(self, sim: Simulation) -> None:
        self.derive = derives_upload(sim.exp)
        self.wall0 = self._t_open = time.time()

    # ---- the round -----------------------------------------------------------------------------
    def start_round(self, sim: Simulation, r: int) -> float:
        """The deployment's clock is the wall clock (measured); the round's measured counters start at zero."""
        self._wall = time.perf_counter()
        start = max(sim.sim_time, time.time() - self.wall0) if self.clock == "measured" else sim.sim_time
        self._t_open = self.wall0 + start
        self._extra = dict.fromkeys(("bytes_up", "resource_s", "wasted_s", "payload_down", "payload_up",
                                     "record_down", "record_up", "failed", "train_s"), 0.0)
        return start

    def extend_row(self, sim: Simulation, row: dict) -> None:
        """What was measured: payload bytes, failures, device seconds, wall time."""
        x = self._extra
        row["bytes_up"] += int(x["bytes_up"])  # late reports are counted when their reply arrives
        row["resource_s"] += x["resource_s"]
        row["wasted_s"] += x["wasted_s"]
        row.update({"payload_bytes_down": int(x["payload_down"]), "payload_bytes_up": int(x["payload_up"]),
                    "record_bytes_down": int(x["record_down"]), "record_bytes_up": int(x["record_up"]),
                    "n_failed": int(x["failed"]), "device_train_s": x["train_s"],
                    "wall_s": time.perf_counter() - self._wall})

    def train(self, sim: Simulation, opened: Opened, order: TrainOrder) -> WorkDone:
        """Instructions out, replies in (the round mode's verdict decides when to stop waiting)."""
        r, cohort, clients = opened.round, opened.cohort, opened.clients
        base, steps = order.synced_through, order.steps
        shipped = sim.compressor.device_state(r)
        params, flat = sim.params, sim.params.numpy()
        weights = member_weights(cohort)
        instructions, starts = [], []
        for i, c in enumerate(clients.tolist()):
            start = sim.algorithm.client_start(c, params)
            objective = sim.algorithm.local_objective(c, start)
            form, sync = codec.encode_values(flat, sim.ledger.lacking_mask(int(base[i])))
            instructions.append(Instruction(
                round=r, client=c, seed=sim.seed, steps=int(steps[i]), lr=float(order.lr), base_round=int(base[i]),
                sync_form=form, sync=sync, weight=float(weights[i]),
                tags={k: bool(v[i]) for k, v in cohort.tags.items()},
                start=None if torch.equal(start, params) else start.numpy(), objective=objective,
                buffers=sim.buffers, compressor_state=shipped, send_end=self.derive))
            starts.append(start)
        sent = self.link.send(instructions) if instructions else []
        self._extra["payload_down"] += sum(ins.model_bytes() for ins in instructions)
        self._extra["record_down"] += sum(s.record_bytes for s in sent)
        if not instructions and self.clock == "measured":
            time.sleep(sim.round_mode.empty_round_s)  # nobody to launch: the server waits, then tries again
        reports, arrivals, finish, dropped = self._collect(sim, sent, cohort.target)
        failed = {c for c, rep, d in zip(clients.tolist(), reports, dropped) if rep is None and np.isfinite(d)}
        for i in np.flatnonzero(np.isfinite(dropped)):
            sim.population.synced_through[clients[i]] = NEVER  # its copy is unknown: the next sync is dense
        gone = np.flatnonzero(np.isfinite(dropped))  # modelled: a failed device did no modelled work
        sim.availability.dropped_at = {int(clients[i]): float(dropped[i]) if self.clock == "measured" else 0.0
                                       for i in gone}
        done = self._decode(sim, r, clients, reports, starts)
        for rep, a in zip(reports, arrivals):
            if rep is not None:
                self._extra["payload_up"] += rep.model_bytes()
                self._extra["record_up"] += a.record_bytes
                self._extra["train_s"] += rep.train_s
        self._extra["failed"] += len(failed)
        sim.pricer.measure({c: float(f) for c, f in zip(clients.tolist(), finish) if np.isfinite(f)},
                           {c: max(0.0, rep.started_at - s.at) for c, rep, s in zip(clients.tolist(), reports, sent)
                            if rep is not None}, failed)
        self._round = {"sent": sent, "reports": reports, "starts": starts, "failed": failed}
        return done

    def _collect(self, sim: Simulation, sent: list[Sent], target: int):
        """Poll until the round may close, or the timeout.

        Modelled clock: every reply is in. Measured clock: the round mode's verdict on what is known
        (silent clients have not delivered) ends no later than now — so a round lasts, in real
        seconds, what the round mode says (a deadline round waits for its deadline).
        """
        k = len(sent)
        pos = {s.ticket: i for i, s in enumerate(sent)}
        reports: list[Report | None] = [None] * k
        arrivals: list[Arrival | None] = [None] * k
        finish, dropped = np.full(k, np.inf), np.full(k, np.inf)
        while True:
            for a in self.link.poll():
                i = pos.get(a.ticket)
                if i is None:
                    if a.ticket in self.in_flight:
                        self._settle_late(sim, a)
                    continue
                arrivals[i] = a
                if a.report is None or a.report.resync:
                    dropped[i] = a.at - self._t_open
                else:
                    reports[i], finish[i] = a.report, a.at - self._t_open
            elapsed = time.time() - self._t_open
            known = np.isfinite(finish) | np.isfinite(dropped)
            if self.clock == "measured":  # the round lasts what the round mode says, in real seconds
                if sim.round_mode.close(finish, dropped, target).duration_s <= elapsed:
                    break
            elif known.all():
                break
            if elapsed >= self.round_timeout_s:
                dropped[~known] = elapsed  # no reply in time: the device counts as gone
                self.link.drop([sent[i].ticket for i in np.flatnonzero(~known)])
                break
            time.sleep(self.poll_s)
        return reports, arrivals, finish, dropped

    def _decode(self, sim: Simulation, r: int, clients: np.ndarray, reports: list[Report | None],
                starts: list[torch.Tensor]) -> WorkDone:
        """What the server decodes from each reply, the payload bytes charged, and the cohort's results."""
        k, dim = len(clients), sim.model.dim
        decoded = torch.zeros((k, dim), dtype=sim.params.dtype)
        up = np.zeros(k, dtype=np.int64)
        losses, samples = np.full(k, np.nan), np.zeros(k, dtype=np.int64)
        buffers = [dict(sim.buffers) for _ in range(k)]
        got = np.array([rep is not None for rep in reports], dtype=bool)
        for i in np.flatnonzero(got):
            rep = reports[i]
            losses[i], samples[i] = rep.mean_loss, rep.samples
            buffers[i] = rep.buffers or dict(sim.buffers)
            if self.derive:  # the algorithm's client_update, on the server, from where training ended
                grad = None if rep.grad_sum is None else torch.from_numpy(rep.grad_sum)
                update = sim.algorithm.client_update(int(clients[i]), starts[i], rep.vector(dim), grad_sum=grad)
                decoded[i] = update.reshape(-1) if update.numel() == dim else float("nan")
            else:
                decoded[i], up[i] = rep.vector(dim), rep.upload_bytes
        if self.derive and got.any():
            idx = torch.from_numpy(np.flatnonzero(got))
            decoded[idx], up[got] = sim.compressor.encode_uploads(r, clients[got], decoded[idx])
        vectors = sim.algorithm.traffic_for(sim.algorithm.cfg).up
        payload = np.asarray(sim.algorithm.upload_bytes(r, clients, decoded, up * vectors), dtype=np.int64)
        result = CohortResult(updates=decoded, losses=losses, samples=samples, buffers=buffers)
        return WorkDone(result=result, decoded=decoded, payload_up=payload, replied=got)

    def settle(self, sim: Simulation, opened: Opened, trained: Trained, verdict: RoundClose,
               duration_s: float) -> RoundClose:
        """Measured clock: a late client whose reply is still missing counts its work so far (the rest is
        counted when the reply comes); a new verdict, the round mode's own left as it was."""
        if self.clock != "measured":
            return verdict
        reports, failed = self._round["reports"], self._round["failed"]
        late = verdict.late & ~verdict.aggregated & ~trained.rejected
        busy = np.array(verdict.busy_s, dtype=np.float64, copy=True)
        for i, c in enumerate(opened.clients.tolist()):
            if reports[i] is None and c not in failed and late[i] and not np.isfinite(busy[i]):
                busy[i] = duration_s
        return dataclasses.replace(verdict, busy_s=busy)

    def settled(self, sim: Simulation, opened: Opened, trained: Trained, settled: Settled) -> None:
        if self.clock == "measured":
            self._park(opened, settled)
        self._log(opened, trained, settled)

    def _park(self, opened: Opened, settled: Settled) -> None:
        """Replies still missing at the close: late ones are awaited (in the late buffer), the others dropped."""
        sent, reports, failed = self._round["sent"], self._round["reports"], self._round["failed"]
        for i, c in enumerate(opened.clients.tolist()):
            if reports[i] is not None or c in failed:
                continue
            if settled.late[i]:
                self.in_flight[sent[i].ticket] = _InFlight(c, opened.round, self._t_open,
                                                           float(settled.verdict.busy_s[i]), self._round["starts"][i])
            else:
                self.link.drop([sent[i].ticket])

    def _settle_late(self, sim: Simulation, a: Arrival) -> None:
        """A late reply came: complete its late-buffer row, or withdraw the row when the device failed."""
        f = self.in_flight.pop(a.ticket)
        row = sim.late.pending_row(f.client, f.round)
        if row is None:
            return
        busy = a.at - f.t_open
        extra = max(0.0, busy - f.counted_s)
        sim.population.resource_s[f.client] += extra
        self._extra["resource_s"] += extra
        decoded = None
        if a.report is not None and not a.report.resync:
            done = self._decode(sim, f.round, np.array([f.client]), [a.report], [f.start])
            if bool(torch.isfinite(done.decoded).all()):
                decoded = done.decoded[0]
                up = sim.upload_bytes(done.payload_up, done.replied)
        if decoded is None:  # lost: it never reaches the model
            sim.late.withdraw(row)
            sim.population.wasted_s[f.client] += busy
            self._extra["wasted_s"] += busy
            return
        sim.late.complete(row, a.at - self.wall0, busy, a.report.mean_loss, decoded)
        sim.population.bytes_up[f.client] += int(up[0])
        self._extra["bytes_up"] += int(up[0])
        self._extra["payload_up"] += a.report.model_bytes()
        self._extra["record_up"] += a.record_bytes
        self._extra["train_s"] += a.report.train_s

    def _log(self, opened: Opened, trained: Trained, settled: Settled) -> None:
        """One row per launched client for ``cohorts.csv``: who, with what weight, what became of it."""
        sent, reports, failed = self._round["sent"], self._round["reports"], self._round["failed"]
        for i, c in enumerate(opened.clients.tolist()):
            rep = reports[i]
            self.cohort_log.append({
                "round": opened.round, "client": c, "node": self.link.node_of(c), "weight": float(settled.weights[i]),
                "aggregated": bool(settled.aggregated[i]), "late": bool(settled.late[i]), "failed": c in failed,
                "finish_s": float(settled.finish_s[i]), "bytes_down": int(trained.down[i]),
                "bytes_up": int(trained.up[i]), "payload_bytes_up": rep.model_bytes() if rep is not None else 0,
                "record_bytes_down": sent[i].record_bytes, "train_loss": float(trained.result.losses[i]),
                "device_train_s": rep.train_s if rep is not None else float("nan")})

    def end(self, sim: Simulation) -> None:
        """Late replies that never came are waste (counted as far as they were seen); stop waiting for them."""
        self.link.drop(list(self.in_flight))
        self.in_flight.clear()


class FlowerRun(Simulation):
    """One experiment variant on one seed, run on the devices behind ``link``: the engine's loop, handed the
    connected devices as its availability and a :class:`DeviceWork` as its work."""

    def __init__(self, exp: ResolvedExperiment, data: ServerData, seed: int, link: Link, clock: Clock = "measured",
                 round_timeout_s: float = 600.0, poll_s: float = 0.01, scratch_dir=None):
        if clock not in CLOCKS:
            raise ConfigError("clock", clock, f"use one of: {', '.join(CLOCKS)}")
        check_deployable(exp)
        super().__init__(exp, data, seed, scratch_dir=scratch_dir,
                         components={"availability": lambda ctx: ConnectedClients(ctx.world, link)},
                         work=DeviceWork(link, clock, round_timeout_s, poll_s))

    @property
    def cohort_log(self) -> list[dict]:
        """One row per launched client and round (``cohorts.csv``)."""
        return self.work.cohort_log


__all__ = ["DeviceWork", "FlowerRun", "ServerData", "member_weights"]
