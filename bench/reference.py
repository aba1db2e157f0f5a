"""The sequential executor against a plain PyTorch FedAvg loop on the same work: wall time and memory.

The sequential executor is the reference every other executor is checked against, so what it costs
over the loop a researcher would write by hand is the simulator's own overhead (selection, keyed
random streams, the algorithm's hooks, the byte and time ledger, the per-client columns). This
prints that cost as ratios measured side by side in one run.

The work, the same on both sides: FedAvg, 10 of 100 clients a round (drawn uniformly), each 10
local SGD steps of batch 32 drawn from reshuffled epochs of its 320 rows, the new model the
sample-weighted mean of the clients' models; no evaluation. The plain loop is idiomatic PyTorch:
one ``nn.Module`` per side, ``load_state_dict`` of the global model, a fresh ``torch.optim.SGD``,
``zero_grad``/``backward``/``step``, and a running weighted sum of the parameters. Both build the
same architecture with the same initial weights from the same data.

* ``wall``: one process per model, pinned to one core, holds both sides; after a warm-up round
  each, it times ``--repeats`` blocks of ``--rounds`` rounds of each side in ABBA order (so a
  drifting host load hits both alike) and the medians of the blocks are compared. (Separate
  processes were tried first: on this VM two processes running the same code differ by up to
  15 %, more than the difference being measured.)
* ``RSS in rounds``: one fresh process per side, so the memory is its own: its resident
  high-water mark during ``--rounds`` rounds (the kernel's mark is reset just before them through
  ``/proc/self/clear_refs``): imports, the data, the model and what training holds. Data loading
  peaks higher before (the same code on both sides), so it is left out;
* ``added``: that mark minus the resident memory just before the rounds — what the rounds
  themselves hold on top of the model and data.

    python bench/reference.py                       # logreg, mlp and cnn (~4 min on 2 cores)
    python bench/reference.py --models mlp --rounds 5 --repeats 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

import numpy as np
import torch
from executors import MODELS, SAMPLES, TRAIN, _load, machine, trimmed  # bench/executors.py

PER_ROUND, LR = 10, 0.05


def _raw(model: str, rounds: int) -> dict:
    m = MODELS[model]
    return {"name": "reference", "rounds": rounds, "data": m["data"], "model": m["model"],
            "train": {**TRAIN, "lr": LR}, "algorithm": {"name": "fedavg"},
            "selector": {"name": "uniform", "clients_per_round": PER_ROUND, "weighting": "n_samples"},
            "executor": {"name": "sequential"}, "eval": {"every": 10**6},
            "output": {"progress": False, "plots": False}}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> bool:
    """Reset the kernel's resident high-water mark (Linux ≥ 4.0), so the next peak is training's own."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_since_reset_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _engine(exp, data) -> Callable[[], None]:
    """One engine round per call (the simulation stays open: the process ends when measuring does)."""
    from turnout.sim.engine import Simulation

    sim = Simulation(exp, data, 0)
    rounds = iter(range(exp.config.rounds))
    return lambda: sim.step(next(rounds))


def _plain(exp, data) -> Callable[[], None]:
    """One round of FedAvg per call, as a PyTorch user writes it: modules, state dicts, torch.optim."""
    from turnout.sim.engine import build_model

    glob = build_model(exp, data, 0).module
    local = build_model(exp, data, 0).module
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    offsets, clients = data.train_offsets, data.num_clients
    rng = np.random.default_rng(0)

    def one_round() -> None:
        chosen = rng.choice(clients, PER_ROUND, replace=False)
        total, acc = 0, [torch.zeros_like(p) for p in glob.parameters()]
        for c in chosen:
            local.load_state_dict(glob.state_dict())
            opt = torch.optim.SGD(local.parameters(), lr=LR)
            lo, n = int(offsets[c]), int(offsets[c + 1] - offsets[c])
            perm, pos = rng.permutation(n), 0
            for _ in range(TRAIN["local_steps"]):
                if pos >= n:
                    perm, pos = rng.permutation(n), 0
                idx = torch.from_numpy(lo + perm[pos:pos + TRAIN["batch_size"]])
                pos += TRAIN["batch_size"]
                loss = torch.nn.functional.cross_entropy(local(x[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                for a, p in zip(acc, local.parameters()):
                    a.add_(p, alpha=n)
            total += n
        with torch.no_grad():
            for g, a in zip(glob.parameters(), acc):
                g.copy_(a / total)

    return one_round


def _setup(model: str, rounds: int):
    from turnout.runs.experiment import prepare
    from turnout.sim.composition import expand

    torch.set_num_threads(1)  # the simulation's default (runtime.torch_threads: 1)
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})  # one core, the same for every process
    exp = expand(_raw(model, rounds))[0]
    return exp, trimmed(prepare([exp]).dataset_for(exp, 0), SAMPLES)


def _timed(one_round: Callable[[], None], rounds: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        one_round()
    return time.perf_counter() - t0


def child_wall(model: str, rounds: int, repeats: int) -> dict:
    """Both sides in this process, blocks of ``rounds`` rounds interleaved ABBA; seconds per block."""
    exp, data = _setup(model, 1 + rounds * repeats)
    sides = {"plain": _plain(exp, data), "engine": _engine(exp, data)}
    for one_round in sides.values():
        one_round()  # warm-up
    walls: dict[str, list[float]] = {"plain": [], "engine": []}
    for rep in range(repeats):
        for side in (("plain", "engine") if rep % 2 == 0 else ("engine", "plain")):
            walls[side].append(_timed(sides[side], rounds))
    return walls


def child_memory(side: str, model: str, rounds: int) -> dict:
    """One side alone in this (fresh) process: resident memory during ``rounds`` rounds."""
    if not _reset_peak():
        raise SystemExit("bench/reference.py reads memory from /proc/self (clear_refs, status): Linux >= 4.0 only")
    exp, data = _setup(model, 1 + rounds)
    one_round = (_engine if side == "engine" else _plain)(exp, data)
    one_round()  # warm-up
    before, _ = _rss_mb(), _reset_peak()
    _timed(one_round, rounds)
    peak = _peak_since_reset_mb()
    return {"peak_mb": peak, "added_mb": max(0.0, peak - before)}


def measure(what: str, model: str, rounds: int, repeats: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", what, "--models", model, "--rounds", str(rounds),
                          "--repeats", str(repeats)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{what} {model}: the measuring process failed:\n{out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="logreg,mlp,cnn")
    p.add_argument("--rounds", type=int, default=3, help="rounds per timed block")
    p.add_argument("--repeats", type=int, default=24, help="timed blocks per side (their medians are compared)")
    p.add_argument("--child", choices=["wall", "engine", "plain"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        out = (child_wall(args.models, args.rounds, args.repeats) if args.child == "wall"
               else child_memory(args.child, args.models, args.rounds))
        print(json.dumps(out))
        return 0
    torch.set_num_threads(1)  # as in the measuring processes (so the machine line says so)
    print(f"machine: {machine()}")
    print(f"work: FedAvg, {PER_ROUND} of 100 clients a round, {TRAIN['local_steps']} steps of batch "
          f"{TRAIN['batch_size']} on {SAMPLES} rows each, no evaluation")
    print(f"wall: medians of {args.repeats} blocks of {args.rounds} rounds per side, interleaved ABBA in one "
          f"process on one core; memory: one process per side")
    print(f"load average at start (1/5/15 min): {_load()}")
    print()
    head = f"{'model':8} {'plain s/round':>13} {'engine s/round':>14} {'wall ratio':>10} {'min..max':>11}  " \
           f"{'RSS in rounds MB plain / engine':>31} {'ratio':>6}  {'added MB plain / engine':>23}"
    print(head)
    print("-" * len(head))
    for model in args.models.split(","):
        walls = measure("wall", model, args.rounds, args.repeats)
        mem = {side: measure(side, model, args.rounds, 1) for side in ("plain", "engine")}
        plain, engine = (statistics.median(walls[s]) / args.rounds for s in ("plain", "engine"))
        ratios = [e / pl for e, pl in zip(walls["engine"], walls["plain"])]
        print(f"{model:8} {plain:13.4f} {engine:14.4f} {engine / plain:10.2f} {min(ratios):5.2f}..{max(ratios):<5.2f}  "
              f"{mem['plain']['peak_mb']:22.0f} / {mem['engine']['peak_mb']:<6.0f} "
              f"{mem['engine']['peak_mb'] / mem['plain']['peak_mb']:6.2f}  "
              f"{mem['plain']['added_mb']:14.1f} / {mem['engine']['added_mb']:<6.1f}", flush=True)
    print(f"load average at end: {_load()}")
    print("wall ratio = engine / plain (below 1: the engine is faster); min..max: of the block pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
