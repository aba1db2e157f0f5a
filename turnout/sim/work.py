"""What the one round loop is handed: how a round's client work is produced and turned into a new model.

The loop (:class:`turnout.sim.engine.Simulation`) is the same for a trained simulation, the
system-only proxy (:mod:`turnout.sim.system_only`) and a deployment on real devices
(:mod:`turnout.flower.run`): it opens the round, prices downloads, settles the lr and local steps,
asks the round mode for its verdict, assembles the server's reports, keeps the ledger, the late
buffer and the counters, and writes the row. A :class:`Work` decides only what differs:

* :meth:`Work.train` — who computes the cohort's reports and what they upload (the executor running the
  client rule; a count of the samples local SGD would process; instructions sent to devices);
* :meth:`Work.aggregate` — what the server makes of the reports (the server rule; a dense change);
* :meth:`Work.pricer` — how seconds and bytes are priced (the device model; a deployment's clock);
* whether a model is trained, as what the loop asks of it: the width of a parked report
  (:meth:`Work.report_dim`), the algorithm's client hooks (:meth:`Work.begin_round`), evaluation
  (:meth:`Work.evaluate`, :meth:`Work.client_columns`), the components' row columns
  (:meth:`Work.component_columns`) and the summary's note (:meth:`Work.summary`) — the loop reads no flag;
* the hooks :meth:`Work.attach`, :meth:`Work.start_round`, :meth:`Work.settle`, :meth:`Work.settled`,
  :meth:`Work.extend_row` and :meth:`Work.end`, which do nothing unless a deployment needs them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from ..algorithms.base import Algorithm
from ..core.finite import finite_rows as tensor_finite_rows
from ..core.records import ClientBatch, CohortResult, HeldReports, Reports, RoundClose
from ..world.ledger import CoordinateLedger
from ..world.wire import WirePricer
from .phases import Opened, Settled, Trained

if TYPE_CHECKING:
    from .engine import Simulation


@dataclass(frozen=True, kw_only=True)
class TrainOrder:
    """What the loop settled for the cohort before any client works: the round's lr, each client's local
    steps, the bytes it downloads and the round through which it was synced before (what it lacked)."""

    lr: float
    steps: np.ndarray
    down: np.ndarray
    synced_through: np.ndarray


@dataclass(frozen=True, kw_only=True)
class WorkDone:
    """What the cohort's work produced: results, the decoded reports, and the upload bytes of each payload
    (before the model's buffers, which the loop adds); ``replied`` marks who delivered (``None``: everyone)."""

    result: CohortResult
    decoded: torch.Tensor | HeldReports
    payload_up: np.ndarray
    replied: np.ndarray | None = None


class Work(ABC):
    """How a round's client work is produced and aggregated; the loop calls it, it never runs the loop."""

    #: Whether a model is trained (the reports are update values the training device may keep); what the loop
    #: does differently without one, it asks of the hooks below.
    trains_model: ClassVar[bool] = True

    def pricer(self, sim: Simulation) -> WirePricer:
        """The pricer of this run's bytes and seconds (the device model, unless a deployment measures)."""
        down = sim.algorithm.traffic_for(sim.algorithm.cfg).down
        return WirePricer(sim.population, sim.ledger, sim.compressor, down, sim.model.buffer_bytes())

    def attach(self, sim: Simulation) -> None:  # noqa: B027 (a hook)
        """Called once, when the loop that will call this work is built."""

    # ---- what training a model means to the loop (the system-only proxy says otherwise) ------------
    def report_dim(self, dim: int) -> int:
        """How many values a parked (late) report carries: the model's ``dim``."""
        return dim

    def begin_round(self, sim: Simulation, r: int, clients: np.ndarray, steps: np.ndarray, lr: float) -> None:
        """Before the cohort works: the algorithm's client rule learns who trains, how long, at which lr."""
        sim.algorithm.begin_round(r, clients, steps, lr)

    def evaluate(self, sim: Simulation, r: int, row: dict) -> None:
        """After round ``r``: the server's evaluation (accuracy, loss; divergence) into its row."""
        sim.evaluate(r, row)

    def component_columns(self, sim: Simulation) -> dict[str, object]:
        """The selector's, the algorithm's and the privacy seam's own columns of the round's row."""
        return {**sim.selector.round_metrics(), **sim.algorithm.round_metrics(), **sim.privacy.round_metrics()}

    def client_columns(self, sim: Simulation) -> dict[str, np.ndarray]:
        """``clients.csv``'s evaluation columns (when ``eval.per_client`` asks for them)."""
        return sim.evaluate_clients() if sim.exp.config.eval.per_client else {}

    def summary(self, sim: Simulation) -> dict[str, object]:
        """What this kind of run adds to the run's summary (nothing for a trained run)."""
        return {}

    def start_round(self, sim: Simulation, r: int) -> float:
        """When round ``r`` opens, in simulated seconds (a deployment may read its wall clock)."""
        return sim.sim_time

    @abstractmethod
    def train(self, sim: Simulation, opened: Opened, order: TrainOrder) -> WorkDone:
        """The cohort's reports: trained by the executor, priced only, or gathered from devices."""

    def settle(self, sim: Simulation, opened: Opened, trained: Trained, verdict: RoundClose,
               duration_s: float) -> RoundClose:
        """The round mode's verdict as the run takes it (a deployment counts work still in flight)."""
        return verdict

    def settled(self, sim: Simulation, opened: Opened, trained: Trained, settled: Settled) -> None:  # noqa: B027 (a hook)
        """Called once the round is settled, before aggregation."""

    @abstractmethod
    def aggregate(self, sim: Simulation, r: int, reports: Reports, trained: Trained, settled: Settled) -> int:
        """Apply the server's step to the global model; returns how many coordinates changed."""

    def extend_row(self, sim: Simulation, row: dict) -> None:  # noqa: B027 (a hook)
        """Add what this kind of run measures to the round's row."""

    def end(self, sim: Simulation) -> None:  # noqa: B027 (a hook)
        """The run is over: stop waiting for anything still in flight."""


class TrainedWork(Work):
    """The simulation: the executor runs the algorithm's client rule, the compressor encodes the uploads,
    and the algorithm's server rule and the compressor's server step make the new model."""

    def train(self, sim: Simulation, opened: Opened, order: TrainOrder) -> WorkDone:
        r, clients = opened.round, opened.clients
        batch = ClientBatch(r, clients, order.steps, order.lr, sim.params, sim.buffers, sim.seed,
                            report_device=sim.report_device, hold_reports=sim.hold_reports, launch=opened.launch)
        result = sim.executor.run(batch, sim.algorithm, sim.trainer, sim.data)
        reports = sim.privacy.clip(r, clients, result.updates)  # where a client's update becomes a report
        decoded, up = sim.compressor.encode_uploads(r, clients, reports)
        vectors = sim.algorithm.traffic_for(sim.algorithm.cfg).up
        up = sim.algorithm.upload_bytes(r, clients, reports, np.asarray(up, dtype=np.int64) * vectors)
        return WorkDone(result=result, decoded=decoded, payload_up=up)

    def aggregate(self, sim: Simulation, r: int, reports: Reports, trained: Trained, settled: Settled) -> int:
        old = sim.params
        reports = sim.privacy.privatize(r, reports)  # noise on the clipped sum, before the server step
        new = sim.algorithm.aggregate(r, old, reports)
        step = sim.compressor.server_update(r, new - old)
        new = old + step.sent
        changed = record_step(sim.ledger, r, new, old, step.support)
        sim.global_model.params = new
        agg = settled.aggregated
        if agg.any() and sim.buffers:
            sim.global_model.buffers = average_buffers([trained.result.buffers[i] for i in np.flatnonzero(agg)],
                                                       settled.weights[agg])
        return changed


def record_step(ledger: CoordinateLedger, r: int, new: torch.Tensor, old: torch.Tensor,
                sent: torch.Tensor | None) -> int:
    """Record in ``ledger`` which coordinates round ``r`` changed; returns how many.

    A dense server step changes every coordinate in a round that moves the model at all, which is what a
    server broadcasting its model sends and what ``--no-train`` prices; a compressor that sparsifies (top-k,
    GlueFL, APF's frozen set, a quantised downlink) changes what its step carries (``sent``, a bool mask, the
    support its ``server_update`` returned with the step). Not "which values differ" for a trained dense step:
    whether ``x + s`` rounds back to ``x``, or whether a ReLU let a gradient through, hinges on a last digit
    that another CPU's kernels give otherwise, and made dense runs' bytes down differ between machines
    (docs/determinism.md).
    """
    if sent is not None:
        return ledger.record(r, sent.cpu().numpy())
    return ledger.record_all(r) if not torch.equal(new, old) else 0


def report_device(sim: Simulation) -> tuple[torch.device | None, str]:
    """Where the cohort's reports stay after training, and why: the training device, or None (the CPU).

    On a GPU, bringing a cohort's reports to the CPU and summing them there costs more than training a
    small model (100 clients × 1.66M floats is 664 MB a round). So the reports stay where they were
    trained and are summed there when every component that reads them can work on that device; the first
    that cannot is named in the run's summary (``aggregation_cpu_because``).
    """
    device = sim.trainer.device
    if device.type == "cpu":
        return None, ""
    parts = sim.parts
    needs_cpu = [
        (not sim.work.trains_model, "the work trains no model here"),
        (not parts.executor.reports_on_device, f"executor {sim.exp['executor'].name} trains on CPU workers"),
        (not parts.algorithm.aggregates_on_device,
         f"algorithm {sim.exp['algorithm'].name} keeps client or server state on the CPU"),
        (not parts.compressor.passes_uploads_through, f"compressor {sim.exp['compressor'].name} encodes on the CPU"),
        (parts.selector.reads_uploads, f"selector {sim.exp['selector'].name} reads the uploads on the CPU"),
    ]
    why = first_reason(needs_cpu)
    return (None, why) if why else (device, "")


def held_reports(sim: Simulation) -> tuple[bool, str]:
    """Whether the executor may keep the cohort's reports where it trained them and send back partial
    weighted sums (:class:`~turnout.core.records.HeldReports`), and, when it offers to but may not, why.

    A sum changes the float summation order, so it is only used where the executor was asked to
    (``executor.partial_sums``), and only when nothing reads a report but the server rule's weighted sum:
    the first component that reads each report is named in the run's summary (``partial_sums_off_because``);
    its reports then come back one by one, bitwise as ``executor: sequential`` has them.
    """
    parts = sim.parts
    if not parts.executor.holds_reports():
        return False, ""
    algorithm = type(parts.algorithm)
    reads_each = [
        (not isinstance(sim.work, TrainedWork), "the work trains no model with the executor here"),
        (bool(algorithm.reads_each_report), f"algorithm {sim.exp['algorithm'].name} reads each report, not only "
                                            "their weighted sum"),
        # the actors make each report as the default hook does; a rule that changed the hooks keeps its reports
        (algorithm.client_update is not Algorithm.client_update or algorithm.upload_bytes is not Algorithm.upload_bytes,
         f"algorithm {sim.exp['algorithm'].name} makes or prices its reports itself (client_update, upload_bytes)"),
        (not parts.compressor.passes_uploads_through, f"compressor {sim.exp['compressor'].name} encodes each upload"),
        (parts.selector.reads_uploads, f"selector {sim.exp['selector'].name} reads each upload"),
        (parts.privacy.clips, f"privacy {sim.exp['privacy'].name} clips each report"),
    ]
    why = first_reason(reads_each)
    return not why, why


def first_reason(checks: list[tuple[bool, str]]) -> str:
    """The reason of the first check that holds, or "" (a run's summary names what decided it, not every cause)."""
    return next((why for holds, why in checks if holds), "")


def take_rows(reports: torch.Tensor | HeldReports, mask: np.ndarray) -> torch.Tensor:
    """The reports ``mask`` selects, exactly (held ones are read back from where they are held)."""
    if isinstance(reports, HeldReports):
        return reports.rows(mask)
    # index_select on the rows' positions: a boolean mask costs torch a nonzero() and a gather (4x slower for 10 rows)
    return reports.index_select(0, torch.from_numpy(np.flatnonzero(mask)).to(reports.device))


def finite_rows(x: torch.Tensor | HeldReports) -> np.ndarray:
    """Which rows of ``x`` hold only finite values (:func:`turnout.core.finite.finite_rows`), as a numpy mask.

    Stacked reports are checked where they are held (:meth:`HeldReports.finite`).
    """
    if isinstance(x, HeldReports):
        return x.finite()
    return tensor_finite_rows(x).cpu().numpy()


def average_buffers(buffers: list[dict[str, torch.Tensor]], weights: np.ndarray) -> dict[str, torch.Tensor]:
    """Weighted mean of float buffers (BatchNorm statistics); integer counters take the max."""
    w = torch.as_tensor(weights / weights.sum() if weights.sum() > 0 else np.full(len(weights), 1 / len(weights)),
                        dtype=torch.float32)
    out = {}
    for name in buffers[0]:
        stack = torch.stack([b[name] for b in buffers])
        out[name] = (torch.tensordot(w, stack.float(), dims=1).to(stack.dtype) if stack.is_floating_point()
                     else stack.max(0).values)
    return out
