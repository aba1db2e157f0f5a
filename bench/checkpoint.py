"""What durable runs cost: wall-time overhead of checkpointing, and the size of one checkpoint.

Runs the same experiment three ways, interleaved (A B C A B C …) so that machine load hits all
alike, and prints median wall times and their ratios to the run without periodic checkpoints:

* ``none``     — rows streamed to disk, no periodic checkpoint (the floor);
* ``default``  — the default policy (``runtime.checkpoint_every_s``, 120 s);
* ``every``    — a checkpoint after every round (the worst case).

Workloads: the quickstart (FedAvg, logistic regression, Synthetic, 3 variants) and a Fashion-MNIST
CNN run (``cnn_fedavg``, 100 clients, 10 per round, 10 local steps of batch 32). It also saves one
checkpoint of each workload's unit and prints its size on disk and the time it took.

    python bench/checkpoint.py                     # both workloads, 3 repetitions
    python bench/checkpoint.py --only quickstart --repeats 1
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from turnout.config.loader import read_yaml  # noqa: E402
from turnout.runs import checkpoint  # noqa: E402
from turnout.runs.experiment import prepare, run_experiment  # noqa: E402
from turnout.sim.composition import expand  # noqa: E402

POLICIES = {"none": {"runtime.checkpoint_every_s": None},
            "default": {},
            "every": {"runtime.checkpoint_every_rounds": 1, "runtime.checkpoint_every_s": None}}
CNN = {"name": "bench-cnn", "seeds": [0], "rounds": 12,
       "data": {"name": "fashion_mnist", "num_clients": 100, "partition": {"name": "iid"}},
       "model": {"name": "cnn_fedavg"}, "train": {"batch_size": 32, "local_steps": 10, "lr": 0.05},
       "selector": {"name": "uniform", "clients_per_round": 10}, "eval": {"every": 6},
       "output": {"progress": False, "plots": False}}


def workloads(only: str | None) -> dict[str, dict]:
    quick = read_yaml(ROOT / "experiments" / "quickstart.yaml")
    quick = {**quick, "rounds": 150, "output": {"progress": False, "plots": False},
             "eval": {**quick.get("eval", {}), "centralized_baseline": False}}
    out = {"quickstart": quick, "fmnist_cnn": CNN}
    return {k: v for k, v in out.items() if only in (None, k)}


def timed_run(raw: dict, overrides: dict, folder: Path) -> float:
    variants = expand(raw, overrides)
    t = time.perf_counter()
    run_experiment(variants, {"raw": raw, "overrides": overrides}, out=folder)
    return time.perf_counter() - t


def one_checkpoint(raw: dict, folder: Path) -> tuple[int, float]:
    """(bytes on disk, seconds) of one checkpoint of the first unit after a third of its rounds."""
    from turnout.sim.engine import Simulation

    exp = expand(raw)[0]
    plan = prepare([exp])
    sim = Simulation(exp, plan.dataset_for(exp, exp.config.seeds[0]), exp.config.seeds[0])
    sim.advance(until=max(1, exp.config.rounds // 3))
    t = time.perf_counter()
    path = checkpoint.save(folder, sim.state_dict(), {"next_round": sim.next_round})
    seconds = time.perf_counter() - t
    sim.release()
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()), seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["quickstart", "fmnist_cnn"], default=None)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"machine: {platform.node()} {cpu}, {torch.get_num_threads()} torch thread, torch {torch.__version__}, "
          f"python {platform.python_version()}")
    for name, raw in workloads(args.only).items():
        times: dict[str, list[float]] = {k: [] for k in POLICIES}
        with tempfile.TemporaryDirectory(prefix="turnout-bench-") as tmp:
            for rep in range(args.repeats):
                for policy, overrides in POLICIES.items():
                    folder = Path(tmp) / f"{name}-{policy}-{rep}"
                    times[policy].append(timed_run(raw, overrides, folder))
                    shutil.rmtree(folder, ignore_errors=True)
            size, secs = one_checkpoint(raw, Path(tmp) / "one")
        units = len(expand(raw)) * len(raw.get("seeds", [0]))
        print(f"\n{name}: {units} unit(s), {raw['rounds']} rounds each; {args.repeats} interleaved runs per policy "
              "(min is the least disturbed by other load, median for reference)")
        for policy in POLICIES:
            lo, med = min(times[policy]), statistics.median(times[policy])
            print(f"  checkpoints {policy:<8} min {lo:8.2f} s  median {med:8.2f} s   ratio to none: "
                  f"min {lo / min(times['none']):.3f}, median {med / statistics.median(times['none']):.3f}")
        every_s = 120.0  # the default runtime.checkpoint_every_s
        print(f"  one checkpoint: {size / 1e6:.2f} MB on disk, written in {secs * 1e3:.0f} ms; under the default "
              f"policy (one per {every_s:.0f} s of a unit's work) that is {secs / every_s:.2%} of the wall time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
