"""Does ``torch.compile`` speed up turnout's local step? Eager and compiled side by side, in one run.

Two steps are measured, each as turnout runs it (its own trainer classes, the model's own module):

* the **local step** of one client (``LocalTrainer``'s autograd backend: forward, ``autograd.grad``, SGD);
  compiled: the trainer's module copy wrapped in ``torch.compile``;
* the **vmapped step** of a chunk of clients (``StackedTrainer``: ``vmap(grad_and_value)`` over their stacked
  parameters); compiled: that function wrapped in ``torch.compile``.

Each is timed eager, then compiled (the first compiled calls, compilation included, are reported apart), as
the median of ``--repeats`` blocks of ``--steps`` steps, with the device synchronised around each block.
A compiled variant is worth an option only where its ratio to eager is clearly below 1.

    python bench/compile_step.py --device cuda --model cnn_fedavg --clients 100
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from turnout.config.train import TrainConfig
from turnout.models.flat import FlatModel
from turnout.models.registry import MODELS
from turnout.training.local_sgd import LocalTrainer
from turnout.training.stacked_sgd import StackedTrainer


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, steps: int, repeats: int, device: torch.device) -> float:
    """Median seconds per step over ``repeats`` blocks of ``steps`` calls."""
    blocks = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        _sync(device)
        blocks.append((time.perf_counter() - t0) / steps)
    return statistics.median(blocks)


def build(model: str, shape: tuple[int, ...]) -> FlatModel:
    comp = MODELS.get(model)
    torch.manual_seed(0)
    return FlatModel(comp.build(comp.Config(), shape, 10))


def local_step(flat: FlatModel, device: torch.device, batch: int, compiled: bool, mode: str):
    trainer = LocalTrainer(flat, TrainConfig(batch_size=batch, local_steps=1, lr=0.05), device=device)
    module = trainer._scratch_module()
    if compiled:
        trainer._scratch = torch.compile(module, mode=mode)
    start = flat.flat_params().to(device)
    params, _bufs, grads = trainer._load(start, {})
    x = torch.randn(batch, *SHAPE, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step():
        g, _loss = grads(x, y)
        trainer.sgd_step(params, g, None, 0.05)
    return step


def vmapped_step(flat: FlatModel, device: torch.device, batch: int, clients: int, compiled: bool, mode: str):
    stacked = StackedTrainer(flat, TrainConfig(batch_size=batch, local_steps=1, lr=0.05))
    grad = torch.compile(stacked._grad, mode=mode) if compiled else stacked._grad
    starts = flat.flat_params().to(device).reshape(1, -1).expand(clients, -1).clone()
    params = {n: t.reshape(clients, *s) for n, t, s in zip(flat.names, torch.split(starts, flat.sizes, dim=1),
                                                           flat.shapes)}
    x = torch.randn(clients, batch, *SHAPE, device=device)
    y = torch.randint(0, 10, (clients, batch), device=device)
    count = torch.full((clients,), batch, device=device)

    def step():
        g, _loss = grad(params, {}, x, y, count)
        for n, p in params.items():
            p.sub_(0.05 * g[n])
    return step


SHAPE: tuple[int, ...] = (3, 32, 32)


def main() -> None:
    global SHAPE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model", default="cnn_fedavg")
    ap.add_argument("--shape", default="3,32,32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--clients", type=int, default=100, help="clients of the vmapped chunk")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mode", default="default", help="torch.compile mode (default, reduce-overhead: CUDA graphs, ...)")
    ap.add_argument("--steps-only", default="local,vmapped", help="which steps to measure")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True  # as runtime.cudnn_benchmark (on by default) sets it for a run
    SHAPE = tuple(int(s) for s in args.shape.split(","))
    device = torch.device(args.device)
    flat = build(args.model, SHAPE)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"torch.compile (mode {args.mode}) of turnout's steps: {args.model} {SHAPE}, batch {args.batch}, "
          f"{args.clients} clients vmapped | {name} | torch {torch.__version__}")
    print(f"{'step':<14} {'eager ms':>9} {'compiled ms':>12} {'ratio':>6} {'first compiled calls s':>23}")
    steps = [("local", lambda c: local_step(flat, device, args.batch, c, args.mode)),
             ("vmapped", lambda c: vmapped_step(flat, device, args.batch, args.clients, c, args.mode))]
    for label, make in [s for s in steps if s[0] in args.steps_only.split(",")]:
        eager = make(False)
        eager()
        t_eager = _timed(eager, args.steps, args.repeats, device)
        try:
            compiled = make(True)
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(3):
                compiled()
            _sync(device)
            first = time.perf_counter() - t0
            t_comp = _timed(compiled, args.steps, args.repeats, device)
            print(f"{label:<14} {t_eager * 1e3:>9.3f} {t_comp * 1e3:>12.3f} {t_comp / t_eager:>6.2f} {first:>23.1f}")
        except Exception as e:  # noqa: BLE001 - a step torch.compile cannot compile is a result, reported as such
            print(f"{label:<14} {t_eager * 1e3:>9.3f} {'failed':>12}        ({type(e).__name__}: "
                  f"{str(e).splitlines()[0][:100]})")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
