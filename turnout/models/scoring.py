"""How a model's output is scored against a sample ``(x, y)``: the loss and the hits.

A model returns either one prediction per sample, logits ``(B, C)`` scored against the label ``y``, or
a prediction at every position of a token sequence, logits ``(B, T, C)``: position ``t`` predicts the
token that follows ``x[:, :t+1]``, so its targets are ``x`` shifted by one with ``y`` last
(:func:`sequence_targets`), as the per-position loss of TFF's / FedProx's Shakespeare models scores every
character of a snippet. A sample's loss is then the mean of its ``T`` per-position cross-entropies and
its hits the share of positions predicted right, so means over samples are means over positions (every
sample has the same ``T``). Training, evaluation and probes score through these functions, so the two
kinds of output are scored alike everywhere; a ``(B, C)`` output is scored by exactly the calls the
trainer always made (the same numbers to the bit).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sequence_targets(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The next token at every position of the token windows ``x (B, T)`` whose next token is ``y (B,)``."""
    return torch.cat([x[:, 1:], y.reshape(-1, 1).to(x.dtype)], dim=1).long()


def cross_entropy(logits: torch.Tensor, x: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of the output ``logits`` on samples ``(x, y)``: per sample (``none``), summed or averaged."""
    if logits.dim() == 2:
        return F.cross_entropy(logits, y, reduction=reduction)
    per_position = F.cross_entropy(logits.transpose(1, 2), sequence_targets(x, y), reduction="none")  # (B, T)
    per_sample = per_position.mean(dim=1)
    if reduction == "none":
        return per_sample
    return per_sample.sum() if reduction == "sum" else per_sample.mean()


def hits(logits: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per sample: whether the prediction is right (bool, ``(B, C)`` output) or the share of positions that are
    (float64, ``(B, T, C)`` output)."""
    if logits.dim() == 2:
        return logits.argmax(1) == y
    return (logits.argmax(2) == sequence_targets(x, y)).to(torch.float64).mean(dim=1)


__all__ = ["cross_entropy", "hits", "sequence_targets"]
