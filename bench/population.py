"""Population-scale benchmark: availability + selection + accounting over 1,000,000 clients.

Builds a population of N clients with trace-driven availability (generated FedScale-schema
traces) and FLASH-calibrated heterogeneous devices, then runs the real engine's round step for
R rounds with uniform selection of K clients, exact byte/time accounting, participation metrics —
and a stub update instead of training (the bench measures the world, not SGD). Prints ms/round
and peak RSS; targets are ≤ 50 ms/round and ≤ 1 GB at N = 1,000,000.

    python bench/population.py                 # N = 1,000,000, 200 rounds, K = 100
    python bench/population.py --clients 100000 --rounds 50
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np
import torch

from turnout.data.federated import FederatedDataset, offsets_from_counts
from turnout.executors.base import CohortResult, Executor
from turnout.sim.composition import expand
from turnout.sim.engine import Simulation


class StubExecutor(Executor):
    """No training: every client 'processes' its steps × batch samples and returns a tiny random update."""

    Config = None

    def run(self, batch, algorithm, trainer, data):
        k, dim = len(batch.clients), batch.global_params.numel()
        g = torch.Generator().manual_seed(batch.round)
        samples = batch.steps * trainer.cfg.batch_size
        return CohortResult(updates=1e-3 * torch.randn((k, dim), generator=g), losses=np.ones(k),
                            samples=samples.astype(np.int64), buffers=[{} for _ in range(k)])


def tiny_population(n: int) -> FederatedDataset:
    """N clients holding 20–100 rows each of a 2-feature, 2-class problem, without storing the rows.

    The data arrays are views of a single zero row (stride 0), so per-client sample counts are real
    while memory is not spent on features the stub never reads.
    """
    rng = np.random.default_rng(0)
    counts = rng.integers(20, 101, size=n)
    total = int(counts.sum())
    x = np.lib.stride_tricks.as_strided(np.zeros(2, np.float32), shape=(total, 2), strides=(0, 4))
    y = np.lib.stride_tricks.as_strided(np.zeros(1, np.int64), shape=(total,), strides=(0,))
    zeros = np.zeros(n + 1, np.int64)
    return FederatedDataset(name="bench", x_train=x, y_train=y, train_offsets=offsets_from_counts(counts),
                            x_test=x[:0], y_test=y[:0], test_offsets=zeros, x_server_test=x[:1], y_server_test=y[:1],
                            num_classes=2, input_shape=(2,))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--per-round", type=int, default=100)
    p.add_argument("--availability", default="trace", help="availability component name (default: trace)")
    p.add_argument("--devices", default="flash", help="device model name (default: flash)")
    args = p.parse_args(argv)

    t_build = time.perf_counter()
    data = tiny_population(args.clients)
    raw = {"name": "bench", "rounds": args.rounds, "data": {"name": "synthetic"}, "model": {"name": "logreg"},
           "train": {"batch_size": 10, "local_steps": 5},
           "selector": {"name": "uniform", "clients_per_round": args.per_round},
           "availability": {"name": args.availability}, "devices": {"name": args.devices},
           "eval": {"every": args.rounds}, "output": {"progress": False}}
    exp = expand(raw)[0]
    sim = Simulation(exp, data, seed=0, components={"executor": StubExecutor(None)})
    build_s = time.perf_counter() - t_build
    rss_built = peak_rss_mb()

    times = []
    selected = 0
    for r in range(args.rounds):
        t = time.perf_counter()
        row = sim.step(r)
        times.append(time.perf_counter() - t)
        selected += row["n_selected"]
    ms = 1e3 * np.asarray(times)
    print(f"clients={args.clients:,} rounds={args.rounds} per_round={args.per_round} "
          f"availability={args.availability} devices={args.devices}")
    print(f"build: {build_s:.2f} s (population, traces, devices)   peak RSS after build: {rss_built:.0f} MB")
    print(f"round step: median {np.median(ms):.2f} ms, mean {ms.mean():.2f} ms, p95 {np.percentile(ms, 95):.2f} ms"
          f"   (target <= 50 ms: ratio {np.median(ms) / 50:.2f})")
    print(f"peak RSS: {peak_rss_mb():.0f} MB   (target <= 1024 MB: ratio {peak_rss_mb() / 1024:.2f})")
    print(f"clients launched in total: {selected:,}; simulated time {sim.sim_time:,.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
