"""Training on a device: rows resident there, no waiting on it inside a client's steps, reports summed there.

The CPU cases check the pieces the GPU path is made of (resident views, index blocks) against the
plain path, bit for bit; the CUDA cases run on a machine with a GPU (the issue's GPU check script).
"""

import warnings

import numpy as np
import pytest
import torch

from turnout.config.train import TrainConfig
from turnout.models.flat import FlatModel
from turnout.training.local_sgd import LocalTrainer, batch_indices, index_blocks
from turnout.training.resident import ResidentRows

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
RAW = {"name": "dev", "rounds": 3, "data": {"name": "synthetic", "num_clients": 12}, "model": {"name": "mlp"},
       "train": {"batch_size": 10, "local_steps": 3, "lr": 0.05, "momentum": 0.5},
       "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 1}, "output": {"progress": False}}


@pytest.mark.parametrize("block", [1, 3, 7, 256])
def test_index_blocks_are_the_minibatches_in_order(block):
    want = list(batch_indices(23, 5, 17, np.random.default_rng(4)))
    got = list(index_blocks(23, 5, 17, np.random.default_rng(4), block_steps=block))
    assert [len(b) for b in want] == [n for _, lengths in got for n in lengths]
    np.testing.assert_array_equal(np.concatenate(want), np.concatenate([rows for rows, _ in got]))
    assert all(len(lengths) <= block for _, lengths in got)
    assert len(got) == -(-17 // block)


def test_resident_rows_keep_the_smallest_exact_type():
    grid = (np.arange(64, dtype=np.float32) / 8).reshape(16, 4)  # multiples of 1/8: exact in float16
    assert ResidentRows.put(grid, np.zeros(16, np.int64), torch.device("cpu")).x.dtype == torch.float16
    thirds = grid / 3  # not exact in float16
    assert ResidentRows.put(thirds, np.zeros(16, np.int64), torch.device("cpu")).x.dtype == torch.float32
    images = np.arange(48, dtype=np.uint8).reshape(3, 16)
    assert ResidentRows.put(images, np.zeros(3, np.int64), torch.device("cpu")).x.dtype == torch.uint8


def _trainer(device="cpu"):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return LocalTrainer(FlatModel(module), TrainConfig(batch_size=5, local_steps=9, lr=0.1, momentum=0.9),
                        device=device)


def test_training_on_resident_views_is_bitwise_the_plain_path():
    x = (np.random.default_rng(1).integers(0, 256, (40, 4)) / 16).astype(np.float32)  # exact in float16
    y = np.random.default_rng(2).integers(0, 3, 40)
    trainer = _trainer()
    start = trainer.model.flat_params()
    plain = trainer.train(start, {}, x[10:33], y[10:33], 9, 0.1, np.random.default_rng(7))
    rows = ResidentRows.put(x, y, torch.device("cpu"))
    assert rows.x.dtype == torch.float16
    viewed = trainer.train(start, {}, rows.x[10:33], rows.y[10:33], 9, 0.1, np.random.default_rng(7), resident=rows)
    assert torch.equal(plain.params, viewed.params)
    # an epoch of 23 rows (5+5+5+5+3), then 4 full batches
    assert plain.mean_loss == viewed.mean_loss and plain.samples == viewed.samples == 43


def test_no_device_work_on_the_cpu(simulate):
    sim, res = simulate(RAW)
    assert sim.report_device is None and "aggregation_device" not in res.summary
    assert sim.trainer.resident(sim.data.x_train, sim.data.y_train) is None


@CUDA
def test_a_clients_steps_never_wait_for_the_gpu():
    """Synchronisations per client are a constant (index blocks, the losses' read, the result), not per step."""
    trainer = _trainer("cuda")
    x = np.random.default_rng(1).normal(size=(400, 4)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 3, 400)
    rows = ResidentRows.put(x, y, torch.device("cuda"))
    start = trainer.model.flat_params().cuda()
    counts = {}
    for steps in (5, 60):
        trainer.train(start, {}, rows.x, rows.y, steps, 0.1, np.random.default_rng(0), resident=rows,
                      keep_on_device=True)  # warm-up: allocator and kernels
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trainer.train(start, {}, rows.x, rows.y, steps, 0.1, np.random.default_rng(0), resident=rows,
                              keep_on_device=True)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        counts[steps] = sum("synchroniz" in str(w.message) for w in caught)
    assert counts[5] == counts[60] <= 3, counts


@CUDA
def test_rows_live_on_the_gpu_in_their_stored_type(simulate):
    sim, _ = simulate({**RAW, "runtime": {"device": "cuda"}})
    rows = sim.trainer.resident(sim.data.x_train, sim.data.y_train)
    assert rows is not None and rows.x.is_cuda and rows.x.shape == sim.data.x_train.shape
    assert rows.x.dtype in (torch.float16, torch.float32)
    assert rows.x.dtype == torch.float32 or np.array_equal(rows.x.float().cpu().numpy(), sim.data.x_train)


@CUDA
@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_fedavg_is_summed_on_the_gpu_and_scaffold_says_why_not(executor, simulate):
    cuda = {**RAW, "runtime": {"device": "cuda"}, "executor": {"name": executor}}
    sim, res = simulate(cuda)
    assert res.summary["aggregation_device"].startswith("cuda") and sim.report_device is not None
    _, cpu = simulate(RAW)
    torch.testing.assert_close(res.final_params, cpu.final_params, rtol=1e-4, atol=1e-5)
    plain_sgd = {**cuda["train"], "momentum": 0.0}  # SCAFFOLD recovers gradients from plain local SGD
    for block, needs in [({"algorithm": {"name": "scaffold"}, "train": plain_sgd}, "algorithm scaffold"),
                         ({"compressor": {"name": "topk", "ratio": 0.1}}, "compressor topk")]:
        _, res = simulate({**cuda, **block})
        assert res.summary["aggregation_device"] == "cpu" and needs in res.summary["aggregation_cpu_because"]


@CUDA
def test_vectorized_chunks_fill_a_share_of_the_gpu(simulate):
    _, res = simulate({**RAW, "runtime": {"device": "cuda"}, "executor": {"name": "vectorized"}})
    assert res.summary["vectorized_chunk_clients"] == 4  # the whole cohort in one chunk
