"""Local-training hyper-parameters and the per-round learning-rate schedule."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from .base import StrictModel
from .limits import MAX_BATCH, MAX_EPOCHS, MAX_LR, MAX_ROUNDS, MAX_SCALE, MAX_STEPS


class LRSchedule(StrictModel):
    """Client learning rate as a function of the round (FL papers decay it per round, not per step)."""

    name: Literal["constant", "step", "exponential", "cosine", "inverse_sqrt"] = Field(
        "constant", description="shape of the decay over rounds")
    gamma: float = Field(0.5, gt=0.0, le=1.0,
                         description="decay factor (step: per step_size rounds; exponential: per round)")
    step_size: int = Field(50, ge=1, le=MAX_ROUNDS, description="rounds between decays for 'step'")
    min_lr: float = Field(0.0, ge=0.0, le=MAX_LR, description="floor of 'cosine'")
    sqrt_scale: float = Field(1.0, gt=0.0, le=MAX_ROUNDS, description="inverse_sqrt: lr / sqrt(round / sqrt_scale + 1) "
                                                                      "(FedSUM's seed uses 10)")

    def lr(self, base: float, round: int, total_rounds: int) -> float:
        if self.name == "constant":
            return base
        if self.name == "step":
            return base * self.gamma ** (round // self.step_size)
        if self.name == "exponential":
            return base * self.gamma ** round
        if self.name == "cosine":
            frac = round / max(1, total_rounds - 1)
            return self.min_lr + 0.5 * (base - self.min_lr) * (1.0 + math.cos(math.pi * frac))
        return base / math.sqrt(round / self.sqrt_scale + 1)  # inverse_sqrt


class TrainConfig(StrictModel):
    """How a selected client trains: E local steps (or epochs) of minibatch SGD."""

    batch_size: int = Field(10, ge=1, le=MAX_BATCH, description="samples per local SGD step")
    local_steps: int | None = Field(None, ge=1, le=MAX_STEPS,
                                    description="SGD steps per round (default 10 when local_epochs is unset)")
    local_epochs: float | None = Field(None, gt=0.0, le=MAX_EPOCHS,
                                       description="passes over local data per round (alternative to local_steps)")
    lr: float = Field(0.01, gt=0.0, le=MAX_LR, description="client learning rate at round 0 (see lr_schedule)")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="local SGD momentum, reset every round")
    nesterov: bool = Field(False, description="Nesterov momentum (needs momentum > 0)")
    weight_decay: float = Field(0.0, ge=0.0, le=MAX_SCALE, description="L2 penalty added to the local gradient")
    grad_clip: float | None = Field(None, gt=0.0, description="clip each step's gradient to this global L2 norm")
    lr_schedule: LRSchedule = Field(LRSchedule(), description="client lr as a function of the round")

    @model_validator(mode="after")
    def _steps_or_epochs(self):
        if self.local_steps is not None and self.local_epochs is not None:
            raise ValueError("set either local_steps or local_epochs, not both")
        if self.nesterov and self.momentum == 0.0:
            raise ValueError("nesterov needs momentum > 0")
        return self

    def steps_for(self, n_samples):
        """Local steps for clients holding ``n_samples`` (vectorised over clients)."""
        import numpy as np

        n = np.asarray(n_samples)
        if self.local_epochs is not None:
            return np.maximum(1, np.ceil(self.local_epochs * n / self.batch_size)).astype(np.int64)
        return np.full(n.shape, self.local_steps or 10, dtype=np.int64)
