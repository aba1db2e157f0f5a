"""Local SGD for many clients at once: one ``torch.func.vmap`` step over their stacked parameters.

The same minibatch SGD as :class:`~turnout.training.local_sgd.LocalTrainer`, written over tensors
with a leading client axis, so ``k`` clients cost one batched kernel per step instead of ``k``
small ones (the Python and dispatch overhead of a small model's step is most of its cost).

Clients differ in how many steps they take and how big their batches are. Every client's
minibatches are padded to ``batch_size`` rows and ``steps_max`` steps, with a count of real rows per
step (arrays are step-major, ``(steps, k, batch)``, so one step's data is contiguous):

* a step's loss is the sum of the real rows' cross-entropy divided by their number — the mean
  ``F.cross_entropy`` takes over a short last batch of an epoch — so padding rows add nothing;
* a client past its last step (count 0) keeps its parameters and momentum unchanged.

Local objectives (:class:`~turnout.training.local_sgd.LocalObjective`) are stacked per client
(:class:`StackedObjective`) and applied in the sequential trainer's order: proximal term, then
``scale · g + offset``, then gradient clipping, weight decay and momentum. A frozen client does not
move and accumulates the sum of its minibatch gradients at the start point.

Results equal the sequential trainer's up to float32 reassociation: a batched matmul may sum in
a different order than the per-client one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..config.train import TrainConfig
from ..models.flat import FlatModel
from ..models.scoring import cross_entropy
from .local_sgd import LocalObjective, sgd_direction

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class StackedObjective:
    """The fields of each client's :class:`LocalObjective` stacked on a client axis (None: no client uses it)."""

    offset: torch.Tensor | None = None  # (k, dim)
    scale: torch.Tensor | None = None  # (k,)
    prox_mu: torch.Tensor | None = None  # (k,)
    freeze: torch.Tensor | None = None  # (k,) bool

    @classmethod
    def stack(cls, objectives: Sequence[LocalObjective | None], dim: int, dtype: torch.dtype,
              device: torch.device | str = "cpu") -> "StackedObjective":
        objs = [o if o is not None and not o.is_plain() else None for o in objectives]
        k = len(objs)
        offset = scale = mu = freeze = None
        if any(o is not None and o.offset is not None for o in objs):
            offset = torch.zeros(k, dim, dtype=dtype)
            for i, o in enumerate(objs):
                if o is not None and o.offset is not None:
                    offset[i] = o.offset.reshape(-1).to(dtype)
            offset = offset.to(device)
        if any(o is not None and o.scale != 1.0 for o in objs):
            scale = torch.tensor([1.0 if o is None else o.scale for o in objs], dtype=dtype, device=device)
        if any(o is not None and o.prox_mu for o in objs):
            mu = torch.tensor([0.0 if o is None else o.prox_mu for o in objs], dtype=dtype, device=device)
        if any(o is not None and o.freeze for o in objs):
            freeze = torch.tensor([o is not None and o.freeze for o in objs], device=device)
        return cls(offset, scale, mu, freeze)


def padded_rows(batches: Sequence[Sequence[np.ndarray]], first_row: np.ndarray, batch_size: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Global row numbers ``(steps_max, k, batch_size)`` and real-row counts ``(steps_max, k)``.

    ``batches[i]`` are client ``i``'s minibatches (local row indices) and ``first_row[i]`` its first
    row in the dataset's arrays. Padding repeats a valid row (it is masked out): the client's first,
    or row 0 for a client without data (whose offset may be the end of the arrays).
    """
    batches = [b if isinstance(b, list) else list(b) for b in batches]  # batch_indices yields lazily
    k = len(batches)
    steps = max((len(b) for b in batches), default=0)
    rows = np.zeros((steps, k, batch_size), dtype=np.int64)
    counts = np.zeros((steps, k), dtype=np.int64)
    for i, client_batches in enumerate(batches):
        rows[:, i] = first_row[i] if len(client_batches) else 0
        for s, idx in enumerate(client_batches):
            rows[s, i, :len(idx)] = first_row[i] + idx
            counts[s, i] = len(idx)
    return rows, counts


@dataclass
class StackedResult:
    """What :meth:`StackedTrainer.train` produced for ``k`` clients (tensors on the training device)."""

    params: torch.Tensor  # (k, dim) end points
    grad_sum: torch.Tensor | None  # (k, dim) Σ of gradients at the start point (frozen clients; 0 elsewhere)
    mean_loss: np.ndarray  # (k,) mean loss over the samples processed
    samples: np.ndarray  # (k,) samples processed


class StackedTrainer:
    """Minibatch SGD (momentum, nesterov, weight decay, clipping) for a stack of clients."""

    def __init__(self, model: FlatModel, cfg: TrainConfig, compile: bool = False):
        self.model, self.cfg = model, cfg

        def loss_fn(params: Params, buffers: dict, x: torch.Tensor, y: torch.Tensor, count: torch.Tensor
                    ) -> torch.Tensor:
            ce = cross_entropy(model.forward(params, buffers, x), x, y, reduction="none")
            real = torch.arange(ce.shape[0], device=ce.device) < count
            return torch.where(real, ce, torch.zeros_like(ce)).sum() / count.clamp(min=1)

        self._grad = torch.func.vmap(torch.func.grad_and_value(loss_fn), in_dims=(0, None, 0, 0, 0))
        if compile:  # traced once per chunk shape: the transforms' Python work leaves the step
            self._grad = torch.compile(self._grad)

    def train(self, starts: torch.Tensor, buffers: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
              counts: torch.Tensor, lr: float, objective: StackedObjective | None = None) -> StackedResult:
        """Train ``k`` clients from ``starts`` ``(k, dim)`` on padded batches ``x (S, k, B, ...)``, ``y (S, k, B)``.

        ``counts (S, k)``: real rows per step (0 once a client has taken all its steps).
        """
        cfg, model = self.cfg, self.model
        obj = objective or StackedObjective()
        self.model.module.train()
        n_steps, k = counts.shape
        params = {n: v.clone() for n, v in _split(starts, model).items()}
        anchor = _split(starts, model) if obj.prox_mu is not None else None
        offset = _split(obj.offset, model) if obj.offset is not None else None
        grad_sum = torch.zeros_like(starts) if obj.freeze is not None else None
        velocity: Params | None = None
        losses = torch.zeros(n_steps, k, dtype=torch.float32, device=starts.device)
        for s in range(n_steps):
            count = counts[s]
            grads, loss = self._grad(params, buffers, x[s], y[s], count)
            losses[s] = loss.detach()
            active = count > 0
            moving = active
            if obj.freeze is not None:
                frozen = active & obj.freeze
                flat = torch.cat([g.reshape(k, -1) for g in grads.values()], dim=1)
                grad_sum.add_(torch.where(frozen[:, None], flat, torch.zeros_like(flat)))
                moving = active & ~obj.freeze
            if anchor is not None:
                grads = {n: g + _per_client(obj.prox_mu, g) * (params[n] - anchor[n]) for n, g in grads.items()}
            if obj.scale is not None:
                grads = {n: _per_client(obj.scale, g) * g for n, g in grads.items()}
            if offset is not None:
                grads = {n: g + offset[n] for n, g in grads.items()}
            if cfg.grad_clip is not None:
                norm = torch.sqrt(sum((g * g).reshape(k, -1).sum(dim=1) for g in grads.values()))
                factor = torch.clamp(cfg.grad_clip / (norm + 1e-12), max=1.0)
                grads = {n: g * _per_client(factor, g) for n, g in grads.items()}
            step, new_v = sgd_direction(cfg, params, grads, velocity)
            if cfg.momentum:  # a client that has taken all its steps keeps its velocity
                velocity = new_v if velocity is None else \
                    {n: torch.where(_per_client(moving, v), v, velocity[n]) for n, v in new_v.items()}
            params = {n: torch.where(_per_client(moving, p), p - lr * step[n], p) for n, p in params.items()}
        counts_np = counts.cpu().numpy()
        losses_np = losses.cpu().numpy().astype(np.float64)
        total = np.zeros(k)
        for s in range(n_steps):  # step by step, as the sequential trainer adds float(loss) · len(batch)
            total += losses_np[s] * counts_np[s]
        samples = counts_np.sum(axis=0)
        end = torch.cat([params[n].reshape(k, -1) for n in model.names], dim=1)
        return StackedResult(end, grad_sum, total / np.maximum(1, samples), samples)


def _split(flat: torch.Tensor, model: FlatModel) -> Params:
    """Views of ``(k, dim)`` as ``{name: (k, *shape)}``."""
    k = flat.shape[0]
    return {n: t.reshape(k, *s) for n, t, s in zip(model.names, torch.split(flat, model.sizes, dim=1), model.shapes)}


def _per_client(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A ``(k,)`` tensor shaped to broadcast against ``like`` ``(k, ...)``."""
    return values.reshape(-1, *([1] * (like.dim() - 1)))


__all__ = ["StackedObjective", "StackedResult", "StackedTrainer", "padded_rows"]
