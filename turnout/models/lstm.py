"""Character-level LSTM of the LEAF Shakespeare benchmark (Caldas et al. 2018).

LEAF's ``shakespeare/stacked_lstm.py``: Embedding(80 chars, 8) → 2-layer LSTM(256) → Linear on
the last time step's output, predicting the next character. Here the vocabulary size is
``num_classes`` (inputs and targets share one alphabet). No dropout (the simulator's seeded
randomness streams cannot reach dropout masks).

``predict: every`` instead applies the Linear at every time step, predicting the character after each
position (the per-position loss of TFF's Shakespeare model, which Reddi et al. 2021 and Adaptive-OU train):
logits ``(B, T, num_classes)``, scored by :mod:`turnout.models.scoring` against the window shifted by one.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from ..config.base import StrictModel
from ..config.limits import MAX_WIDTH
from .registry import MODELS, ModelTraits


class UnrolledLSTM(nn.Module):
    """A batch-first multi-layer LSTM written with plain matmuls over time steps.

    Same parameter names, shapes, gate order (i, f, g, o) and initialisation order as
    ``nn.LSTM(batch_first=True)``, so the two are interchangeable (identical init under one torch
    seed; outputs equal up to float rounding). Why it exists: ``nn.LSTM``'s fused kernel has no
    ``torch.func.vmap`` batching rule, so a vmap executor that trains many clients at once
    needs this version.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        for k in range(num_layers):
            in_k = input_size if k == 0 else hidden_size
            # Registration order matches nn.LSTM: w_ih, w_hh, b_ih, b_hh per layer.
            self.register_parameter(f"weight_ih_l{k}", nn.Parameter(torch.empty(4 * hidden_size, in_k)))
            self.register_parameter(f"weight_hh_l{k}", nn.Parameter(torch.empty(4 * hidden_size, hidden_size)))
            self.register_parameter(f"bias_ih_l{k}", nn.Parameter(torch.empty(4 * hidden_size)))
            self.register_parameter(f"bias_hh_l{k}", nn.Parameter(torch.empty(4 * hidden_size)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        b, t, _ = x.shape
        out = x
        for k in range(self.num_layers):
            w_ih, w_hh = getattr(self, f"weight_ih_l{k}"), getattr(self, f"weight_hh_l{k}")
            bias = getattr(self, f"bias_ih_l{k}") + getattr(self, f"bias_hh_l{k}")
            pre = out @ w_ih.T + bias  # input projections for all steps at once: (B, T, 4H)
            h = out.new_zeros(b, self.hidden_size)
            c = out.new_zeros(b, self.hidden_size)
            hs = []
            for s in range(t):
                gates = pre[:, s] + h @ w_hh.T
                i, f, g, o = gates.chunk(4, dim=1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                hs.append(h)
            out = torch.stack(hs, dim=1)
        return out, None


class CharLSTMNet(nn.Module):
    def __init__(self, vocab: int, embed_dim: int, hidden: int, layers: int, impl: str, every: bool = False):
        super().__init__()
        self.every = every
        self.embed = nn.Embedding(vocab, embed_dim)
        if impl == "fused":
            self.lstm: nn.Module = nn.LSTM(embed_dim, hidden, num_layers=layers, batch_first=True)
        else:
            self.lstm = UnrolledLSTM(embed_dim, hidden, layers)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x.long()))
        return self.head(out) if self.every else self.head(out[:, -1])


@MODELS.register("char_lstm")
class CharLSTM:
    """LEAF Shakespeare next-character model: Embedding(8) → 2-layer LSTM(256) → Linear, last step (or every step)."""

    class Config(StrictModel):
        embed_dim: int = Field(8, ge=1, le=MAX_WIDTH)
        hidden: int = Field(256, ge=1, le=MAX_WIDTH)
        layers: int = Field(2, ge=1, le=1000)
        impl: Literal["fused", "unrolled"] = "fused"
        """'fused': nn.LSTM (fastest for one model); 'unrolled': same parameters and init in plain
        matmuls, which works under torch.func.vmap (for executors that stack many clients)."""
        predict: Literal["last", "every"] = "last"
        """'last': the character after the window (LEAF's model); 'every': the next character at every one of
        the window's positions, loss and accuracy averaged over positions (TFF's Shakespeare). 'every' needs
        inputs in the labels' alphabet (the shakespeare dataset's, or a hub dataset's token windows)."""

    @classmethod
    def traits(cls, cfg: "CharLSTM.Config") -> ModelTraits:
        return ModelTraits(vmap_blocker=("impl", cfg.impl, "nn.LSTM's fused kernel has no vmap batching rule; "
                                                          "set model.impl: unrolled") if cfg.impl == "fused" else None)

    @classmethod
    def build(cls, cfg: "CharLSTM.Config", input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        if len(input_shape) != 1 or int(input_shape[0]) < 1:
            raise ValueError("char_lstm needs int token sequences, input_shape (seq_len,); "
                             f"got input_shape={tuple(input_shape)}")
        return CharLSTMNet(num_classes, cfg.embed_dim, cfg.hidden, cfg.layers, cfg.impl, every=cfg.predict == "every")


__all__ = ["CharLSTM", "CharLSTMNet", "UnrolledLSTM"]
