"""Centralised reference: the same model trained on the union of all clients' training data.

FL papers judge a federated run against this ceiling; the quickstart reports both numbers so a
user can see what the participation model costs.
"""

from __future__ import annotations

import numpy as np
import torch

from ..config.train import TrainConfig
from ..core import rng as rngmod
from ..data.federated import FederatedDataset
from ..models.flat import FlatModel
from ..training.local_sgd import LocalTrainer, evaluate


def centralized_accuracy(model: FlatModel, data: FederatedDataset, train: TrainConfig, epochs: int, seed: int,
                         eval_batch: int = 2048) -> tuple[float, float]:
    """(test accuracy, test loss) after ``epochs`` of minibatch SGD (momentum 0.9, lr decayed ×0.1 at 50 % and 75 %).

    Uses the same functional trainer as clients, on the pooled training set, starting from the
    same initial model as the federated run.
    """
    n = len(data.y_train)
    batch = max(32, train.batch_size)
    cfg = TrainConfig(batch_size=batch, local_steps=1, lr=train.lr, momentum=0.9, weight_decay=train.weight_decay)
    trainer = LocalTrainer(model, cfg)
    params, buffers = model.flat_params(), model.buffers()
    steps_per_epoch = int(np.ceil(n / batch))
    for epoch in range(epochs):
        lr = train.lr * (0.1 if epoch >= 0.75 * epochs else 1.0) * (0.1 if epoch >= 0.5 * epochs else 1.0)
        res = trainer.train(params, buffers, data.x_train, data.y_train, steps_per_epoch, lr,
                            rngmod.stream(seed, "centralized", epoch))
        params, buffers = res.params, res.buffers
    with torch.no_grad():
        return evaluate(model, params, buffers, data.x_server_test, data.y_server_test, eval_batch)
