"""The typed records that cross from one seam to another during a round.

Selector → :class:`Cohort` (who, with what weight, per-member tags) → executor
(:class:`ClientBatch` in, :class:`CohortResult` out) → round mode (:class:`RoundClose`) →
selector again (:class:`RoundFeedback`) and algorithm (:class:`Reports`). A selector reads a
:class:`SelectionContext`. All are frozen, and their arrays are read-only views where they cross a
seam: a seam reads what another decided and never edits it (its owner may still change its own array).
They live here, not in one seam's module, so no seam imports another to talk to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import torch

from .rng import launch_round

if TYPE_CHECKING:
    from ..availability.base import Availability
    from ..world.context import WorldContext


def read_only(values) -> np.ndarray:
    """A read-only view of ``values``: a record hands it on, nobody writes through it (its owner still can)."""
    view = np.asarray(values).view()
    view.flags.writeable = False
    return view


def _freeze(record, *names: str) -> None:
    """Make the named array fields of a frozen record read-only views."""
    for name in names:
        object.__setattr__(record, name, read_only(getattr(record, name)))


@dataclass(frozen=True)
class Cohort:
    """Clients to launch this round and the weight each report gets in aggregation.

    ``normalize=True`` means weights are relative: the server divides by the sum over the reports
    that actually arrive (so dropouts do not shrink the update). ``normalize=False`` means the
    weights are absolute (unbiased estimators such as FedAvg's N/K·p_i form) and used as given.
    ``target`` is the number of reports the round wants (K); ``len(clients)`` may be larger when the
    round mode over-commits. ``tags`` are per-member arrays aligned with ``clients`` (``"sticky"``:
    GlueFL's members drawn from the sticky group, which its compressor treats differently).
    """

    clients: np.ndarray
    weights: np.ndarray
    normalize: bool = True
    target: int = 0
    tags: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.clients) != len(self.weights):
            raise ValueError("cohort clients and weights differ in length")
        for name, values in self.tags.items():
            if len(values) != len(self.clients):
                raise ValueError(f"cohort tag {name!r} has {len(values)} entries for {len(self.clients)} clients")
        object.__setattr__(self, "clients", read_only(np.asarray(self.clients).astype(np.int64)))
        object.__setattr__(self, "weights", read_only(self.weights))
        object.__setattr__(self, "tags", MappingProxyType({k: read_only(v) for k, v in self.tags.items()}))
        if not self.target:
            object.__setattr__(self, "target", len(self.clients))

    def tag(self, name: str) -> np.ndarray | None:
        """A per-member tag, or None when the selector set none."""
        return self.tags.get(name)


@dataclass(frozen=True)
class SelectionContext:
    """Everything a selector may use in one round."""

    round: int
    time_s: float
    available: np.ndarray  # ids of clients that can be launched now
    launch: int  # how many the round mode wants launched (≥ target under over-commitment)
    rng: np.random.Generator  # the (seed, "selection", round) stream
    world: WorldContext
    availability: Availability  # the availability model (oracle predictions, e.g. REFL IPS)
    #: ``probe_loss(clients, batch) -> loss per client`` of the current global model on each
    #: client's training data (a ``batch``-sample minibatch, or all of it when ``batch`` is None);
    #: the engine charges the probe's download, compute and upload to the round.
    probe_loss: Callable[[np.ndarray, int | None], np.ndarray]
    #: clients whose late reports are still in flight, and when each will reach the server
    #: (absolute simulated seconds) — REFL excludes them and APT counts the ones due this round.
    pending_clients: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pending_arrival_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True)
class RoundFeedback:
    """What happened to a launched cohort, aligned with ``clients``."""

    round: int
    clients: np.ndarray
    aggregated: np.ndarray  # bool
    late: np.ndarray  # bool
    train_loss: np.ndarray  # mean local training loss (nan for clients that did not train)
    n_samples: np.ndarray  # samples processed
    finish_s: np.ndarray  # seconds from round start to delivery (if it had not been cut)
    busy_s: np.ndarray  # client-seconds actually spent
    updates: torch.Tensor | HeldReports  # (k, dim) decoded uploads (held: see Selector.reads_uploads)
    duration_s: float

    def __post_init__(self) -> None:
        _freeze(self, "clients", "aggregated", "late", "train_loss", "n_samples", "finish_s", "busy_s")


class HeldReports(ABC):
    """A cohort's reports left where they were trained (a Ray actor's memory) instead of sent to the driver.

    Shipping every client's report to the driver costs the cohort's size times the model's a round; a
    server rule that only needs Σ w_i u_i can have each holder send its part of the sum instead
    (pfl-research's design). Rows are read back exactly (:meth:`rows`) wherever a report itself is needed
    — a late report parked for a later round — so only the sum's float order differs from dense reports.
    An executor holds reports only when the run's components declare they read them through a weighted
    sum alone (:func:`turnout.sim.work.held_reports`).
    """

    def __init__(self, count: int, dim: int, dtype: torch.dtype):
        self.count, self.dim, self.dtype = count, dim, dtype

    def __len__(self) -> int:
        return self.count

    @property
    def shape(self) -> tuple[int, int]:
        return (self.count, self.dim)

    @abstractmethod
    def finite(self) -> np.ndarray:
        """Which rows hold only finite values (checked where they are held)."""

    @abstractmethod
    def rows(self, mask: np.ndarray) -> torch.Tensor:
        """The rows ``mask`` selects, exactly as trained, as a CPU tensor ``(mask.sum(), dim)``."""

    @abstractmethod
    def weighted_sum(self, rows: np.ndarray, weights: np.ndarray) -> torch.Tensor:
        """Σ weights[j] · row ``rows[j]``, summed where the rows are held, as a CPU tensor ``(dim,)``."""


@dataclass(frozen=True)
class Reports:
    """The reports a server aggregates in one round, aligned by row.

    ``updates`` are the decoded uploads (after the compressor), ``weights`` come from the
    selector (relative if ``normalize``), ``staleness`` is 0 for fresh reports and the number of
    rounds late otherwise. When the executor held the fresh reports (``held``: the holder and the rows
    of it aggregated), they are the first ``len(held[1])`` reports and ``updates`` holds only the rest;
    a server rule sees that only if it declared it reads reports through :meth:`weighted_mean` alone.
    """

    clients: np.ndarray
    updates: torch.Tensor  # (k, dim), or the rows after the held ones
    weights: np.ndarray
    normalize: bool
    n_samples: np.ndarray
    losses: np.ndarray
    staleness: np.ndarray
    held: tuple[HeldReports, np.ndarray] | None = None
    #: (k, dim): the model each report's client started from, for rules that declare ``reads_origin_models``
    origin_models: torch.Tensor | None = None

    def __post_init__(self) -> None:
        _freeze(self, "clients", "weights", "n_samples", "losses", "staleness")

    def __len__(self) -> int:
        return len(self.clients)

    def weighted_mean(self) -> torch.Tensor:
        """Σ w_i u_i (divided by Σ w_i when weights are relative); zero when there are no reports.

        Computed where the reports are (a GPU when the engine aggregates there, the actors holding them);
        the result is on the CPU, where the global model lives.
        """
        if len(self) == 0:
            return torch.zeros(self.updates.shape[1], dtype=self.updates.dtype)
        w = torch.as_tensor(self.weights.copy(), dtype=self.updates.dtype)  # a writable copy of k weights
        if self.normalize:
            total = float(w.sum())
            w = w / total if total > 0 else torch.full_like(w, 1.0 / len(w))
        if self.held is None:
            return (w.to(self.updates.device) @ self.updates).cpu()
        holder, rows = self.held
        total = holder.weighted_sum(rows, w[:len(rows)].numpy())
        if len(self.updates):
            total = total + (w[len(rows):] @ self.updates.cpu())
        return total


@dataclass(frozen=True)
class SentStep:
    """The server's step as broadcast (``sent``) and which coordinates it carries (``support``, a bool mask), from
    a compressor's ``server_update``. ``support`` None: a dense step, which changes every coordinate when it moves
    the model at all; the download ledger counts the support (docs/determinism.md)."""

    sent: torch.Tensor
    support: torch.Tensor | None = None


@dataclass(frozen=True)
class RoundClose:
    """The outcome of closing a round over the launched cohort (arrays aligned with the cohort).

    ``aggregated``: reports used this round. ``late``: reports that will arrive after the close and
    are kept for a later round (with their staleness). Everything else launched is wasted.
    ``busy_s``: client-seconds each launched client spent (up to its finish, its dropout, or the
    moment the server stopped waiting for it).
    """

    aggregated: np.ndarray
    late: np.ndarray
    duration_s: float
    busy_s: np.ndarray

    def __post_init__(self) -> None:
        _freeze(self, "aggregated", "late", "busy_s")


@dataclass(frozen=True)
class ClientBatch:
    """The clients to train this round and what they start from."""

    round: int
    clients: np.ndarray
    steps: np.ndarray  # local steps per client
    lr: float
    global_params: torch.Tensor
    buffers: dict[str, torch.Tensor]
    seed: int
    #: where the executor leaves the reports (``CohortResult.updates``): None = the CPU; the training device when
    #: every component can aggregate there (:func:`turnout.sim.work.report_device`)
    report_device: torch.device | None = None
    #: the executor may keep the reports where it trained them and return a :class:`HeldReports` (only when
    #: every component reads them through a weighted sum alone: :func:`turnout.sim.work.held_reports`)
    hold_reports: bool = False
    #: which launch of the round this is: 0 at the round's open, 1, 2, … for the slots an asynchronous round
    #: refills at arrivals (``round_mode.refill: arrival``); it keys the minibatch streams (:attr:`stream_round`)
    launch: int = 0

    @property
    def stream_round(self) -> int:
        """The round key of this batch's ``(seed, "batches", round, client)`` streams
        (:func:`turnout.core.rng.launch_round`)."""
        return launch_round(self.round, self.launch)


@dataclass(frozen=True)
class CohortResult:
    """Per-client outputs, stacked in the order of ``ClientBatch.clients``."""

    updates: torch.Tensor | HeldReports  # (k, dim): what each client uploads (before compression)
    losses: np.ndarray  # mean training loss over the local steps
    samples: np.ndarray  # samples processed (drives compute time)
    buffers: list[dict[str, torch.Tensor]]
