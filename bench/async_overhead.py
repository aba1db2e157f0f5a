"""What asynchronous rounds cost per client update, beside a synchronous run of the same number of updates.

Asynchronous bookkeeping (reports parked in flight and taken at the K-th arrival, staleness, the model versions
FedAsync keeps, the extra row columns) must cost at most 10 % more wall-clock per client update than a synchronous
run doing the same updates. Each pair below trains the same clients per round on the same world (synthetic
FedProx data, 200 clients, an MLP, FLASH devices, always available; evaluation only at the end), and the pairs
run interleaved, ``--repeats`` times each, so both sides share whatever else the machine does:

* FedBuff (``async``, C = K = 10) against FedAvg (``wait_all``, K = 10): 10 reports an update;
* FedAsync (``async``, C = 1, one report an update) against FedAvg with K = 1: one report an update.

Printed: the machine; per pair, the median wall seconds per client update of each side and the part of it spent
outside the clients' training (the train phase, the same local SGD in both, is timed apart: on a shared machine its
noise would hide a bookkeeping difference); the ratio of the whole, and the extra bookkeeping as a share of the
synchronous update.

    python bench/async_overhead.py --rounds 60 --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from executors import machine  # bench/executors.py: the machine line every bench prints

from turnout.runs.experiment import prepare
from turnout.sim.composition import expand
from turnout.sim.engine import Simulation

WORLD = {"name": "async-bench", "seeds": [0], "data": {"name": "synthetic", "num_clients": 200, "alpha": 0.5,
                                                         "beta": 0.5},
         "model": {"name": "mlp", "hidden": [64]}, "train": {"batch_size": 10, "local_steps": 5, "lr": 0.05},
         "devices": {"name": "flash"}, "output": {"progress": False, "plots": False}}


def config(clients: int, rounds: int, asynchronous: bool, buffer: int) -> dict:
    raw = copy.deepcopy(WORLD)
    raw.update(rounds=rounds, eval={"every": rounds},
               selector={"name": "uniform", "clients_per_round": clients})
    if asynchronous:
        raw["round_mode"] = {"name": "async", "buffer": buffer}
        raw["algorithm"] = {"name": "fedbuff"} if buffer > 1 else {"name": "fedasync"}
    else:
        raw["algorithm"] = {"name": "fedavg"}
    return raw


def seconds_per_update(raw: dict, data) -> tuple[float, float]:
    """(wall seconds, of which outside the clients' training) per client update that reached the model."""
    exp = expand(raw)[0]
    sim = Simulation(exp, data, 0)
    trained = [0.0]
    train = sim._train  # the train phase: the executor's local SGD, the same work in both modes

    def timed_train(*args, **kwargs):
        t0 = time.perf_counter()
        out = train(*args, **kwargs)
        trained[0] += time.perf_counter() - t0
        return out

    sim._train = timed_train
    with sim:
        t0 = time.perf_counter()
        rows = sim.advance()
        wall = time.perf_counter() - t0
    updates = max(1, sum(r["n_aggregated"] for r in rows))
    return wall / updates, (wall - trained[0]) / updates


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=60, help="FedAvg K = 10 / FedBuff updates (x10 for K = 1 pairs)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: bookkeeping is not hidden behind, or inflated by, thread pools)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    pairs = {"FedBuff C=K=10 vs FedAvg K=10": (config(10, args.rounds, True, 10), config(10, args.rounds, False, 0)),
             "FedAsync C=1 vs FedAvg K=1": (config(1, 10 * args.rounds, True, 1),
                                            config(1, 10 * args.rounds, False, 0))}
    exp = expand(next(iter(pairs.values()))[0])[0]
    data = prepare([exp]).dataset_for(exp, 0)
    print(machine())
    times: dict[tuple[str, int], list[tuple[float, float]]] = {(name, side): [] for name in pairs for side in (0, 1)}
    for _ in range(args.repeats):
        for name, sides in pairs.items():
            for side, raw in enumerate(sides):
                times[(name, side)].append(seconds_per_update(raw, data))
    for name in pairs:
        (a, a_book), (s, s_book) = [[statistics.median(t[i] for t in times[(name, side)]) for i in (0, 1)]
                                    for side in (0, 1)]
        print(f"{name}: per client update, async {a * 1e3:.3f} ms (bookkeeping {a_book * 1e3:.3f}), sync "
              f"{s * 1e3:.3f} ms (bookkeeping {s_book * 1e3:.3f}); ratio {a / s:.3f} in all, bookkeeping "
              f"{(a_book - s_book) / s:+.1%} of the sync update (target: at most +10 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
