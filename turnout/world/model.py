"""The server's model during a run, and the read-only view of it that components may use.

Components that compare clients through the model itself (FedGS's functional graph) get a
:class:`ModelView` inside their :class:`~turnout.world.context.WorldContext` at construction —
a forward pass, a batch of server-side inputs and the current global parameters — instead of
reaching into the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..core.state import Stateful
from ..models.flat import FlatModel


@dataclass(frozen=True)
class ModelView:
    """Read access to the global model: ``forward(flat_params, x)``, server inputs, current parameters."""

    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    server_inputs: torch.Tensor
    global_params: Callable[[], torch.Tensor]


class GlobalModel(Stateful):
    """The flat parameter vector and buffers (BatchNorm statistics) the server holds."""

    state_attrs = ("params", "buffers")

    def __init__(self, flat: FlatModel, server_inputs: torch.Tensor):
        self.flat = flat
        self.params = flat.flat_params()
        self.buffers = flat.buffers()
        self.server_inputs = server_inputs

    def forward(self, flat_params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.flat.forward(self.flat.unflatten(flat_params), self.buffers, x)

    def view(self) -> ModelView:
        return ModelView(forward=self.forward, server_inputs=self.server_inputs, global_params=lambda: self.params)
