"""Two ways to fill one GPU with a cohort's clients, side by side in one run: vmapped chunks or worker processes.

turnout's ``vectorized`` executor trains a chunk of clients as one ``vmap``-ed step (convolutions become
grouped convolutions over the clients). pfl-research instead runs several worker processes per GPU, each
with a persistent model training its clients one after another. This benchmark measures, on the same
work (``--clients`` clients × ``--steps`` local steps of batch ``--batch``, CIFAR-shaped inputs already on
the GPU):

* ``loop x P``: P processes (P = 1, 2, 4) of plain PyTorch (one ``nn.Module``, ``torch.optim.SGD``), each
  training its share of the clients, started together after a barrier — pfl's layout with no framework
  overhead at all, so a bound no framework in that layout can beat;
* ``vmapped``: turnout's :class:`~turnout.training.stacked_sgd.StackedTrainer` on all clients at once.

Every figure is the median of ``--repeats`` timings, in seconds for the whole cohort's local training, with
the ratio to ``loop x 1``. The rule ``executor: auto`` follows on a GPU is written from these figures
(docs/performance.md).

    python bench/gpu_layouts.py --model cnn_fedavg --clients 100
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import torch
import torch.nn.functional as F

from turnout.config.train import TrainConfig
from turnout.models.flat import FlatModel
from turnout.models.registry import MODELS
from turnout.training.stacked_sgd import StackedTrainer

SHAPE = (3, 32, 32)


def _module(model: str) -> torch.nn.Module:
    comp = MODELS.get(model)
    torch.manual_seed(0)
    return comp.build(comp.Config(), SHAPE, 10)


def _loop(model: str, clients: int, steps: int, batch: int, repeats: int, start, results) -> None:
    """One worker process: a persistent module trains ``clients`` clients in turn, ``repeats`` times."""
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    module = _module(model).to(dev)
    init = [p.detach().clone() for p in module.parameters()]
    x = torch.randn(clients, steps, batch, *SHAPE, device=dev)
    y = torch.randint(0, 10, (clients, steps, batch), device=dev)
    opt = torch.optim.SGD(module.parameters(), lr=0.05)

    def train_all():
        for c in range(clients):
            with torch.no_grad():
                for p, v in zip(module.parameters(), init):
                    p.copy_(v)
            for s in range(steps):
                loss = F.cross_entropy(module(x[c, s]), y[c, s])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        torch.cuda.synchronize()

    train_all()  # warm-up (cuDNN's choice of kernels)
    times = []
    for _ in range(repeats):
        start.wait()
        t0 = time.perf_counter()
        train_all()
        times.append(time.perf_counter() - t0)
        start.wait()
    results.put(times)


def loops(model: str, processes: int, clients: int, steps: int, batch: int, repeats: int) -> float:
    """Seconds for ``processes`` workers to train ``clients`` clients between them (the slowest worker's time)."""
    ctx = mp.get_context("spawn")
    start, results = ctx.Barrier(processes + 1), ctx.Queue()
    share = [clients // processes + (i < clients % processes) for i in range(processes)]
    procs = [ctx.Process(target=_loop, args=(model, n, steps, batch, repeats, start, results)) for n in share]
    for p in procs:
        p.start()
    walls = []
    for _ in range(repeats):
        start.wait()
        t0 = time.perf_counter()
        start.wait()
        walls.append(time.perf_counter() - t0)
    for p in procs:
        p.join()
    return statistics.median(walls)


def vmapped(model: str, clients: int, steps: int, batch: int, repeats: int) -> float:
    dev = torch.device("cuda")
    flat = FlatModel(_module(model))
    trainer = StackedTrainer(flat, TrainConfig(batch_size=batch, local_steps=steps, lr=0.05))
    starts = flat.flat_params().to(dev).reshape(1, -1).expand(clients, -1)
    x = torch.randn(steps, clients, batch, *SHAPE, device=dev)
    y = torch.randint(0, 10, (steps, clients, batch), device=dev)
    counts = torch.full((steps, clients), batch, device=dev)
    trainer.train(starts, {}, x, y, counts, 0.05)  # warm-up
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        trainer.train(starts, {}, x, y, counts, 0.05)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn_fedavg,resnet18_gn")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--processes", default="1,2,4")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu_layouts.py needs a CUDA device")
    print(f"GPU layouts: {args.clients} clients x {args.steps} steps of batch {args.batch}, inputs {SHAPE} "
          "on the GPU | "
          f"{torch.cuda.get_device_name(0)} | torch {torch.__version__}")
    print(f"{'model':<12} {'layout':<10} {'s/cohort':>9} {'ratio':>6}")
    for model in args.models.split(","):
        rows = [(f"loop x {p}", loops(model, p, args.clients, args.steps, args.batch, args.repeats))
                for p in (int(v) for v in args.processes.split(","))]
        rows.append(("vmapped", vmapped(model, args.clients, args.steps, args.batch, args.repeats)))
        base = rows[0][1]
        for label, t in rows:
            print(f"{model:<12} {label:<10} {t:>9.4f} {t / base:>6.2f}")


if __name__ == "__main__":
    main()
