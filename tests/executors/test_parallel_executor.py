"""The parallel executor's pool: started once, reused across rounds, released by close; failures are errors."""

import contextlib
import copy
import json
import os
import signal

import numpy as np
import pytest
import torch
from torch import nn

from turnout.algorithms.base import AlgorithmContext
from turnout.algorithms.fedavg import FedAvg
from turnout.config.train import TrainConfig
from turnout.core.records import ClientBatch
from turnout.executors.base import available_cores
from turnout.executors.parallel import ParallelConfig, ParallelExecutor, WorkerError
from turnout.models.flat import FlatModel
from turnout.training.local_sgd import LocalTrainer

RAW = {"name": "parallel", "rounds": 3, "data": {"name": "synthetic", "num_clients": 12, "min_samples": 3},
       "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 3, "lr": 0.05},
       "selector": {"name": "uniform", "clients_per_round": 6}, "eval": {"every": 1},
       "output": {"progress": False, "plots": False}}


@contextlib.contextmanager
def deadline(seconds):
    """Fail instead of hanging: SIGALRM raises after ``seconds``."""
    def fire(*_):
        raise TimeoutError(f"no answer within {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def with_executor(raw, name="parallel", **options):
    raw = copy.deepcopy(raw)
    raw["executor"] = {"name": name, **options}
    return raw


def test_configured_pool_starts_on_the_first_round_is_reused_and_released(simulate, build_simulation):
    sim = build_simulation(with_executor(RAW, workers=2))
    assert sim.executor.pool is None  # building a simulation (the CLI's pre-flight) starts no process
    rows = sim.advance(until=1)
    pool = sim.executor.pool
    pids = [p.pid for p in pool.procs]
    files = sorted(os.listdir(pool.shared.path))
    try:
        rows += sim.advance()
        assert sim.executor.pool is pool and [p.pid for p in pool.procs] == pids
        # dataset (x, y, offsets) written once; the board (start, offset, end, grad) reused every round
        assert sorted(os.listdir(pool.shared.path)) == files and len(files) == 7
    finally:
        sim.release()
    assert sim.executor.pool is None
    assert not any(p.is_alive() for p in pool.procs)
    assert not os.path.exists(pool.shared.path)
    sim.finish()
    res = sim.result(rows)
    _, ref = simulate(RAW)
    assert json.dumps(res.rounds) == json.dumps(ref.rounds) and torch.equal(res.final_params, ref.final_params)


def test_an_empty_cohort_starts_no_pool():
    data = _tiny_data()
    torch.manual_seed(0)
    fm = FlatModel(nn.Sequential(nn.Flatten(), nn.Linear(5, 3)))
    trainer = LocalTrainer(fm, TrainConfig(batch_size=4, local_steps=2, lr=0.1))
    algorithm = FedAvg(FedAvg.Config(), AlgorithmContext(2, fm.dim, data.n_train, 0, 1))
    ex = ParallelExecutor(ParallelConfig(workers=2))
    res = ex.run(ClientBatch(0, np.zeros(0, np.int64), np.zeros(0, np.int64), 0.1, fm.flat_params(), {}, 0),
                 algorithm, trainer, data)
    assert res.updates.shape == (0, fm.dim) and len(res.losses) == 0 and ex.pool is None


def test_default_workers_are_the_available_cores():
    assert ParallelExecutor(ParallelConfig()).workers == available_cores() == len(os.sched_getaffinity(0))


def test_a_killed_worker_is_an_error_not_a_hang(build_simulation):
    sim = build_simulation(with_executor(RAW, workers=1))
    try:
        sim.advance(until=1)
        victim = sim.executor.pool.procs[0]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        with deadline(60), pytest.raises(WorkerError, match=r"executor\.parallel: worker 0 \(pid \d+\) killed by "
                                                            r"SIGKILL — while training round 1's clients"):
            sim.advance(until=2)
        assert sim.executor.pool is None  # the broken pool was released
    finally:
        sim.release()


def test_a_failing_worker_reports_its_exception():
    """A worker whose training raises stops the round with that exception's text."""
    torch.manual_seed(0)
    wrong = FlatModel(nn.Sequential(nn.Flatten(), nn.Linear(7, 3)))  # the data has 5 features
    trainer = LocalTrainer(wrong, TrainConfig(batch_size=4, local_steps=2, lr=0.1))
    data = _tiny_data()
    batch = ClientBatch(0, np.array([0, 1]), np.array([2, 2]), 0.1, wrong.flat_params(), {}, 0)
    ex = ParallelExecutor(ParallelConfig(workers=1))
    algorithm = FedAvg(FedAvg.Config(), AlgorithmContext(2, wrong.dim, data.n_train, 0, 1))
    try:
        with deadline(60), pytest.raises(WorkerError, match=r"worker 0 failed while training round 0's clients "
                                                            r"\[0\]: RuntimeError: mat1 and mat2 shapes"):
            ex.run(batch, algorithm, trainer, data)
        assert ex.pool is None
    finally:
        ex.close()


def _tiny_data():
    from turnout.data.federated import FederatedDataset, offsets_from_counts

    g = np.random.default_rng(0)
    x, y = g.normal(size=(20, 5)).astype(np.float32), g.integers(0, 3, 20).astype(np.int64)
    return FederatedDataset(name="tiny", x_train=x, y_train=y, train_offsets=offsets_from_counts(np.array([12, 8])),
                            x_test=x[:0], y_test=y[:0], test_offsets=offsets_from_counts(np.array([0, 0])),
                            x_server_test=x, y_server_test=y, num_classes=3, input_shape=(5,))
