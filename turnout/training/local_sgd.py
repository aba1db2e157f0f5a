"""Local SGD written over parameter tensors.

The optimiser step is plain tensor arithmetic on a dict of parameters, and no ``torch.optim``
objects: one client's training is a pure function ``(start params, batches, hyper-parameters) →
end params`` which the sequential and parallel executors call per client (the trainer's private
copy of the module, loaded from the start point, is scratch space; the model it was given never
changes). :mod:`turnout.training.stacked_sgd` is the same arithmetic with a leading client axis,
which the vectorized executor ``vmap``-s over stacked clients.

Algorithms that change the local objective (FedProx's proximal term, SCAFFOLD's and FedSUM's
corrections, FedSUM-B's gradients at the start point) describe the change as data, a
:class:`LocalObjective`, which the trainer applies: any executor — sequential, vectorised over
clients, in another process — can apply the same record without calling back into the algorithm.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from ..config.train import TrainConfig
from ..models.flat import FlatModel
from ..models.scoring import cross_entropy, hits
from .resident import ResidentRows, fits

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LocalObjective:
    """How an algorithm changes a client's local gradient ``g`` at the parameters ``w``.

    Applied in this order, before weight decay, momentum and clipping::

        g ← g + prox_mu · (w − w_start)     FedProx's proximal term
        g ← scale · g + offset              SCAFFOLD (offset c − c_i), FedSUM (offset c_i, scale s)

    ``freeze``: the model does not move; the trainer returns the sum of the K minibatch gradients
    taken at the start point (FedSUM-B) in :attr:`LocalResult.grad_sum`.
    """

    offset: torch.Tensor | None = None  # flat, the model's dtype
    scale: float = 1.0
    prox_mu: float = 0.0
    freeze: bool = False

    def is_plain(self) -> bool:
        return self.offset is None and self.scale == 1.0 and self.prox_mu == 0.0 and not self.freeze


def split_flat(flat: torch.Tensor, like: Params) -> Params:
    """Views of the flat vector ``flat`` shaped like ``like`` (whose order is the flat layout)."""
    sizes = [p.numel() for p in like.values()]
    return {k: t.view(p.shape) for (k, p), t in zip(like.items(), torch.split(flat, sizes))}


def batch_indices(n: int, batch_size: int, steps: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Row indices of ``steps`` minibatches: reshuffled epochs, the last batch of each may be short.

    Yielded one step at a time, so memory holds one permutation of the client's rows whatever
    ``steps`` is (a list of every step's indices would need gigabytes at 10^8 steps). A new
    epoch's permutation is drawn only when the previous one is used up and a step remains.
    """
    if n == 0:
        return
    done = 0
    while done < steps:
        perm = rng.permutation(n)
        for i in range(0, n, batch_size):
            if done == steps:
                return
            done += 1
            yield perm[i:i + batch_size]


#: minibatches whose row indices go to the device in one copy (a block's indices: steps × batch int64s)
INDEX_BLOCK_STEPS = 256


def index_blocks(n: int, batch_size: int, steps: int, rng: np.random.Generator,
                 block_steps: int = INDEX_BLOCK_STEPS) -> Iterator[tuple[np.ndarray, list[int]]]:
    """:func:`batch_indices`' minibatches in blocks: one array of their rows and each minibatch's length.

    The rows of up to ``block_steps`` steps travel to the training device in one copy instead of one
    per step; the draws are :func:`batch_indices`' own, in its order, so the minibatches are unchanged.
    """
    block: list[np.ndarray] = []
    for idx in batch_indices(n, batch_size, steps, rng):
        block.append(idx)
        if len(block) == block_steps:
            yield np.concatenate(block), [len(b) for b in block]
            block = []
    if block:
        yield np.concatenate(block), [len(b) for b in block]


@dataclass
class LocalResult:
    """What local training produced for one client."""

    params: torch.Tensor  # flat end point
    buffers: dict[str, torch.Tensor]
    mean_loss: float
    steps: int
    samples: int  # samples processed (for the compute-time model)
    grad_sum: torch.Tensor | None = None  # flat Σ_k g_k at the start point (objective.freeze only)


def sgd_direction(cfg: TrainConfig, params: Params, grads: Params, velocity: Params | None
                  ) -> tuple[Params, Params | None]:
    """The step ``p -= lr · step`` of PyTorch's SGD with ``cfg``'s weight decay, momentum and Nesterov, and the
    new velocity (``velocity`` as given without momentum): one definition for the sequential and the stacked
    trainer, so the two round alike."""
    if cfg.weight_decay:
        grads = {k: g + cfg.weight_decay * params[k] for k, g in grads.items()}
    if not cfg.momentum:
        return grads, velocity
    velocity = {k: g.clone() for k, g in grads.items()} if velocity is None else \
        {k: cfg.momentum * velocity[k] + g for k, g in grads.items()}
    return ({k: g + cfg.momentum * velocity[k] for k, g in grads.items()} if cfg.nesterov else velocity), velocity


class LocalTrainer:
    """Runs minibatch SGD (momentum, weight decay, clipping) from a flat start point."""

    def __init__(self, model: FlatModel, cfg: TrainConfig, grad_backend: str = "autograd",
                 device: torch.device | str = "cpu"):
        if grad_backend not in ("autograd", "functional"):
            raise ValueError(f"grad_backend must be 'autograd' or 'functional', not {grad_backend!r}")
        self.model = model
        self.cfg = cfg
        self.grad_backend = grad_backend
        #: where training runs (``runtime.device``); inputs move there, results come back to the CPU
        self.device = torch.device(device)

        def loss_fn(params: Params, buffers: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return cross_entropy(model.forward(params, buffers, x), x, y)

        self.loss_fn = loss_fn
        self._functional_grad = torch.func.grad_and_value(loss_fn)
        self._scratch: nn.Module | None = None  # the autograd backend's copy of the module, on the device
        self._resident: tuple[np.ndarray, ResidentRows | None] | None = None  # (host x, its rows on the device)

    def grad_and_loss(self, params: Params, buffers: dict, x: torch.Tensor,
                      y: torch.Tensor) -> tuple[Params, torch.Tensor]:
        """Gradient of the minibatch loss w.r.t. the free tensors ``params`` (and the loss).

        ``grad_backend: autograd`` (default) differentiates with ``torch.autograd.grad`` through
        ``functional_call`` — about 5× less overhead per step than ``torch.func`` on small models.
        ``functional`` uses ``torch.func.grad_and_value``, the form a ``vmap``-ed executor needs.
        Both compute the same gradient (tested), and the same as :meth:`train`'s steps, which on
        the autograd backend differentiate the trainer's own module copy instead (see ``_load``).
        """
        if self.grad_backend == "functional":
            return self._functional_grad(params, buffers, x, y)
        # ``params`` are fresh leaf tensors (built under no_grad), so they can be marked in place.
        for v in params.values():
            v.requires_grad_(True)
        loss = self.loss_fn(params, buffers, x, y)
        grads = torch.autograd.grad(loss, list(params.values()))
        for v in params.values():
            v.requires_grad_(False)
        return dict(zip(params, grads)), loss.detach()

    @torch.no_grad()
    def sgd_step(self, params: Params, grads: Params, velocity: Params | None, lr: float) -> Params | None:
        """One SGD update of ``params`` in place (PyTorch's SGD semantics for momentum/nesterov/wd).

        ``p -= lr · step`` rounds exactly as ``p - lr · step`` does (``sub_(step, alpha=lr)`` would not:
        it fuses the multiply-add), so results are unchanged from an out-of-place update, without
        allocating a new parameter tensor every step. Returns the velocity.
        """
        step, velocity = sgd_direction(self.cfg, params, grads, velocity)
        for k, p in params.items():
            p.sub_(lr * step[k])
        return velocity

    def _scratch_module(self) -> nn.Module:
        if self._scratch is None:
            self._scratch = copy.deepcopy(self.model.module).to(self.device)
        return self._scratch

    def _load(self, start: torch.Tensor, buffers: dict[str, torch.Tensor]) -> tuple[
            Params, dict[str, torch.Tensor], Callable[[torch.Tensor, torch.Tensor], tuple[Params, torch.Tensor]]]:
        """The client's parameters, buffers and minibatch-gradient function, set up from ``start``.

        The autograd backend loads the start point into the trainer's own copy of the module and
        differentiates its forward directly: what ``functional_call`` would swap in and out on
        every step is set once per client (on a small model that swapping is about a tenth of a
        step). The functional backend keeps free tensors for ``torch.func``.
        """
        dev = self.device
        if self.grad_backend == "functional":
            params = {k: v.detach().clone() for k, v in self.model.unflatten(start).items()}
            bufs = {k: v.to(dev).clone() for k, v in buffers.items()}
            return params, bufs, lambda xb, yb: self._functional_grad(params, bufs, xb, yb)
        module = self._scratch_module()
        module.train()
        params = dict(module.named_parameters())
        bufs = dict(module.named_buffers())
        with torch.no_grad():
            for p, v in zip(params.values(), self.model.unflatten(start).values()):
                p.copy_(v)
            for k, b in bufs.items():  # one the caller left out: the model's own, as functional_call takes it
                b.copy_(buffers[k] if k in buffers else self.model.module.get_buffer(k))
        plist = list(params.values())

        def grads(xb: torch.Tensor, yb: torch.Tensor) -> tuple[Params, torch.Tensor]:
            loss = cross_entropy(module(xb), xb, yb)
            return dict(zip(params, torch.autograd.grad(loss, plist))), loss.detach()
        return params, bufs, grads

    def resident(self, x: np.ndarray, y: np.ndarray) -> ResidentRows | None:
        """The pooled training rows ``(x, y)`` on the training device, copied once (None on the CPU, or if they
        do not fit the device's share: :func:`~turnout.training.resident.fits`)."""
        if self._resident is not None and self._resident[0] is x:
            return self._resident[1]
        rows = ResidentRows.put(x, y, self.device) if fits(x, y, self.device) else None
        self._resident = (x, rows)
        return rows

    def train(self, start: torch.Tensor, buffers: dict[str, torch.Tensor], x: np.ndarray | torch.Tensor,
              y: np.ndarray | torch.Tensor, steps: int, lr: float, rng: np.random.Generator,
              objective: LocalObjective | None = None, resident: ResidentRows | None = None,
              keep_on_device: bool = False) -> LocalResult:
        """Train from the flat vector ``start`` on ``(x, y)`` for ``steps`` minibatches.

        On a device other than the CPU the start point, the client's data and the optimiser state
        live there; the result comes back to the CPU (on the CPU nothing is copied) unless
        ``keep_on_device`` (the engine aggregates there). ``x`` and ``y`` may be views of
        :meth:`resident` rows (then ``resident`` says how to read them). A client's steps never wait
        for the device: minibatch indices travel in blocks (:func:`index_blocks`) and the losses are
        read once per block.
        """
        self.model.module.train()
        dev, cpu = self.device, torch.device("cpu")
        start = start.detach().to(dev)
        params, buffers, grad_and_loss = self._load(start, buffers)
        xt = x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x)).to(dev)
        yt = y if isinstance(y, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(y)).to(dev)
        inputs = resident.inputs if resident is not None else _same
        obj = objective if objective is not None and not objective.is_plain() else None
        anchor = split_flat(start, params) if obj is not None and obj.prox_mu else None
        offset = split_flat(obj.offset.to(dev), params) if obj is not None and obj.offset is not None else None
        grad_sum = torch.zeros_like(start) if obj is not None and obj.freeze else None
        velocity = None
        total_loss, samples = 0.0, 0
        done = 0
        for rows, lengths in index_blocks(len(yt), self.cfg.batch_size, steps, rng):
            block = torch.from_numpy(rows)
            # From pinned memory the copy does not wait for the device (the host allocator keeps the page alive).
            block = block.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else block.to(dev)
            losses = []
            at = 0
            for n in lengths:
                ti = block[at:at + n]
                at += n
                grads, loss = grad_and_loss(inputs(xt[ti]), yt[ti])
                losses.append(loss)
                if grad_sum is not None:  # gradients at the start point: the local model stays put
                    grad_sum.add_(torch.cat([g.reshape(-1) for g in grads.values()]).to(grad_sum.dtype))
                    continue
                if anchor is not None:
                    grads = {k: g + obj.prox_mu * (params[k].detach() - anchor[k]) for k, g in grads.items()}
                if offset is not None:
                    grads = ({k: g + offset[k] for k, g in grads.items()} if obj.scale == 1.0
                             else {k: obj.scale * g + offset[k] for k, g in grads.items()})
                elif obj is not None and obj.scale != 1.0:
                    grads = {k: obj.scale * g for k, g in grads.items()}
                if self.cfg.grad_clip is not None:
                    norm = torch.sqrt(sum((g * g).sum() for g in grads.values()))
                    scale = torch.clamp(self.cfg.grad_clip / (norm + 1e-12), max=1.0)
                    grads = {k: g * scale for k, g in grads.items()}
                velocity = self.sgd_step(params, grads, velocity, lr)
            # One read of the block's losses, summed step by step as float(loss) · len(batch) always was.
            for value, n in zip(torch.stack(losses).tolist(), lengths):
                total_loss += value * n
            samples += len(rows)
            done += len(lengths)
        out = dev if keep_on_device else cpu
        with torch.no_grad():
            end = self.model.flatten(params).to(out)  # torch.cat made a new tensor: the scratch module is reused
            end_buffers = {k: v.to(cpu, copy=True) for k, v in buffers.items()}
        return LocalResult(params=end,
                           buffers=end_buffers,
                           mean_loss=total_loss / max(1, samples), steps=done, samples=samples,
                           grad_sum=None if grad_sum is None else grad_sum.to(out))


def _same(rows: torch.Tensor) -> torch.Tensor:
    return rows


@torch.no_grad()
def evaluate(model: FlatModel, flat: torch.Tensor, buffers: dict[str, torch.Tensor], x: np.ndarray, y: np.ndarray,
             batch_size: int = 2048, device: torch.device | str = "cpu") -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of the flat parameters on ``(x, y)``, computed on ``device``.

    Evaluation runs where training runs: on a GPU a server test set through a CNN every few rounds would
    otherwise cost the CPU more than the rounds themselves. Its sums are read once, at the end.
    """
    if len(y) == 0:
        return float("nan"), float("nan")
    dev = torch.device(device)
    model.module.eval()
    params = model.unflatten(flat.to(dev))
    buffers = {k: v.to(dev) for k, v in buffers.items()} if dev.type != "cpu" else buffers
    if dev.type == "cpu":  # the reference: float64 sums, one batch at a time
        correct, loss = 0, 0.0
        for a in range(0, len(y), batch_size):
            xb = torch.from_numpy(np.ascontiguousarray(x[a:a + batch_size]))
            yb = torch.from_numpy(np.ascontiguousarray(y[a:a + batch_size]))
            logits = model.forward(params, buffers, xb)
            loss += float(cross_entropy(logits, xb, yb, reduction="sum"))
            correct += hits(logits, xb, yb).sum().item()  # an int, or a sum of shares of positions
        return correct / len(y), loss / len(y)
    losses, right = [], []
    for a in range(0, len(y), batch_size):
        xb = torch.from_numpy(np.ascontiguousarray(x[a:a + batch_size])).to(dev)
        yb = torch.from_numpy(np.ascontiguousarray(y[a:a + batch_size])).to(dev)
        logits = model.forward(params, buffers, xb)
        losses.append(cross_entropy(logits, xb, yb, reduction="sum"))
        right.append(hits(logits, xb, yb).sum())
    loss = sum(torch.stack(losses).tolist())  # per batch, as the CPU path adds them
    return torch.stack(right).sum().item() / len(y), loss / len(y)


def evaluate_many(model: FlatModel, flat: torch.Tensor, buffers: dict, x: np.ndarray, y: np.ndarray,
                  offsets: np.ndarray, batch_size: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Per-segment accuracy and loss (e.g. every client's local test part) in one pass over ``x``."""
    n_seg = len(offsets) - 1
    if len(y) == 0:
        return np.full(n_seg, np.nan), np.full(n_seg, np.nan)
    model.module.eval()
    params = model.unflatten(flat)
    correct = np.zeros(len(y), dtype=np.float64)
    losses = np.zeros(len(y), dtype=np.float64)
    with torch.no_grad():
        for a in range(0, len(y), batch_size):
            xb = torch.from_numpy(np.ascontiguousarray(x[a:a + batch_size]))
            yb = torch.from_numpy(np.ascontiguousarray(y[a:a + batch_size]))
            logits = model.forward(params, buffers, xb)
            losses[a:a + len(yb)] = cross_entropy(logits, xb, yb, reduction="none").numpy()
            correct[a:a + len(yb)] = hits(logits, xb, yb).numpy()
    seg = np.repeat(np.arange(n_seg), np.diff(offsets))
    counts = np.diff(offsets).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.bincount(seg, correct, n_seg) / counts, np.bincount(seg, losses, n_seg) / counts)
