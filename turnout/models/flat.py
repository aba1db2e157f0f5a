"""A model's parameters as one flat float32 vector.

Everything downstream of local training — aggregation, compression, the per-coordinate byte
ledger, per-client state — works on flat vectors, because that is what goes on the wire and
what a coordinate index refers to. :class:`FlatModel` converts between the flat vector and the
named tensors ``torch.func.functional_call`` needs, so the client rule stays a pure function of
parameter tensors (and a vectorised executor can ``vmap`` it later).
"""

from __future__ import annotations

import torch
from torch import nn


class FlatModel:
    """A module plus the layout of its trainable parameters inside a flat vector."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.names: list[str] = []
        self.shapes: list[torch.Size] = []
        self.sizes: list[int] = []
        for name, p in module.named_parameters():
            self.names.append(name)
            self.shapes.append(p.shape)
            self.sizes.append(p.numel())
        self.dim = int(sum(self.sizes))
        self.buffer_names = [n for n, _ in module.named_buffers()]

    def flat_params(self) -> torch.Tensor:
        """The module's current parameters as one detached float32 vector (a copy)."""
        return torch.cat([p.detach().reshape(-1).to(torch.float32) for p in self.module.parameters()])

    def buffers(self) -> dict[str, torch.Tensor]:
        """Copies of the module's buffers (BatchNorm running statistics), by name."""
        return {n: b.detach().clone() for n, b in self.module.named_buffers()}

    def buffer_bytes(self) -> int:
        """Wire size of the buffers: they are always sent dense and uncompressed."""
        return int(sum(b.numel() * b.element_size() for b in self.module.buffers()))

    def unflatten(self, vec: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named views into ``vec`` with each parameter's shape (no copy; keeps autograd links)."""
        return {n: t.view(s) for n, t, s in zip(self.names, torch.split(vec, self.sizes), self.shapes)}

    def flatten(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([params[n].reshape(-1) for n in self.names])

    def forward(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                x: torch.Tensor) -> torch.Tensor:
        # tie_weights=False: none of our models tie weights, and untying costs ~10 % of a small step.
        return torch.func.functional_call(self.module, (params, buffers), (x,), tie_weights=False)
