"""Where a round's time goes: each engine phase's wall time, and torch.profiler's top operations.

An experiment file's rounds are run as ``turnout run`` runs them (evaluation included); after
``--warmup`` rounds (compilation, cuDNN's timing, caches) ``--rounds`` rounds are timed phase by phase
(open, train, settle, aggregate, account, evaluation) with the device synchronised at each phase's
end, so a phase's figure includes the device work it queued. Then the same number of rounds runs
under ``torch.profiler`` and the operations with the most self time are printed (CPU, and CUDA where
training runs on a GPU); on a GPU, the host-device synchronisations of each of ``--rounds`` more rounds are
counted in between (torch's sync debug mode). Written to find why a pfl-like GPU round (``bench/pfl_cifar.yaml``) takes
about 0.1 s when its vmapped steps take a few ms each (docs/gpu.md).

    python bench/profile_round.py bench/pfl_cifar.yaml --rounds 20
    python bench/profile_round.py bench/pfl_cifar.yaml --set runtime.device=cpu --set executor.compile=false

``--clock cpu`` reads the process's CPU time instead of the wall clock: on a CPU that other work shares, what
each phase cost this process.

The aggregate phase is also printed beside its floor, ``weights @ updates`` over the same cohort's reports timed in
the same process (the one product a FedAvg aggregation cannot avoid); on a CPU, without the cost of training:

    python bench/profile_round.py bench/pfl_cifar.yaml --set runtime.device=cpu --set "executor={name: sequential}" \
        --set train.local_steps=1 --set train.batch_size=2 --warmup 2 --rounds 10 --top 5
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections import defaultdict

import torch
from executors import machine  # bench/executors.py: the machine line every bench prints

from turnout.runs.experiment import prepare
from turnout.sim.composition import load_experiment
from turnout.sim.engine import Simulation
from turnout.training.local_sgd import LocalTrainer
from turnout.training.stacked_sgd import StackedTrainer

PHASES = ("_open", "_train", "_settle", "_aggregate", "_account", "evaluate")
#: what a phase's time is read from: wall time (``--clock wall``), or the process's CPU time over all its threads
#: (``--clock cpu``: on a CPU shared with other work, what the round itself cost, whatever else ran)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def _sync(sim: Simulation) -> None:
    if sim.trainer.device.type == "cuda":
        torch.cuda.synchronize(sim.trainer.device)


def timed_phases(sim: Simulation, times: dict[str, list[float]], floor=None) -> None:
    """Wrap this simulation's phase methods (on the instance only) so each call's wall time is recorded; with
    ``floor`` (a callable), it is timed right after every aggregate phase too (``times["floor"]``), so the two
    share whatever else the machine is doing at that moment."""
    for name in PHASES:
        method = getattr(sim, name)

        def wrapper(*args, _method=method, _name=name, **kwargs):
            t0 = clock()
            out = _method(*args, **kwargs)
            _sync(sim)
            times[_name].append(clock() - t0)
            if _name == "_aggregate" and floor is not None:
                t0 = clock()
                floor()
                _sync(sim)
                times["floor"].append(clock() - t0)
            return out
        setattr(sim, name, wrapper)


def timed_training(sim: Simulation, times: dict[str, list[float]]):
    """Wrap the trainers' ``train`` (per client, and the vmapped chunk) so the local training inside the train
    phase is timed on its own (``times["training"]``, device synchronised); returns the function that unwraps them.
    What the train phase spends outside them is the engine around training (hooks, stacking, copies, pricing)."""
    originals = {cls: cls.train for cls in (LocalTrainer, StackedTrainer)}
    for cls, method in originals.items():
        def wrapper(self, *args, _method=method, **kwargs):
            t0 = clock()
            out = _method(self, *args, **kwargs)
            _sync(sim)
            times["training"].append(clock() - t0)
            return out
        cls.train = wrapper
    return lambda: [setattr(cls, "train", method) for cls, method in originals.items()]


def synchronisations(sim: Simulation, rounds: int) -> list[int]:
    """How many times each of the next ``rounds`` rounds made the host wait for the GPU (``.item()``, a copy to the
    host, ``bool`` of a tensor...), counted by torch's sync debug mode, which warns at every such call."""
    counts = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sim.advance(until=sim.next_round + 1)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        counts.append(sum("synchroniz" in str(w.message) for w in caught))
    return counts


def weighted_sum_floor(sim: Simulation, k: int):
    """The one product a FedAvg aggregation cannot avoid, ``weights @ updates`` over the cohort's ``k`` reports on
    the device the reports live on, as a callable: the floor the aggregate phase is judged against."""
    device = sim.trainer.device if sim.report_device is not None else torch.device("cpu")
    updates = torch.randn(k, sim.model.dim, device=device)
    w = torch.rand(k, dtype=updates.dtype, device=device)
    return lambda: (w / w.sum()) @ updates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--top", type=int, default=25, help="torch.profiler's top operations (0: no profiled rounds)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall time, or CPU time of this process (a shared CPU; meaningless for GPU work)")
    args = ap.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    (exp, *_rest) = load_experiment(args.config, args.set)
    data = prepare([exp]).dataset_for(exp, exp.config.seeds[0])
    sim = Simulation(exp, data, exp.config.seeds[0])
    device = sim.trainer.device
    print(f"machine: {machine()}")
    print(f"profile of {args.config} {' '.join(args.set)} | device {device} | clock {args.clock}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
          + f" | torch {torch.__version__} | parameters {sim.model.dim:,}")
    t0 = clock()
    sim.advance(until=args.warmup)
    _sync(sim)
    print(f"warm-up: {args.warmup} rounds in {clock() - t0:.2f} s")
    times: dict[str, list[float]] = defaultdict(list)
    k = sim.selector.target()
    timed_phases(sim, times, weighted_sum_floor(sim, k))
    untime = timed_training(sim, times)
    t0 = clock()
    sim.advance(until=args.warmup + args.rounds)
    _sync(sim)
    wall = (clock() - t0) / args.rounds
    untime()
    print(f"{args.rounds} rounds: {wall * 1e3:.2f} ms a round")
    for name in PHASES:
        ts = times.get(name, [])
        if ts:
            print(f"  {name.lstrip('_'):<10} {sum(ts) / args.rounds * 1e3:8.2f} ms a round  (median call "
                  f"{statistics.median(ts) * 1e3:.2f} ms, {len(ts)} calls)")
    training = sum(times.get("training", [])) / args.rounds
    evaluation = sum(times.get("evaluate", [])) / args.rounds
    own = wall - sum(times.get("floor", [])) / args.rounds  # the floor's products are timed inside the rounds
    engine = own - training - evaluation
    print(f"a round ({own * 1e3:.2f} ms, the floor's products left out): training {training * 1e3:.2f} ms "
          f"({training / own:.0%}), evaluation {evaluation * 1e3:.2f} ms "
          f"({evaluation / own:.0%}), the engine around them {engine * 1e3:.2f} ms ({engine / own:.0%}; of it "
          f"{(sum(times.get('_train', [])) / args.rounds - training) * 1e3:.2f} ms in the train phase outside the "
          f"trainer, {len(times.get('training', []))} trainer calls)")
    if times.get("_aggregate"):
        agg, floor = statistics.median(times["_aggregate"]), statistics.median(times["floor"])
        paired = statistics.median(a / f for a, f in zip(times["_aggregate"], times["floor"]))
        print(f"aggregate phase against its floor (medians; each floor timed right after its round's phase): "
              f"{agg * 1e3:.2f} ms vs weights @ updates ({k} x {sim.model.dim:,}) {floor * 1e3:.2f} ms: "
              f"{agg / floor:.2f}x (median of the per-round ratios {paired:.2f}x)")
    if device.type == "cuda":  # the goal: at most one host-device synchronisation a round
        done = sim.next_round
        per_round = synchronisations(sim, args.rounds)
        print(f"host-device synchronisations (torch.cuda sync debug mode) in rounds {done}-{sim.next_round - 1}: "
              f"{per_round} (mean {statistics.mean(per_round):.1f} a round)")
    if args.top > 0:  # --top 0: no profiled rounds
        profiled(sim, args.rounds, args.top)
    sim.release()


def profiled(sim: Simulation, rounds: int, top: int) -> None:
    """The next ``rounds`` rounds under torch.profiler: its ``top`` operations by self time."""
    cuda = sim.trainer.device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        sim.advance(until=sim.next_round + rounds)
        _sync(sim)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))
    if cuda:
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=top))


if __name__ == "__main__":
    main()
