"""The algorithm interface, in the style of pfl-research's typed hooks.

The client rule is split into three small hooks over tensors — where local training starts,
how the local gradient is changed (a :class:`~turnout.training.local_sgd.LocalObjective` record,
not a callback), what is sent back — so every executor (sequential, vectorised, parallel) runs the
same rule. The server rule sees every report of a round as one batch
(struct-of-arrays), including late ones with their staleness.
"""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from pydantic import BaseModel

from ..config.train import TrainConfig
from ..core.capabilities import Deployable, UploadKind
from ..core.records import Reports
from ..core.registry import Registry
from ..core.state import Stateful
from ..training.local_sgd import LocalObjective
from ..world.state_store import ClientStateStore
from .late_reports import LateReportsOption
from .server_step import Direction, ServerStep, ServerStepConfig, ServerStepOption, moments_into_server_step

ALGORITHMS: Registry = Registry("algorithm", "client rule + server rule + their state")


@dataclass(frozen=True)
class AlgorithmContext:
    """What an algorithm may know about the world when it is built (immutable)."""

    num_clients: int
    dim: int
    n_train: np.ndarray
    seed: int
    rounds: int
    store: ClientStateStore | None = None  # per-client model-sized state (control variates, memories)
    train: TrainConfig | None = None  # the clients' local-training settings (rules that invert SGD read them)

    def client_shares(self, uniform: bool) -> np.ndarray:
        """p_i over all N clients: 1/N, or n_i / Σ n (1/N when no client holds data)."""
        n = self.num_clients
        total = float(np.sum(self.n_train))
        if uniform or total <= 0:
            return np.full(n, 1.0 / n)
        return np.asarray(self.n_train, np.float64) / total

    def __post_init__(self) -> None:
        if self.store is None:  # an algorithm built on its own (tests): an unbudgeted in-RAM store
            object.__setattr__(self, "store", ClientStateStore(self.dim, self.num_clients, 1 << 62))

    def state_store(self) -> ClientStateStore:
        """The engine's per-client state store."""
        return self.store


@dataclass(frozen=True)
class Traffic:
    """What a rule sends per participating client and round: what the engine prices, and what validation holds a
    compressor to."""

    #: model-sized vectors sent down (FedSUM and SCAFFOLD send a second one) and up (SCAFFOLD's original form: 2)
    down: int = 1
    up: int = 1
    #: what an upload is (a compressor lists the kinds it ``accepts``; validation refuses one that would break it)
    upload: UploadKind = UploadKind.MODEL_DELTA
    #: the rule's own way to compress its uploads (the option to set), named when a compressor is refused
    own_compression: str = ""


#: flags an algorithm class declared before, and what declares the same now
RETIRED_FLAGS = {
    "downlink_vectors": "declare traffic = Traffic(down=...)", "uplink_vectors": "declare traffic = Traffic(up=...)",
    "update_kind": "declare traffic = Traffic(upload=...)",
    "own_compression": "declare traffic = Traffic(own_compression=...)",
    "uses_stale_updates": "give the rule's Config the max_staleness option (turnout.algorithms.late_reports)",
    "sums_reports": "declare reads_each_report = '' (partial sums follow it)",
    "dp_unsound": "declare reads_each_report (the same reason)",
}


class Algorithm(Stateful, Deployable, ABC):
    """Client rule + server rule. Subclasses implement :meth:`server_direction` (the shared server step applies
    it) or, to set the model outright, :meth:`aggregate`; the client hooks default to FedAvg's.

    Server-side state (moments, memories' running sums, counters) is declared in ``state_attrs``;
    model-sized per-client state lives in the client-state store, which is checkpointed with the run.
    """

    Config: type[BaseModel]
    #: what the rule sends each way (:class:`Traffic`); a rule whose options change it overrides :meth:`traffic_for`
    traffic: ClassVar[Traffic] = Traffic()
    #: rules that recover gradients from the SGD end point need plain local SGD; validation enforces it.
    requires_plain_sgd: bool = False
    #: why the rule's wire traffic depends on update values (Adaptive-OU's NACKs); empty: it runs in the
    #: system-only mode (``--no-train``), where every aggregation is taken to change every coordinate
    needs_training: str = ""
    #: the client rule (``client_start``, ``client_update``) and ``aggregate`` work on reports that stay on the
    #: training device (a GPU) and keep no state there: the engine then aggregates on the device and only the new
    #: global model comes back. False (the default) sends every report to the CPU first, as rules with per-client
    #: state in the client-state store, or server state they update from the reports, need.
    aggregates_on_device: ClassVar[bool] = False
    #: why the server rule needs every report to come from the round's own cohort (it pairs a report with what it
    #: sent that cohort, or estimates the cohort's silent members); empty: it takes reports started in earlier
    #: rounds too, as asynchronous rounds deliver them (``turnout check`` refuses the others there)
    cohort_bound: ClassVar[str] = ""
    #: the server rule reads the model each report's client started from (``Reports.origin_models``: FedAsync
    #: mixes models); each parked report then keeps the model its client started from (``LateBuffer.models``)
    reads_origin_models: ClassVar[bool] = False
    #: why the server rule reads each report itself, not only their weighted mean; empty: it reads the reports only
    #: through ``Reports.weighted_mean()`` (a weighted average of client deltas), so whatever stands in for that mean
    #: serves it — client-level DP's noised fixed-denominator estimate (turnout.privacy), secure aggregation's sum,
    #: the Ray executor's partial weighted sums (:func:`turnout.sim.work.held_reports`). Validation names the reason
    #: when it refuses DP or secure aggregation: a rule that keeps raw per-client updates releases them un-noised.
    reads_each_report: ClassVar[str] = "reads each report itself, not only their weighted mean, so noise on the " \
                                       "clipped sum would not reach its step"

    state_attrs = ("server_step",)

    def __init_subclass__(cls, **kwargs):
        """A rule written against the flags these declarations replaced is refused, not silently misread."""
        super().__init_subclass__(**kwargs)
        for old, fix in RETIRED_FLAGS.items():
            if old in cls.__dict__:
                raise TypeError(f"{cls.__name__}.{old} is no longer read: {fix}")

    def __init__(self, cfg: BaseModel, ctx: AlgorithmContext):
        self.cfg = cfg
        self.ctx = ctx
        #: how the rule's direction becomes the next model (:mod:`turnout.algorithms.server_step`): the config's
        #: ``server_step`` option, or plain SGD with η_g = 1 for a config without one (a plugin's own options)
        self.server_step = ServerStep(cfg.step_config() if isinstance(cfg, ServerStepOption) else ServerStepConfig())

    def load_state_dict(self, state: dict) -> None:
        """Restore a checkpoint; one written before the server step was a component resumes too."""
        super().load_state_dict(state if "server_step" in state else moments_into_server_step(state))

    @classmethod
    def traffic_for(cls, cfg: BaseModel) -> Traffic:
        """What this rule sends under options ``cfg`` (SCAFFOLD's form changes it): by default its :attr:`traffic`."""
        return cls.traffic

    @classmethod
    def upload_kind(cls, cfg: BaseModel) -> UploadKind:
        """What this rule uploads under options ``cfg``."""
        return UploadKind(cls.traffic_for(cfg).upload)

    @property
    def max_staleness(self) -> int | None:
        """How many rounds old a late report (a straggler's, any report of an asynchronous round) may be for this
        rule to aggregate it when it arrives; ``None``: it aggregates none (they are dropped on arrival, their work
        wasted). A run's setting, so the rule's config says it (:class:`LateReportsOption`), not its class."""
        return self.cfg.staleness_bound() if isinstance(self.cfg, LateReportsOption) else None

    # ---- client rule (over tensors) -------------------------------------------------------
    def begin_round(self, round: int, clients: np.ndarray, steps: np.ndarray, lr: float) -> None:
        """Called before the cohort trains: who trains, with how many local steps, at which lr.

        Rules that need K and η (SCAFFOLD's option-II control variate, FedNova-style
        normalisation) read them here. Default: nothing.
        """

    def client_start(self, client: int, global_params: torch.Tensor) -> torch.Tensor:
        """Where the client's local training starts (default: the global model it downloaded)."""
        return global_params

    def local_objective(self, client: int, start: torch.Tensor) -> LocalObjective | None:
        """How the client's local gradient is changed (FedProx, SCAFFOLD, FedSUM), as data. Default: unchanged."""
        return None

    def client_update(self, client: int, start: torch.Tensor, end: torch.Tensor,
                      grad_sum: torch.Tensor | None = None) -> torch.Tensor:
        """What the client uploads, from where it started and ended (default: the model delta).

        ``grad_sum`` is the sum of the minibatch gradients at the start point when the client's
        objective froze the model (FedSUM-B); ``None`` otherwise.
        """
        return end - start

    def upload_bytes(self, round: int, clients: np.ndarray, uploads: torch.Tensor,
                     default_bytes: np.ndarray) -> np.ndarray:
        """Wire bytes of each upload, given the raw uploads and what the compressor charged.

        Default: the compressor's bytes. Rules with their own wire format (Adaptive-OU's NACKs) override.
        """
        return default_bytes

    # ---- server rule ------------------------------------------------------------------------
    def server_direction(self, round: int, global_params: torch.Tensor,
                         reports: Reports) -> Direction | torch.Tensor | None:
        """Where this round's reports (which may be empty) move the model: a direction (a pseudo-gradient pointing
        downhill, e.g. the weighted mean of the deltas) that :attr:`server_step` applies, or ``None`` to leave the
        model and the step's state as they are. A rule implements this, or :meth:`aggregate` to set the model
        outright (FedAsync's mixing)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither server_direction nor aggregate")

    def aggregate(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        """The next global model from this round's reports: the rule's direction, applied by the server step."""
        return self.server_step.apply(round, global_params, self.server_direction(round, global_params, reports))

    def eval_params(self, global_params: torch.Tensor) -> torch.Tensor:
        """The model that is evaluated (FedAWE evaluates the clients' average). Default: the global model."""
        return global_params

    def round_metrics(self) -> dict[str, object]:
        """Extra columns of this round's row in ``rounds.csv`` (thresholds, NACK counts, …)."""
        return {}
