"""The global models that reports still in flight started from, kept only while someone holds them.

FedAsync mixes a client's *model* into the server's, ``x ← (1 − α) x + α (x_origin + Δ)``, so the
server needs the version each in-flight client downloaded. Only the versions of reports still in
flight are kept: at most one per round that launched a client still computing, so never more than
the concurrency C (the run's pre-flight says how much memory that is).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch

from ..core.state import Stateful


class ModelVersions(Stateful):
    """Server model versions by round, on the CPU."""

    state_attrs = ("models",)

    def __init__(self):
        self.models: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.models)

    def hold(self, version: int, params: torch.Tensor) -> None:
        """Keep ``params`` as version ``version`` (the model a cohort launched in that round downloaded)."""
        if int(version) not in self.models:
            self.models[int(version)] = params.detach().cpu().clone()

    def rows(self, versions: np.ndarray, current: tuple[int, torch.Tensor]) -> torch.Tensor:
        """The models that reports of ``versions`` started from, one row each; version ``current[0]`` is the
        model ``current[1]`` (the round's own, not copied before it is needed)."""
        now, params = current
        if len(versions) == 0:
            return torch.zeros((0, params.numel()), dtype=params.dtype)
        return torch.stack([params if int(v) == now else self.models[int(v)] for v in versions])

    def keep_only(self, versions: Iterable[int]) -> None:
        """Forget every version no report in flight still holds."""
        held = {int(v) for v in versions}
        for v in [v for v in self.models if v not in held]:
            del self.models[v]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.models.values())


__all__ = ["ModelVersions"]
