"""The vectorized executor's default-rule reports (one subtraction a chunk) equal the per-client hooks' bit for bit."""

import copy

import numpy as np
import pytest
import torch

from turnout.executors.base import ClientBatch
from turnout.executors.vectorized import VectorizedConfig, VectorizedExecutor

RAW = {"name": "reports", "rounds": 1, "data": {"name": "synthetic", "num_clients": 12, "min_samples": 3},
       "model": {"name": "mlp", "hidden": [8]}, "train": {"batch_size": 4, "local_steps": 3, "lr": 0.1},
       "selector": {"name": "uniform", "clients_per_round": 12}, "output": {"progress": False, "plots": False}}


def hooked(algorithm):
    """The same rule with hooks of its own: start points that are not the global model's tensor, updates
    computed client by client."""
    class Hooked(type(algorithm)):
        def client_start(self, client, global_params):
            return global_params.view(-1)

        def client_update(self, client, start, end, grad_sum=None):
            return end - start

    out = copy.copy(algorithm)
    out.__class__ = Hooked
    return out


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox"])
@pytest.mark.parametrize("memory_mb", [512.0, 0.01])  # one chunk; one client a chunk
def test_one_subtraction_a_chunk_gives_the_hooks_reports(algorithm, memory_mb, build_simulation):
    sim = build_simulation({**RAW, "algorithm": {"name": algorithm}})
    clients = np.arange(12)
    batch = ClientBatch(0, clients, sim.exp.train.steps_for(sim.population.n_train[clients]), 0.1, sim.params,
                        sim.buffers, 0)
    executor = VectorizedExecutor(VectorizedConfig(memory_mb=memory_mb))
    fast = executor.run(batch, sim.algorithm, sim.trainer, sim.data)
    slow = executor.run(batch, hooked(sim.algorithm), sim.trainer, sim.data)
    assert torch.equal(fast.updates, slow.updates)
    np.testing.assert_array_equal(fast.losses, slow.losses)
    assert fast.updates.abs().max() > 1e-3  # the clients trained: the reports are not all zero
    # The reports are the end points less the global model, row by row.
    assert not torch.equal(fast.updates[0], fast.updates[1])
