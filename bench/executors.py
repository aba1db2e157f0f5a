"""Executors side by side: seconds per round and the ratio to the sequential executor, in one run.

Three models on two workloads, every executor interleaved (so a load change on a shared machine
hits all of them alike):

* ``logreg`` — the quickstart task: Synthetic(0.5, 0.5) (FedProx variant), logistic regression,
  ``lr 0.2`` with exponential decay, FedAvg with server momentum 0.5, weighting by samples;
* ``mlp`` — MLP(200) on Fashion-MNIST;
* ``cnn`` — FedSUM's MNIST CNN (``cnn_fedsum_mnist``) on Fashion-MNIST's 28×28 images.

Workload W: 100 clients × 320 training samples, 10 clients per round, 10 local steps of batch
32; W100: the same with all 100 clients every round. A timed round is the engine's whole round
step (selection, training, compression, aggregation, accounting); evaluation is left out. Each
simulation first runs one warm-up round (the parallel pool starts, ``vmap`` warms up), reported
apart. Every figure is the median over ``--repeats`` interleaved repeats of the mean over
``--rounds`` rounds.

    python bench/executors.py                           # everything on the CPU (~15 min on 2 cores)
    python bench/executors.py --models logreg --workloads W100 --repeats 5
    python bench/executors.py --device cuda             # adds sequential and vectorized on the GPU
    python bench/executors.py --ray                     # adds the Ray executor on a two-node local Ray cluster
    python bench/executors.py --ray --ray-only --models logreg   # just Ray against sequential, and its overhead

With two or more cores and W100 in the workloads it also prints each model's *two-process ceiling*:
two plain PyTorch processes training half of W100's clients each, at once, as a share of one
process training them all — what the machine's cores give when nothing else is in the way, so a
``parallel`` figure above 0.5 can be told apart from a machine whose two cores do not double compute.

``--ray`` runs its columns on a two-node Ray cluster started here (``ray.cluster_utils.Cluster``: a head
and a worker node, each its own raylet and object store, half the cores each with two slots a core;
each ray column holds one actor per core, so its actors sit on both nodes): ``ray``, whose actors
send every client's end point back, and ``ray+sums`` (``partial_sums``), whose actors keep the
reports and send one weighted sum per chunk. It ends with the executor's overhead, for both: per
round, its time beyond the busiest actor's own training, over cohorts of 10–100 one-step logreg
clients, fitted as a fixed cost per round plus a cost per client.

``--device cuda`` adds two columns with ``runtime.device: cuda`` (local training on the GPU,
aggregation and the rest on the CPU): ``sequential(cuda)`` and ``vectorized(cuda)``; ratios stay
relative to the CPU sequential executor, and the GPU targets are printed at the end. ``--ray``
adds ``executor: ray`` in a second pass, after the other columns, with its own sequential
baseline: Ray's daemons and idle workers, once started, slow the ``parallel`` workers that share
the cores with them (the CNN on W100: 2.6–2.9 s a round without Ray started, 3.0–3.8 s with it).
Ray's actors are not this process's children, so the ``others`` column counts them as other
processes.

GPU rows (``cnn_fedavg`` and ``resnet18_gn`` on ``synthetic_images``, CIFAR-shaped 3×32×32 uint8
images, 10 classes; ``lr 0.05``, FedAvg; W and W100 as above, 100 clients × 320 images) run only
the columns ``sequential(cuda)`` and ``vectorized(cuda)``; workload W1000 (``cnn_fedavg`` only: a
population of 1,000 clients × 50 images, all 1,000 every round, the same 10 steps of batch 32)
runs ``vectorized(cuda)`` alone, as a sequential round there costs ten W100 rounds. With
``--device cuda`` they are added to the CPU models' rows; ``--gpu-rows`` runs them alone, and
with ``--device cpu`` runs the same code on the CPU (a smoke test: no verdict on the targets).
``--gpu-only`` skips every CPU column (the GPU machine is lent by the minute): the CPU models get
the two GPU columns too, and each GPU figure is set against the CPU sequential figure recorded in
``bench/cpu_reference.json`` (the table of ``docs/performance.md``). On CUDA a ``GPU MiB`` column
gives the peak memory allocated during a column's timed rounds (``torch.cuda.max_memory_allocated``);
on a GPU the vectorized executor sizes its chunks by the device's free memory (its ``device_share``).

    python bench/executors.py --device cuda --gpu-only --rounds 3 --repeats 1     # the GPU run (~5 min)
    python bench/executors.py --device cpu --gpu-rows --models cnn_fedavg --workloads W --rounds 1 --repeats 1

The mlp and cnn rows read Fashion-MNIST (``--fmnist-path``, default Debian's
``/usr/share/datasets/fashion-mnist``); where it is missing they are skipped with a line saying so.
The targets of the GPU issue are printed at the end, met or NOT met, from the measured figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from turnout.core.errors import ConfigError
from turnout.data.federated import FederatedDataset, offsets_from_counts
from turnout.runs.experiment import prepare
from turnout.sim.composition import expand
from turnout.sim.engine import Simulation, build_model

SAMPLES, CLIENTS = 320, 100
TRAIN = {"batch_size": 32, "local_steps": 10}
MODELS = {
    "logreg": {"data": {"name": "synthetic", "alpha": 0.5, "beta": 0.5, "variant": "fedprox",
                        "num_clients": CLIENTS, "min_samples": SAMPLES * 10 // 9 + 1},  # 90 % train
               "model": {"name": "logreg"},
               "train": {"lr": 0.2, "lr_schedule": {"name": "exponential", "gamma": 0.995}},
               "algorithm": {"name": "fedavg", "server_momentum": 0.5}},
    "mlp": {"data": {"name": "fashion_mnist", "num_clients": CLIENTS, "client_test_fraction": 0.0},
            "model": {"name": "mlp", "hidden": [200]}, "train": {"lr": 0.05}, "algorithm": {"name": "fedavg"}},
    "cnn": {"data": {"name": "fashion_mnist", "num_clients": CLIENTS, "client_test_fraction": 0.0},
            "model": {"name": "cnn_fedsum_mnist"}, "train": {"lr": 0.05}, "algorithm": {"name": "fedavg"}},
}
#: CIFAR-shaped images for the GPU rows (W, W100: 100 clients x 320 rows, as the CPU rows are trimmed to)
IMAGES = {"name": "synthetic_images", "num_clients": CLIENTS, "samples_per_client": SAMPLES, "server_test": 512}
MODELS.update({
    "cnn_fedavg": {"data": IMAGES, "model": {"name": "cnn_fedavg"}, "train": {"lr": 0.05},
                   "algorithm": {"name": "fedavg"}},
    "resnet18_gn": {"data": IMAGES, "model": {"name": "resnet18_gn"}, "train": {"lr": 0.05},
                    "algorithm": {"name": "fedavg"}},
})
CPU_MODELS = ("logreg", "mlp", "cnn")
#: models measured on the GPU only (their CPU columns would take minutes a round)
GPU_MODELS = ("cnn_fedavg", "resnet18_gn")


@dataclass(frozen=True)
class Workload:
    per_round: int
    clients: int = CLIENTS
    samples: int = SAMPLES
    #: the models it is defined for (None: every model)
    models: tuple[str, ...] | None = None


WORKLOADS = {"W": Workload(10), "W100": Workload(100),
             "W1000": Workload(1000, clients=1000, samples=50, models=("cnn_fedavg",))}
EXECUTORS = ["sequential", "vectorized", "parallel", "auto"]
#: CPU sequential figures of the CPU models (docs/performance.md), for --gpu-only
CPU_REFERENCE = Path(__file__).with_name("cpu_reference.json")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = ", no GPU"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = (f", GPU {torch.cuda.get_device_name(0)} ({props.total_memory / 2**30:.0f} GiB, "
               f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s))")
    return (f"{platform.platform()} | CPU {cpu}, {cores} cores available{gpu} | torch {torch.__version__}, "
            f"{torch.get_num_threads()} thread(s) in the driver, 1 per parallel worker | python "
            f"{platform.python_version()}")


def _load() -> str:
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


def _cpu_seconds() -> tuple[float, float]:
    """(CPU-seconds every process of the machine has run, CPU-seconds of this process and its children).

    Their difference over a timed block is what other processes (other users' jobs, other VMs'
    steal) took from the cores meanwhile: the context a parallel executor's figure needs.
    """
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    machine = (user + nice + system + irq + softirq + steal) / tick
    me = os.getpid()
    mine = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(pid) == me or int(stat[1]) == me:  # this process and its workers
            mine += (int(stat[11]) + int(stat[12])) / tick
    return machine, mine


def trimmed(data: FederatedDataset, n: int) -> FederatedDataset:
    """Every client's first ``n`` training rows (clients with fewer are an error: W needs exactly ``n``)."""
    counts = np.diff(data.train_offsets)
    if (counts < n).any():
        raise SystemExit(f"{data.name}: some clients hold fewer than {n} training rows")
    rows = np.concatenate([np.arange(a, a + n) for a in data.train_offsets[:-1]])
    zero = np.zeros(data.num_clients + 1, np.int64)
    return FederatedDataset(name=data.name, x_train=data.x_train[rows], y_train=data.y_train[rows],
                            train_offsets=offsets_from_counts(np.full(data.num_clients, n)),
                            x_test=data.x_test[:0], y_test=data.y_test[:0], test_offsets=zero,
                            x_server_test=data.x_server_test[:512], y_server_test=data.y_server_test[:512],
                            num_classes=data.num_classes, input_shape=data.input_shape,
                            input_scaling=data.input_scaling)


def experiment(model: str, per_round: int, executor: dict, rounds: int, device: str = "cpu", train: dict | None = None,
               workload: Workload | None = None):
    m = MODELS[model]
    data = dict(m["data"])
    if workload is not None and data["name"] == "synthetic_images":  # the population the workload needs
        data.update(num_clients=workload.clients, samples_per_client=workload.samples)
    raw = {"name": "bench", "rounds": rounds, "data": data, "model": m["model"],
           "train": {**TRAIN, **m["train"], **(train or {})}, "algorithm": m["algorithm"],
           "selector": {"name": "uniform", "clients_per_round": per_round, "weighting": "n_samples"},
           "executor": executor, "eval": {"every": 10**6}, "output": {"progress": False, "plots": False},
           "runtime": {"device": device}}
    return expand(copy.deepcopy(raw))[0]


def label(column: tuple[dict, str]) -> str:
    executor, device = column
    name = "vec+compile" if executor.get("compile") else "ray+sums" if executor.get("partial_sums") \
        else executor["name"]
    return name + (f"({device})" if device != "cpu" else "")


def _on_cuda(device: str) -> bool:
    return device.startswith("cuda")


def _sync(device: str) -> None:
    """Wait for the GPU's queued work, so a wall-clock interval holds all of it (nothing to do on the CPU)."""
    if _on_cuda(device):
        torch.cuda.synchronize()


def bench(model: str, workload: str, executors: list[tuple[dict, str]], rounds: int, repeats: int) -> list[dict]:
    """``executors``: ``(executor block, runtime.device)`` columns; ratios are to the first, a sequential one
    (blank when there is none). On CUDA each column's peak allocated GPU memory over its timed rounds is kept."""
    w = WORKLOADS[workload]
    exps = [experiment(model, w.per_round, ex, 1 + rounds * repeats, dev, workload=w) for ex, dev in executors]
    data = trimmed(prepare(exps[:1]).dataset_for(exps[0], 0), w.samples)
    sims = [Simulation(exp, data, 0) for exp in exps]
    warm, times, others = [], [[] for _ in sims], [[] for _ in sims]
    peaks: list[float | None] = [None for _ in sims]
    try:
        for sim, (_, dev) in zip(sims, executors):
            t0 = time.perf_counter()
            sim.step(0)
            _sync(dev)
            warm.append(time.perf_counter() - t0)
        for rep in range(repeats):  # interleaved: every executor's block of rounds in turn
            for i, (sim, (_, dev)) in enumerate(zip(sims, executors)):
                first = 1 + rep * rounds
                if _on_cuda(dev):
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                machine0, mine0 = _cpu_seconds()
                t0 = time.perf_counter()
                for r in range(first, first + rounds):
                    sim.step(r)
                _sync(dev)
                wall = time.perf_counter() - t0
                machine1, mine1 = _cpu_seconds()
                if _on_cuda(dev):
                    peaks[i] = max(peaks[i] or 0.0, torch.cuda.max_memory_allocated() / 2**20)
                times[i].append(wall / rounds)
                others[i].append(max(0.0, (machine1 - machine0) - (mine1 - mine0)) / wall)
        summaries = [sim.executor.summary() for sim in sims]
    finally:
        for sim in sims:
            sim.release()
    out = []
    base = statistics.median(times[0]) if executors[0][0]["name"] == "sequential" else None
    for ex, wu, t, o, s, peak in zip(executors, warm, times, others, summaries, peaks):
        med = statistics.median(t)
        out.append({"model": model, "workload": workload, "executor": label(ex), "name": ex[0]["name"],
                    "device": ex[1], "s_round": med, "ratio": med / base if base else None,
                    "speedup": base / med if base else None, "warmup_s": wu, "spread": (min(t), max(t)),
                    "others": statistics.median(o), "auto": s.get("auto_executor", ""), "gpu_mib": peak})
    return out


def _plain_training(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, clients: range) -> float:
    """Seconds a plain PyTorch loop takes to train ``clients``' W steps (one thread; runs in a pool process)."""
    torch.set_num_threads(1)
    opt = torch.optim.SGD(module.parameters(), lr=0.05)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for c in clients:
        for _ in range(TRAIN["local_steps"]):
            idx = torch.from_numpy(c * SAMPLES + rng.integers(0, SAMPLES, TRAIN["batch_size"]))
            loss = torch.nn.functional.cross_entropy(module(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return time.perf_counter() - t0


def ceiling(model: str, repeats: int) -> float:
    """What two cores can give at best: two processes each training half of W100's clients at once, against
    one process training them all (plain PyTorch, no simulator) — the ratio a 2-worker executor cannot beat."""
    import multiprocessing

    exp = experiment(model, CLIENTS, {"name": "sequential"}, 1)
    data = trimmed(prepare([exp]).dataset_for(exp, 0), SAMPLES)
    module = build_model(exp, data, 0).module
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    halves = [range(0, CLIENTS // 2), range(CLIENTS // 2, CLIENTS)]
    ratios = []
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.starmap(_plain_training, [(module, x, y, range(1))] * 2)  # start both processes, warm up
        for _ in range(repeats):
            t0 = time.perf_counter()
            pool.apply(_plain_training, (module, x, y, range(CLIENTS)))
            alone = time.perf_counter() - t0
            t0 = time.perf_counter()
            pool.starmap(_plain_training, [(module, x, y, h) for h in halves])
            ratios.append((time.perf_counter() - t0) / alone)
    return statistics.median(ratios)


#: the overhead workload: logreg clients with one local step of batch 8, so training is a small part of a round
OVERHEAD_TRAIN = {"local_steps": 1, "batch_size": 8}
OVERHEAD_COHORTS = (10, 25, 50, 100)


def ray_overhead(repeats: int, ray_columns: list[dict], rounds: int = 10) -> None:
    """What the ray executor adds to a round besides training, and how it grows with the cohort.

    Per round the executor measures its wall time beyond the busiest actor's own training (calls,
    transfers, waiting, the in-order ``client_update`` hooks, with ``partial_sums`` the sum calls:
    :attr:`RayExecutor.overheads_s`); over cohorts of 10–100 clients a least-squares line splits that
    into a fixed cost per round and a cost per client. Sequential's whole round is printed beside it,
    measured interleaved with Ray's, once with every end point coming back and once with partial sums.
    """
    print()
    print(f"ray executor overhead (logreg, {OVERHEAD_TRAIN['local_steps']} local step of batch "
          f"{OVERHEAD_TRAIN['batch_size']}; median over {repeats} x {rounds} rounds; overhead = the executor's "
          "round beyond its busiest actor's training; +sums = executor.partial_sums)")
    print(f"  {'clients':>7} {'sequential ms/round':>20} {'ray ms/round':>13} {'ray overhead ms/round':>22} "
          f"{'ray+sums ms/round':>18} {'ray+sums overhead ms':>21} {'actors':>6} {'nodes':>5}")
    columns = ({"name": "sequential"}, *ray_columns)
    ks, over = [], {False: [], True: []}
    for k in OVERHEAD_COHORTS:
        exps = [experiment("logreg", k, ex, 1 + rounds * repeats, train=OVERHEAD_TRAIN) for ex in columns]
        data = trimmed(prepare(exps[:1]).dataset_for(exps[0], 0), SAMPLES)
        sims = [Simulation(exp, data, 0) for exp in exps]
        times = [[] for _ in sims]
        try:
            for sim in sims:
                sim.step(0)
            for sim in sims[1:]:
                sim.executor.overheads_s.clear()
            for rep in range(repeats):
                for i, sim in enumerate(sims):
                    first = 1 + rep * rounds
                    t0 = time.perf_counter()
                    for r in range(first, first + rounds):
                        sim.step(r)
                    times[i].append((time.perf_counter() - t0) / rounds)
            o = [statistics.median(sim.executor.overheads_s) for sim in sims[1:]]
            summaries = [sim.executor.summary() for sim in sims[1:]]
            assert sims[2].hold_reports, "the partial-sums column did not sum on the actors"
        finally:
            for sim in sims:
                sim.release()
        ks.append(k)
        over[False].append(o[0])
        over[True].append(o[1])
        ms = [1000 * statistics.median(t) for t in times]
        print(f"  {k:7d} {ms[0]:20.2f} {ms[1]:13.2f} {1000 * o[0]:22.2f} {ms[2]:18.2f} {1000 * o[1]:21.2f} "
              f"{'/'.join(str(s['ray_actors']) for s in summaries):>6} "
              f"{'/'.join(str(s['ray_nodes']) for s in summaries):>5}", flush=True)
    for sums in (False, True):
        per_client, per_round = np.polyfit(np.array(ks, float), 1000 * np.array(over[sums]), 1)
        ok = per_round <= 10 and per_client <= 0.5
        what = "ray executor with partial sums" if sums else "ray executor"
        print(f"  {what} fit: {per_round:.2f} ms per round + {per_client:.3f} ms per client")
        print(f"target {what} overhead <= 10 ms per round + 0.5 ms per client on the two-node cluster: "
              f"{per_round:.2f} ms + {per_client:.3f} ms/client ({'met' if ok else 'NOT met'})")


def cpu_reference() -> dict:
    """The committed CPU sequential figures (``bench/cpu_reference.json``): ``{model: {workload: s/round}}`` and
    where they were measured."""
    return json.loads(CPU_REFERENCE.read_text())


def parameters(model: str) -> int:
    """Parameters of a GPU row's model on synthetic_images' default 3x32x32 images, 10 classes."""
    comp = experiment(model, 10, {"name": "sequential"}, 1)["model"]
    return sum(p.numel() for p in comp.cls.build(comp.cfg, (3, 32, 32), 10).parameters())


def gpu_targets(rows: list[dict], device: str) -> list[str]:
    """The GPU issue's targets, from the measured rows: met / NOT met on CUDA; on the CPU no verdict (a smoke test)."""
    verdict = (lambda ok: "met" if ok else "NOT met") if _on_cuda(device) else \
        (lambda ok: "measured on the CPU: a smoke test, no verdict")
    by: dict[tuple, dict] = {}
    for r in rows:  # the fastest of an executor's columns (vectorized eager or compiled)
        key = (r["model"], r["workload"], r["name"])
        if r["device"] == device and (key not in by or r["s_round"] < by[key]["s_round"]):
            by[key] = r
    where = f" ({device})" if _on_cuda(device) else ""
    out = []
    vec, seq = by.get(("cnn_fedavg", "W100", "vectorized")), by.get(("cnn_fedavg", "W100", "sequential"))
    if vec:
        out.append(f"target cnn_fedavg W100 vectorized{where} <= 0.15 s/round: {vec['s_round']:.4f} s "
                   f"({verdict(vec['s_round'] <= 0.15)})")
    if vec and seq:
        vs = seq["s_round"] / vec["s_round"]
        out.append(f"target cnn_fedavg W100 vectorized >= 3x faster than sequential on the same device{where}: "
                   f"{vs:.1f}x ({verdict(vs >= 3)})")
    res = [r for r in rows if r["model"] == "resnet18_gn" and r["workload"] == "W100" and r["device"] == device]
    if res:
        best = min(res, key=lambda r: r["s_round"])
        out.append(f"target resnet18_gn W100 <= 2.5 s/round with the best executor{where}: {best['s_round']:.4f} s "
                   f"({best['name']}; {verdict(best['s_round'] <= 2.5)})")
    big = [r for r in rows if r["model"] == "cnn_fedavg" and r["workload"] == "W1000" and r["device"] == device]
    if big:
        best = min(big, key=lambda r: r["s_round"])
        out.append(f"target cnn_fedavg with 1,000 clients per round (W1000) <= 1.5 s/round{where}: "
                   f"{best['s_round']:.4f} s ({best['name']}; {verdict(best['s_round'] <= 1.5)})")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=None,
                   help=f"comma-separated, of {', '.join(MODELS)} (default: {','.join(CPU_MODELS)}; with --device "
                        f"cuda also {','.join(GPU_MODELS)}; with --gpu-rows only those)")
    p.add_argument("--workloads", default="W,W100,W1000",
                   help="W (10 clients a round), W100 (100), W1000 (1,000; cnn_fedavg only); a workload a model "
                        "does not define is skipped")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per repeat (1 is noisy on a shared VM)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats (the median is reported)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: add sequential and vectorized with runtime.device cuda, and the GPU rows")
    p.add_argument("--gpu-rows", action="store_true",
                   help=f"run the GPU rows ({', '.join(GPU_MODELS)}) alone; with --device cpu on the CPU, as a "
                        "smoke test of the GPU run's code")
    p.add_argument("--gpu-only", action="store_true",
                   help="no CPU columns at all: every model gets the two --device columns, set against the CPU "
                        "sequential figures in bench/cpu_reference.json")
    p.add_argument("--local-steps", type=int, default=TRAIN["local_steps"],
                   help="local steps of every client (default 10; fewer only to smoke-test big rows on a CPU)")
    p.add_argument("--memory-mb", type=float, default=None,
                   help="vectorized's memory budget per chunk of clients on the CPU (default: the executor's "
                        "own, 512); on a GPU the executor uses its device_share of the free memory instead")
    p.add_argument("--compile", action="store_true",
                   help="add a vectorized column with the vmapped step compiled (executor option compile: true)")
    p.add_argument("--fmnist-path", default=None,
                   help="directory of the Fashion-MNIST IDX files for the mlp and cnn rows (default: Debian's "
                        "/usr/share/datasets/fashion-mnist)")
    p.add_argument("--ray", action="store_true", help="add the Ray executor on a two-node local Ray cluster, and "
                                                      "its per-round and per-client overhead (needs turnout[ray])")
    p.add_argument("--ray-only", action="store_true", help="with --ray: skip the other executors' columns")
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # the simulation's default (runtime.torch_threads: 1)
    TRAIN["local_steps"] = args.local_steps
    if args.models is None:
        models = list(GPU_MODELS) if args.gpu_rows else \
            list(CPU_MODELS) + (list(GPU_MODELS) if args.device == "cuda" else [])
    else:
        models = args.models.split(",")
    for model in models:
        if model not in MODELS:
            raise SystemExit(f"--models: unknown model {model!r}; choose from {', '.join(MODELS)}")
        if model in GPU_MODELS and args.device == "cpu" and not args.gpu_rows:
            raise SystemExit(f"--models: {model} is a GPU row; run it with --device cuda, or add --gpu-rows to run "
                             "it on the CPU as a smoke test")
    workloads = args.workloads.split(",")
    for workload in workloads:
        if workload not in WORKLOADS:
            raise SystemExit(f"--workloads: unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    if args.fmnist_path:
        for model in ("mlp", "cnn"):
            MODELS[model]["data"] = {**MODELS[model]["data"], "path": args.fmnist_path}
    for model in list(models):  # a dataset that is not on this machine: skip its rows, say so
        try:
            experiment(model, 10, {"name": "sequential"}, 1)
        except ConfigError as e:
            print(f"skipping {model}: {e}")
            models.remove(model)
    if not models:
        raise SystemExit("no model left to measure")
    gpu_wanted = args.gpu_only or args.gpu_rows or any(m in GPU_MODELS for m in models)
    device = args.device
    executors = [({"name": name}, "cpu") for name in EXECUTORS]
    memory_mb = args.memory_mb
    vectorized = {"name": "vectorized", **({"memory_mb": memory_mb} if memory_mb is not None else {})}
    device_columns = [({"name": "sequential"}, device), (vectorized, device)]
    if args.compile:  # vectorized with its vmapped step compiled (torch.compile), beside the eager one
        device_columns.append(({**vectorized, "compile": True}, device))
    if device == "cuda":
        if not torch.cuda.is_available():
            if gpu_wanted:
                raise SystemExit("--device cuda: torch sees no CUDA device on this machine (torch "
                                 f"{torch.__version__}); use --device cpu for a smoke test")
            print("--device cuda: torch sees no CUDA device on this machine; only CPU columns are measured")
        else:
            executors += device_columns

    def columns(model: str, workload: str) -> list[tuple[dict, str]]:
        if workload == "W1000":
            return device_columns[1:]  # a sequential round of 1,000 clients costs ten W100 rounds
        if model in GPU_MODELS or args.gpu_only:
            return device_columns
        return executors

    reference = cpu_reference() if args.gpu_only else None
    on_gpu = device == "cuda" and torch.cuda.is_available()
    print(f"machine: {machine()}")
    print(f"workloads: W = {CLIENTS} clients x {SAMPLES} samples, {WORKLOADS['W'].per_round} per round, "
          f"{TRAIN['local_steps']} steps of batch {TRAIN['batch_size']}; W100 = all {CLIENTS} per round")
    if "W1000" in workloads and any(m in WORKLOADS["W1000"].models for m in models):
        w = WORKLOADS["W1000"]
        print(f"W1000 = {w.clients:,} clients x {w.samples} samples, all {w.per_round:,} per round, the same local "
              f"steps ({', '.join(w.models)}; vectorized alone)")
    gpu_models = [m for m in models if m in GPU_MODELS]
    if gpu_models:
        counts = ", ".join(f"{m} {parameters(m):,}" for m in gpu_models)
        print(f"GPU rows: synthetic_images 3x32x32 uint8, 10 classes, lr 0.05, fedavg; parameters: {counts}; "
              f"columns sequential and vectorized on {device}"
              + (f" (vectorized memory_mb {memory_mb:.0f})" if memory_mb is not None else ""))
    if reference is not None:
        print(f"CPU reference ({CPU_REFERENCE.name}): {reference['source']}; {reference['measured']}; machine: "
              f"{reference['machine']}")
    print(f"timing: whole round step without evaluation; median of {args.repeats} interleaved repeats of the "
          f"mean over {args.rounds} round(s), after one warm-up round")
    print(f"load average at start (1/5/15 min, all processes on the machine): {_load()}")
    print("others = cores other processes (other jobs, VM steal) kept busy during the timed rounds (median)")
    if on_gpu:
        print("GPU MiB = peak GPU memory allocated during a column's timed rounds (blank on the CPU)")
    if reference is not None:
        print("x CPU ref = s/round over the CPU sequential s/round of the reference (below 1: faster than it)")
    print()
    mw = max(8, *(len(m) for m in models))  # 8 unless a GPU row's name is longer
    head = f"{'model':{mw}} {'workload':8} {'executor':17} {'s/round':>9} {'x sequential':>12} {'speed-up':>9} " \
           f"{'min..max s/round':>18} {'warm-up s':>9} {'others':>6}"
    if on_gpu:
        head += f" {'GPU MiB':>8}"
    if reference is not None:
        head += f" {'x CPU ref':>9}"
    head += "  auto chose"
    print(head)
    print("-" * len(head))
    rows = []

    def show(row: dict) -> None:
        lo, hi = row["spread"]
        ratio = f"{row['ratio']:12.2f} {row['speedup']:8.1f}x" if row["ratio"] is not None else f"{'':12} {'':9}"
        line = (f"{row['model']:{mw}} {row['workload']:8} {row['executor']:17} {row['s_round']:9.4f} "
                f"{ratio} {lo:8.4f}..{hi:<8.4f} {row['warmup_s']:9.2f} {row['others']:6.2f}")
        if on_gpu:
            line += f" {row['gpu_mib']:8.0f}" if row["gpu_mib"] is not None else f" {'':8}"
        if reference is not None:
            ref = reference["sequential_s_round"].get(row["model"], {}).get(row["workload"])
            row["cpu_ref_ratio"] = row["s_round"] / ref if ref else None
            line += f" {row['cpu_ref_ratio']:9.4f}" if ref else f" {'':9}"
        print(f"{line}  {row['auto']}", flush=True)

    def measure(cols) -> None:
        for model in models:
            for workload in workloads:
                spec = WORKLOADS[workload]
                if spec.models is not None and model not in spec.models:
                    continue
                picked = cols(model, workload)
                try:
                    measured = bench(model, workload, picked, args.rounds, args.repeats)
                except (RuntimeError, ConfigError) as e:
                    if not any(_on_cuda(d) for _, d in picked):
                        raise
                    # one failed GPU row (out of memory, say) must not cost the rest of a lent machine's run
                    print(f"{model:{mw}} {workload:8} FAILED: {str(e).splitlines()[0][:200]}", flush=True)
                    torch.cuda.empty_cache()
                    continue
                for row in measured:
                    rows.append(row)
                    show(row)
                if any(_on_cuda(d) for _, d in picked):
                    torch.cuda.empty_cache()

    if not args.ray_only:
        measure(columns)
    if args.ray:
        # Ray's daemons and idle workers wake up often: with them running, two parallel workers on a
        # 2-core machine trained the CNN about a quarter slower. So Ray starts only now, and its column
        # is compared with a sequential run measured in the same pass.
        import ray
        from ray.cluster_utils import Cluster

        cores = len(os.sched_getaffinity(0))
        head = max(1, cores // 2)
        # Two ray columns (end points back, partial sums) each hold one actor per core; they are timed in turn, so
        # each node offers twice its cores' slots and an executor's idle actors wait while the other's train.
        ray_columns = [{"name": "ray", "actors": cores}, {"name": "ray", "actors": cores, "partial_sums": True}]
        # cluster_utils gives each node a ~150 MB object store, where a real node has 30 % of its memory: the
        # MLP's replies (50 clients x 636 KB per actor a round) then wait ~2 s each for room. 1 GiB a node.
        store = 1 << 30
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2 * head, "object_store_memory": store})
        cluster.add_node(num_cpus=2 * max(1, cores - head), object_store_memory=store)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        print(f"-- the ray executor on a two-node local Ray cluster (head {head} core(s), worker "
              f"{max(1, cores - head)}, two slots a core, a 1 GiB object store each; each ray column {cores} actors, "
              f"one a core), against sequential in this pass; load average: {_load()}")
        try:
            measure(lambda model, workload: [({"name": "sequential"}, "cpu"), *((c, "cpu") for c in ray_columns)])
            ray_overhead(args.repeats, ray_columns)
        finally:
            ray.shutdown()  # before the two-process ceiling, for the same reason
            cluster.shutdown()
    print(f"load average at end: {_load()}")
    print()
    cpu_models = [m for m in models if m in CPU_MODELS]
    if not args.gpu_only and cpu_models and "W100" in workloads and len(os.sched_getaffinity(0)) >= 2:
        print("two-process ceiling: two plain PyTorch processes each training half of W100's clients at once, "
              "as a share of one process training them all (the best a 2-worker executor can do on this machine)")
        for model in cpu_models:
            print(f"  {model:8} {ceiling(model, args.repeats):.2f}x", flush=True)
        print()
    for row in rows:
        if row["executor"] == "parallel" and row["workload"] == "W100":
            ok = "met" if row["ratio"] <= 0.6 else "NOT met"
            print(f"target parallel <= 0.6x sequential on W100, {row['model']}: {row['ratio']:.3f}x ({ok})")
        if row["executor"] == "vectorized" and row["workload"] == "W100" and row["model"] == "logreg":
            ok = "met" if row["speedup"] >= 4 else "NOT met"
            print(f"target vectorized >= 4x faster than sequential, logreg K=100: {row['speedup']:.1f}x ({ok})")
    by = {(r["model"], r["workload"], r["executor"]): r for r in rows}
    for model in cpu_models:
        gpu, seq_gpu = by.get((model, "W100", "vectorized(cuda)")), by.get((model, "W100", "sequential(cuda)"))
        if gpu and seq_gpu:
            cpu = by.get((model, "W100", "sequential"))
            if cpu is not None:
                speedup, against = cpu["s_round"] / gpu["s_round"], "CPU sequential"
            else:
                speedup = reference["sequential_s_round"][model]["W100"] / gpu["s_round"]
                against = f"CPU sequential of {CPU_REFERENCE.name}"
            ok = "met" if speedup >= 20 else "NOT met"
            print(f"target vectorized on GPU >= 20x faster than {against} on W100, {model}: {speedup:.1f}x ({ok})")
            vs = seq_gpu["s_round"] / gpu["s_round"]
            print(f"target vectorized on GPU >= 3x faster than sequential on the GPU on W100, {model}: {vs:.1f}x "
                  f"({'met' if vs >= 3 else 'NOT met'})")
    for line in gpu_targets(rows, device):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
