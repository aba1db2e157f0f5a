"""The executor interface: run one round's client rule for a batch of clients.

The sequential executor is the reference; any other executor must give the same numbers (up to
float tolerance), which is why all randomness a client uses comes from its own
(seed, "batches", round, client) stream rather than from a shared generator.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import ClassVar

from pydantic import BaseModel, Field

from ..algorithms.base import Algorithm
from ..config.base import StrictModel
from ..core.records import ClientBatch, CohortResult
from ..core.registry import Registry
from ..data.federated import FederatedDataset
from ..training.local_sgd import LocalTrainer

EXECUTORS: Registry = Registry("executor", "how local training is run")


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class WorkersOption(StrictModel):
    """The config of an executor that starts worker processes (``parallel``; ``auto``, which may pick it)."""

    workers: int | None = Field(None, ge=1, le=256, description="worker processes of parallel (auto: also the cores "
                                                                "its choice counts); default: the available cores")

    def worker_count(self) -> int:
        """The workers asked for, else the cores this process may run on."""
        return self.workers or available_cores()


class Executor(ABC):
    """Runs ``algorithm``'s client rule with ``trainer`` for every client of a :class:`ClientBatch`.

    Capabilities are declared here, read by the composition rules at validation, so a combination
    an executor cannot run exactly is refused before any work rather than run approximately.
    """

    Config: type[BaseModel]
    #: trains models whose BatchNorm running statistics change in training, returning each client's own
    trains_running_stats: bool = True
    #: batches clients with ``torch.func.vmap``, so every layer of the model must have a batching rule
    needs_vmap: bool = False
    #: its numbers are bitwise those of ``executor: sequential`` (a run may resume with another such executor
    #: without a digit changing); False where batched kernels reassociate floats (``vectorized``)
    matches_sequential: ClassVar[bool] = True
    #: optional packages the executor imports, as (module, extra) pairs: validation refuses it, naming the
    #: extra to install, when one is missing (the Ray executor needs ``ray``)
    requires: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: leaves the reports on the training device when asked (``ClientBatch.report_device``); executors whose
    #: workers train on their own CPUs (parallel, ray) always return them on the CPU
    reports_on_device: ClassVar[bool] = False

    def __init__(self, cfg: BaseModel):
        self.cfg = cfg

    @classmethod
    def bitwise_with(cls, options: dict) -> bool:
        """Whether it gives ``executor: sequential``'s bits under these options (a config block's keys): a run may
        then resume with another such executor without a digit changing. Default: :attr:`matches_sequential`."""
        return cls.matches_sequential

    @classmethod
    def processes(cls, cfg: BaseModel) -> int:
        """Worker processes this executor may start besides the driver (pre-flight counts their memory): its
        config's ``workers`` (:class:`WorkersOption`), or none."""
        return cfg.worker_count() if isinstance(cfg, WorkersOption) else 0

    def holds_reports(self) -> bool:
        """Whether it keeps the reports where it trained them when a batch allows it (``ClientBatch.hold_reports``),
        returning a :class:`~turnout.core.records.HeldReports` that sums them there. Default: never."""
        return False

    @abstractmethod
    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        """Train every client of ``batch``."""

    def summary(self) -> dict:
        """Entries for the run's ``summary.json`` (what an automatic choice picked). Default: none."""
        return {}

    def close(self) -> None:  # noqa: B027 - a hook with a default, not an abstract method
        """Release workers (process pools). Default: nothing to release."""
