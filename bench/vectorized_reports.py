"""The vectorized executor's reports: one subtraction per chunk against per-client hooks, side by side.

A cohort's reports under the default client rule (end − start from the global model) are made by one
subtraction per chunk, written into the reports; before, every client's ``client_update`` hook ran on its own
copy of the end point (a model-sized temporary and a copy per client), and on the CPU the start points were
stacked once per client. Both paths are still in the executor (a rule with its own ``client_update`` takes the
second), so this times them in one process on the same cohort, alternating, and checks that they make the same
reports bit for bit. The hooked path is forced by an algorithm whose hooks compute the same numbers but are its
own (``client_start`` returns a new view of the global model, so the start points are stacked as before).

    python bench/vectorized_reports.py                       # bench/pfl_cifar.yaml's cohort, 1 step of batch 1
    python bench/vectorized_reports.py --set train.local_steps=5 --set train.batch_size=10 --repeats 2
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from executors import machine  # bench/executors.py: the machine line every bench prints

from turnout.executors.base import ClientBatch
from turnout.executors.vectorized import VectorizedConfig, VectorizedExecutor
from turnout.runs.experiment import prepare
from turnout.sim.composition import load_experiment
from turnout.sim.engine import Simulation


def hooked(algorithm):
    """The same rule with hooks of its own: the per-client path (start points stacked, one hook call a client)."""
    base = type(algorithm)

    class Hooked(base):
        def client_start(self, client, global_params):
            return global_params.view(-1)  # a new tensor object: stacked as a start point of its own

        def client_update(self, client, start, end, grad_sum=None):
            return end - start

    out = copy.copy(algorithm)
    out.__class__ = Hooked
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="bench/pfl_cifar.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sets = ["runtime.device=cpu", "executor.compile=false", "train.local_steps=1", "train.batch_size=1", *args.set]
    (exp, *_rest) = load_experiment(args.config, sets)
    seed = exp.config.seeds[0]
    sim = Simulation(exp, prepare([exp]).dataset_for(exp, seed), seed)
    k = sim.selector.target()
    clients = torch.arange(k).numpy()
    steps = exp.train.steps_for(sim.population.n_train[clients])
    batch = ClientBatch(0, clients, steps, exp.train.lr, sim.params, sim.buffers, seed)
    executor = VectorizedExecutor(VectorizedConfig())
    rules = {"one subtraction a chunk": sim.algorithm, "per-client hooks": hooked(sim.algorithm)}
    print(f"machine: {machine()}")
    print(f"{args.config} {' '.join(sets)} | {k} clients, {sim.model.dim:,} parameters, torch {torch.__version__}")
    times: dict[str, list[float]] = {name: [] for name in rules}
    reports = {}
    for _ in range(args.repeats + 1):  # the first pass warms up (allocator, kernels) and is not counted
        for name, rule in rules.items():
            t0 = time.process_time()
            reports[name] = executor.run(batch, rule, sim.trainer, sim.data).updates
            times[name].append(time.process_time() - t0)
    a, b = reports.values()
    print(f"reports bitwise equal: {torch.equal(a, b)}")
    fast, slow = (statistics.median(t[1:]) for t in times.values())
    print(f"CPU s a cohort (median of {args.repeats}, process time): one subtraction a chunk {fast:.3f}, "
          f"per-client hooks {slow:.3f}: ratio {fast / slow:.2f}")
    sim.release()


if __name__ == "__main__":
    main()
