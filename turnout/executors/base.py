"""The executor interface: run one round's client rule for a batch of clients.

The sequential executor is the reference; any other executor must give the same numbers (up to
float tolerance), which is why all randomness a client uses comes from its own
(seed, "batches", round, client) stream rather than from a shared generator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel

from ..algorithms.base import Algorithm
from ..data.federated import FederatedDataset
from ..registry import Registry
from ..training.local_sgd import LocalTrainer

EXECUTORS: Registry = Registry("executor", "how local training is run")


@dataclass
class ClientBatch:
    """The clients to train this round and what they start from."""

    round: int
    clients: np.ndarray
    steps: np.ndarray  # local steps per client
    lr: float
    global_params: torch.Tensor
    buffers: dict[str, torch.Tensor]
    seed: int


@dataclass
class CohortResult:
    """Per-client outputs, stacked in the order of ``ClientBatch.clients``."""

    updates: torch.Tensor  # (k, dim): what each client uploads (before compression)
    losses: np.ndarray  # mean training loss over the local steps
    samples: np.ndarray  # samples processed (drives compute time)
    buffers: list[dict[str, torch.Tensor]]


class Executor(ABC):
    """Runs ``algorithm``'s client rule with ``trainer`` for every client of a :class:`ClientBatch`."""

    Config: type[BaseModel]

    def __init__(self, cfg: BaseModel):
        self.cfg = cfg

    @abstractmethod
    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        """Train every client of ``batch``."""

    def close(self) -> None:
        """Release workers (pools, Ray actors). Default: nothing to release."""
