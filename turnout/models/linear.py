"""Convex and shallow baselines: multinomial logistic regression and a plain MLP.

Both flatten any input shape, so they work on tabular vectors ``(d,)`` as well as images.
No Dropout anywhere: the simulator's seeded randomness streams cannot reach dropout masks, so a
dropout layer would make client updates irreproducible.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field
from torch import nn

from ..config.base import StrictModel
from ..config.limits import MAX_WIDTH
from .registry import MODELS


def _flat_dim(input_shape: tuple[int, ...]) -> int:
    if not input_shape or any(int(s) < 1 for s in input_shape):
        raise ValueError(f"input_shape must be non-empty with positive sizes, got {tuple(input_shape)}")
    return math.prod(int(s) for s in input_shape)


@MODELS.register("logreg")
class LogReg:
    """Multinomial logistic regression (convex baseline of FedProx/FedGS synthetic tasks)."""

    class Config(StrictModel):
        bias: bool = True
        """Learn an intercept per class (``False`` gives a bias-free linear map)."""

    @classmethod
    def build(cls, cfg: "LogReg.Config", input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(_flat_dim(input_shape), num_classes, bias=cfg.bias))


@MODELS.register("mlp")
class MLP:
    """Multilayer perceptron: flatten, then hidden Linear+activation layers, then a Linear head."""

    class Config(StrictModel):
        hidden: Annotated[list[Annotated[int, Field(ge=1, le=MAX_WIDTH)]],
                          Field(min_length=1, max_length=1000)] = [200, 200]
        """Widths of the hidden layers (default: the 2NN of McMahan et al. 2017); use logreg for none."""
        activation: Literal["relu", "tanh"] = "relu"

    @classmethod
    def build(cls, cfg: "MLP.Config", input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        act = {"relu": nn.ReLU, "tanh": nn.Tanh}[cfg.activation]
        layers: list[nn.Module] = [nn.Flatten()]
        width = _flat_dim(input_shape)
        for h in cfg.hidden:
            layers += [nn.Linear(width, h), act()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        return nn.Sequential(*layers)


__all__ = ["LogReg", "MLP"]
