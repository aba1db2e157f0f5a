"""The server's round loop on real devices: turnout's engine with connected nodes instead of a simulated world.

:class:`FlowerRun` is a :class:`~turnout.sim.engine.Simulation` whose availability is the set of
connected devices (:class:`~turnout.flower.nodes.ConnectedClients`) and whose train phase sends
each launched client an :class:`~turnout.flower.protocol.Instruction` and collects its
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

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..config.loader import ResolvedExperiment
from ..core.errors import ConfigError
from ..core.records import Cohort, CohortResult
from ..sim.engine import Simulation
from ..sim.phases import Closed, Opened, Trained
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


class FlowerRun(Simulation):
    """One experiment variant on one seed, run on the devices behind ``link``."""

    def __init__(self, exp: ResolvedExperiment, data: ServerData, seed: int, link: Link, clock: Clock = "measured",
                 round_timeout_s: float = 600.0, poll_s: float = 0.01, scratch_dir=None):
        if clock not in CLOCKS:
            raise ConfigError("clock", clock, f"use one of: {', '.join(CLOCKS)}")
        check_deployable(exp)
        self.link, self.clock = link, clock
        self.round_timeout_s, self.poll_s = float(round_timeout_s), float(poll_s)
        super().__init__(exp, data, seed, scratch_dir=scratch_dir,
                         components={"availability": lambda ctx: ConnectedClients(ctx.world, link)})
        self.pricer = ReportedTiming(self.population, self.ledger, self.compressor, self.algorithm.downlink_vectors,
                                     self.model.buffer_bytes(), clock=clock)
        self.derive = derives_upload(exp)
        self.wall0 = time.time()
        self.in_flight: dict[int, _InFlight] = {}
        self.cohort_log: list[dict] = []
        self._t_open = self.wall0
        self._extra: dict[str, float] = {}
        self._round: dict = {}

    # ---- the round -----------------------------------------------------------------------------
    def step(self, r: int) -> dict:
        """The engine's round, plus what was measured: payload bytes, failures, device seconds, wall time."""
        wall = time.perf_counter()
        row = super().step(r)
        x = self._extra
        row["bytes_up"] += int(x["bytes_up"])  # late reports are counted when their reply arrives
        row["resource_s"] += x["resource_s"]
        row["wasted_s"] += x["wasted_s"]
        row.update({"payload_bytes_down": int(x["payload_down"]), "payload_bytes_up": int(x["payload_up"]),
                    "record_bytes_down": int(x["record_down"]), "record_bytes_up": int(x["record_up"]),
                    "n_failed": int(x["failed"]), "device_train_s": x["train_s"],
                    "wall_s": time.perf_counter() - wall})
        return row

    def _open(self, r: int) -> Opened:
        if self.clock == "measured":  # the deployment's clock is the wall clock
            self.sim_time = max(self.sim_time, time.time() - self.wall0)
        self._t_open = self.wall0 + self.sim_time
        self._extra = dict.fromkeys(("bytes_up", "resource_s", "wasted_s", "payload_down", "payload_up",
                                     "record_down", "record_up", "failed", "train_s"), 0.0)
        return super()._open(r)

    def _train(self, opened: Opened) -> Trained:
        """Instructions out, replies in (the round mode's verdict decides when to stop waiting)."""
        r, cohort, clients = opened.round, opened.cohort, opened.clients
        base = self.population.synced_through[clients].copy()
        down = self.pricer.download(clients, r)
        lr = self.exp.train.lr_schedule.lr(self.exp.train.lr, r, self.exp.config.rounds)
        steps = self.exp.train.steps_for(self.population.n_train[clients])
        self.algorithm.begin_round(r, clients, steps, lr)
        self.compressor.begin_round(r, cohort)
        shipped = self.compressor.device_state(r)
        params, flat = self.params, self.params.numpy()
        weights = member_weights(cohort)
        instructions, starts = [], []
        for i, c in enumerate(clients.tolist()):
            start = self.algorithm.client_start(c, params)
            objective = self.algorithm.local_objective(c, start)
            form, sync = codec.encode_values(flat, self.ledger.lacking_mask(int(base[i])))
            instructions.append(Instruction(
                round=r, client=c, seed=self.seed, steps=int(steps[i]), lr=float(lr), base_round=int(base[i]),
                sync_form=form, sync=sync, weight=float(weights[i]),
                tags={k: bool(v[i]) for k, v in cohort.tags.items()},
                start=None if torch.equal(start, params) else start.numpy(), objective=objective,
                buffers=self.buffers, compressor_state=shipped, send_end=self.derive))
            starts.append(start)
        sent = self.link.send(instructions) if instructions else []
        self._extra["payload_down"] += sum(ins.model_bytes() for ins in instructions)
        self._extra["record_down"] += sum(s.record_bytes for s in sent)
        if not instructions and self.clock == "measured":
            time.sleep(self.round_mode.empty_round_s)  # nobody to launch: the server waits, then tries again
        reports, arrivals, finish, dropped = self._collect(sent, cohort.target)
        failed = {c for c, rep, d in zip(clients.tolist(), reports, dropped) if rep is None and np.isfinite(d)}
        for i in np.flatnonzero(np.isfinite(dropped)):
            self.population.synced_through[clients[i]] = NEVER  # its copy is unknown: the next sync is dense
        gone = np.flatnonzero(np.isfinite(dropped))  # modelled: a failed device did no modelled work
        self.availability.dropped_at = {int(clients[i]): float(dropped[i]) if self.clock == "measured" else 0.0
                                        for i in gone}
        decoded, up, result = self._decode(r, clients, reports, starts)
        for rep, a in zip(reports, arrivals):
            if rep is not None:
                self._extra["payload_up"] += rep.model_bytes()
                self._extra["record_up"] += a.record_bytes
                self._extra["train_s"] += rep.train_s
        self._extra["failed"] += len(failed)
        self.pricer.measure({c: float(f) for c, f in zip(clients.tolist(), finish) if np.isfinite(f)},
                            {c: max(0.0, rep.started_at - s.at) for c, rep, s in zip(clients.tolist(), reports, sent)
                             if rep is not None}, failed)
        rejected = ~torch.isfinite(decoded).all(dim=1).numpy() if opened.size else np.zeros(0, bool)
        self._round = {"sent": sent, "reports": reports, "starts": starts, "failed": failed}
        return Trained(lr, down, result, decoded, up, rejected)

    def _collect(self, sent: list[Sent], target: int):
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
                        self._settle_late(a)
                    continue
                arrivals[i] = a
                if a.report is None or a.report.resync:
                    dropped[i] = a.at - self._t_open
                else:
                    reports[i], finish[i] = a.report, a.at - self._t_open
            elapsed = time.time() - self._t_open
            known = np.isfinite(finish) | np.isfinite(dropped)
            if self.clock == "measured":  # the round lasts what the round mode says, in real seconds
                if self.round_mode.close(finish, dropped, target).duration_s <= elapsed:
                    break
            elif known.all():
                break
            if elapsed >= self.round_timeout_s:
                dropped[~known] = elapsed  # no reply in time: the device counts as gone
                self.link.drop([sent[i].ticket for i in np.flatnonzero(~known)])
                break
            time.sleep(self.poll_s)
        return reports, arrivals, finish, dropped

    def _decode(self, r: int, clients: np.ndarray, reports: list[Report | None], starts: list[torch.Tensor]):
        """What the server decodes from each reply, the upload bytes charged, and the cohort's results."""
        k, dim = len(clients), self.model.dim
        decoded = torch.zeros((k, dim), dtype=self.params.dtype)
        up = np.zeros(k, dtype=np.int64)
        losses, samples = np.full(k, np.nan), np.zeros(k, dtype=np.int64)
        buffers = [dict(self.buffers) for _ in range(k)]
        got = np.array([rep is not None for rep in reports], dtype=bool)
        for i in np.flatnonzero(got):
            rep = reports[i]
            losses[i], samples[i] = rep.mean_loss, rep.samples
            buffers[i] = rep.buffers or dict(self.buffers)
            if self.derive:  # the algorithm's client_update, on the server, from where training ended
                grad = None if rep.grad_sum is None else torch.from_numpy(rep.grad_sum)
                update = self.algorithm.client_update(int(clients[i]), starts[i], rep.vector(dim), grad_sum=grad)
                decoded[i] = update.reshape(-1) if update.numel() == dim else float("nan")
            else:
                decoded[i], up[i] = rep.vector(dim), rep.upload_bytes
        if self.derive and got.any():
            idx = torch.from_numpy(np.flatnonzero(got))
            decoded[idx], up[got] = self.compressor.encode_uploads(r, clients[got], decoded[idx])
        up = np.asarray(self.algorithm.upload_bytes(r, clients, decoded, up * self.algorithm.uplink_vectors),
                        dtype=np.int64) + self.model.buffer_bytes() * (len(self.buffers) > 0)
        up[~got] = 0  # nothing delivered yet; a late reply is charged when it arrives
        return decoded, up, CohortResult(updates=decoded, losses=losses, samples=samples, buffers=buffers)

    def _close(self, opened: Opened, trained: Trained) -> Closed:
        closed = super()._close(opened, trained)
        if self.clock == "measured":
            self._park(opened, closed)
        self._log(opened, trained, closed)
        return closed

    def _park(self, opened: Opened, closed: Closed) -> None:
        """Replies still missing at the close: late ones wait in the late buffer, the others are dropped."""
        sent, reports, failed = self._round["sent"], self._round["reports"], self._round["failed"]
        busy = closed.close.busy_s  # the round mode's array, shared by the feedback the selector will see
        for i, c in enumerate(opened.clients.tolist()):
            if reports[i] is not None or c in failed:
                continue
            if closed.late[i]:
                counted = float(busy[i]) if np.isfinite(busy[i]) else closed.duration_s
                busy[i] = counted  # work so far; the rest is counted when the reply comes
                row = np.flatnonzero((self.late.clients == c) & (self.late.origin_round == opened.round))
                self.late.busy_s[row] = counted
                self.in_flight[sent[i].ticket] = _InFlight(c, opened.round, self._t_open, counted,
                                                           self._round["starts"][i])
            else:
                self.link.drop([sent[i].ticket])

    def _settle_late(self, a: Arrival) -> None:
        """A late reply came: complete its late-buffer row, or drop the row when the device failed."""
        f = self.in_flight.pop(a.ticket)
        buf = self.late
        rows = np.flatnonzero((buf.clients == f.client) & (buf.origin_round == f.round) & np.isinf(buf.arrival_s))
        if not len(rows):
            return
        i, busy = int(rows[0]), a.at - f.t_open
        extra = max(0.0, busy - f.counted_s)
        self.population.resource_s[f.client] += extra
        self._extra["resource_s"] += extra
        decoded = None
        if a.report is not None and not a.report.resync:
            dec, up, _ = self._decode(f.round, np.array([f.client]), [a.report], [f.start])
            if bool(torch.isfinite(dec).all()):
                decoded = dec[0]
        if decoded is None:  # lost: it never reaches the model
            buf.arrival_s[i] = -np.inf
            buf.pop_arrived(-np.inf)
            self.population.wasted_s[f.client] += busy
            self._extra["wasted_s"] += busy
            return
        buf.arrival_s[i], buf.busy_s[i], buf.losses[i] = a.at - self.wall0, busy, a.report.mean_loss
        buf.updates[i] = decoded.to(buf.updates.dtype)
        self.population.bytes_up[f.client] += int(up[0])
        self._extra["bytes_up"] += int(up[0])
        self._extra["payload_up"] += a.report.model_bytes()
        self._extra["record_up"] += a.record_bytes
        self._extra["train_s"] += a.report.train_s

    def _log(self, opened: Opened, trained: Trained, closed: Closed) -> None:
        """One row per launched client for ``cohorts.csv``: who, with what weight, what became of it."""
        sent, reports, failed = self._round["sent"], self._round["reports"], self._round["failed"]
        for i, c in enumerate(opened.clients.tolist()):
            rep = reports[i]
            self.cohort_log.append({
                "round": opened.round, "client": c, "node": self.link.node_of(c), "weight": float(closed.weights[i]),
                "aggregated": bool(closed.aggregated[i]), "late": bool(closed.late[i]), "failed": c in failed,
                "finish_s": float(closed.finish_s[i]), "bytes_down": int(trained.down[i]),
                "bytes_up": int(trained.up[i]), "payload_bytes_up": rep.model_bytes() if rep is not None else 0,
                "record_bytes_down": sent[i].record_bytes, "train_loss": float(trained.result.losses[i]),
                "device_train_s": rep.train_s if rep is not None else float("nan")})

    def finish(self) -> None:
        """Late replies that never came are waste (counted as far as they were seen); stop waiting for them."""
        self.link.drop(list(self.in_flight))
        self.in_flight.clear()
        super().finish()


__all__ = ["FlowerRun", "ServerData", "member_weights"]
