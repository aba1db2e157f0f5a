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
    reports_on_device = True

    def run(self, batch: ClientBatch, algorithm: Algorithm, trainer: LocalTrainer,
            data: FederatedDataset) -> CohortResult:
        k = len(batch.clients)
        dim = batch.global_params.numel()
        on_device = batch.report_device is not None
        updates = torch.empty((k, dim), dtype=batch.global_params.dtype, device=batch.report_device)
        losses = np.zeros(k)
        samples = np.zeros(k, dtype=np.int64)
        buffers = []
        # On a GPU the pooled rows are put there once per simulation and a client's rows are views of them.
        resident = trainer.resident(data.x_train, data.y_train)
        offsets = data.train_offsets
        global_on_device = batch.global_params.to(batch.report_device) if on_device else None
        for row, (client, steps) in enumerate(zip(batch.clients.tolist(), batch.steps.tolist())):
            start = algorithm.client_start(client, batch.global_params)
            if resident is not None:
                a, b = int(offsets[client]), int(offsets[client + 1])
                x, y = resident.x[a:b], resident.y[a:b]
            else:
                x, y = data.client_train(client)
            if on_device and start is batch.global_params:  # the usual start: one copy on the device per round
                start = global_on_device
            res = trainer.train(start, batch.buffers, x, y, steps, batch.lr,
                                rngmod.stream(batch.seed, "batches", batch.stream_round, client),
                                objective=algorithm.local_objective(client, start), resident=resident,
                                keep_on_device=on_device)
            update = algorithm.client_update(client, start.to(res.params.device), res.params, grad_sum=res.grad_sum)
            # A report of the wrong shape is kept as NaN so the engine rejects it before aggregation.
            updates[row] = update.reshape(-1) if update.numel() == dim else float("nan")
            losses[row], samples[row] = res.mean_loss, res.samples
            buffers.append(res.buffers)
        return CohortResult(updates=updates, losses=losses, samples=samples, buffers=buffers)
