"""The reference executor: one client after another in this process."""

from __future__ import annotations

import numpy as np
import torch

from ..algorithms.base import Algorithm
from ..config.base import NoOptions
from ..core import rng as rngmod
from ..data.federated import FederatedDataset
from ..training.local_sgd import LocalTrainer
from .base import EXECUTORS, ClientBatch, CohortResult, Executor


@EXECUTORS.register("sequential")
class SequentialExecutor(Executor):
    """Trains clients one at a time in-process; the reference every other executor must match."""

    Config = NoOptions

    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        k = len(batch.clients)
        dim = batch.global_params.numel()
        updates = torch.empty((k, dim), dtype=batch.global_params.dtype)
        losses = np.zeros(k)
        samples = np.zeros(k, dtype=np.int64)
        buffers = []
        for row, (client, steps) in enumerate(zip(batch.clients.tolist(), batch.steps.tolist())):
            start = algorithm.client_start(client, batch.global_params)
            x, y = data.client_train(client)
            res = trainer.train(start, batch.buffers, x, y, steps, batch.lr,
                                rngmod.stream(batch.seed, "batches", batch.round, client),
                                objective=algorithm.local_objective(client, start))
            update = algorithm.client_update(client, start, res.params, grad_sum=res.grad_sum)
            # A report of the wrong shape is kept as NaN so the engine rejects it before aggregation.
            updates[row] = update.reshape(-1) if update.numel() == dim else float("nan")
            losses[row], samples[row] = res.mean_loss, res.samples
            buffers.append(res.buffers)
        return CohortResult(updates=updates, losses=losses, samples=samples, buffers=buffers)
