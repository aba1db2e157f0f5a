"""System-only what-if benchmark: ``turnout run --no-train`` over 1,000,000 clients and 200 rounds.

The whole command, as a user runs it: validation, the memory pre-flight, a population of sample
counts (lognormal sizes), generated FedScale-schema availability traces, FLASH devices, uniform
selection of K = 100 with a deadline (late reports kept in flight), exact byte and time
accounting for an MLP on 784 inputs, and the run folder's tables (``clients.csv`` has a row per
client). Prints the machine, the wall time and the peak memory (``getrusage``), and what the run
simulated, so the numbers can be pasted into the README.

    python bench/no_train.py                          # N = 1,000,000, 200 rounds
    python bench/no_train.py --clients 100000 --rounds 50
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path


def machine() -> str:
    """CPU model, cores and memory of this machine, as /proc says."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")) / 2**20
        memory = f", {mem:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        memory = ""
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores{memory}, Python {platform.python_version()}"


def experiment(clients: int, rounds: int) -> dict:
    return {
        "name": "million-what-if", "seeds": [0], "rounds": rounds,
        "data": {"name": "population", "num_clients": clients, "input_shape": [784], "num_classes": 10,
                 "sizes": {"distribution": "lognormal", "median": 50, "sigma": 1.0, "max": 5000}},
        "model": {"name": "mlp"},
        "train": {"batch_size": 20, "local_steps": 20},
        "selector": {"name": "uniform", "clients_per_round": 100},
        "availability": {"name": "trace"},
        "devices": {"name": "flash"},
        "round_mode": {"name": "deadline", "deadline_s": 10},
        "algorithm": {"name": "stale_aware", "rule": "refl"},
        "output": {"progress": False},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=200)
    args = p.parse_args(argv)

    import turnout

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        results = turnout.run(experiment(args.clients, args.rounds), out=Path(tmp) / "run", no_train=True,
                              quiet=True)
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        peak_mb, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        rounds, clients = results.rounds, results.clients
        summary = results.summary.iloc[0]
    print(f"machine: {machine()}")
    print(f"turnout run --no-train: clients={args.clients:,} rounds={args.rounds} per_round=100 "
          "availability=trace devices=flash round_mode=deadline(10 s) model=mlp(784-200-200-10)")
    print(f"wall time: {wall:.1f} s (validation, pre-flight, traces, {args.rounds} rounds, tables of "
          f"{len(clients):,} clients; CPU time {cpu:.1f} s, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores)   peak RSS: {peak_mb:,.0f} MB")
    print(f"simulated: {summary['sim_time_s']:,.0f} s; online per round {rounds['n_available'].mean():,.0f} on "
          f"average; aggregated {int(rounds['n_aggregated'].sum()):,} of {int(rounds['n_selected'].sum()):,} "
          f"launched ({int(rounds['n_stale'].sum()):,} late but used); wasted "
          f"{summary['wasted_s'] / max(summary['resource_s'], 1e-9):.1%} of {summary['resource_s']:,.0f} "
          f"client-seconds; {summary['bytes_down'] / 1e9:.2f} GB down, {summary['bytes_up'] / 1e9:.2f} GB up; "
          f"tau_max {summary['tau_max']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
