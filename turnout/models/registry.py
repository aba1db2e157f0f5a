"""Registry of model architectures.

An entry is a class with a pydantic ``Config`` and a ``build(cfg, input_shape, num_classes)``
classmethod returning a plain ``torch.nn.Module`` whose ``forward`` maps a batch of inputs
(shape ``(B, *input_shape)``) to logits ``(B, num_classes)``.
"""

from __future__ import annotations

from ..registry import Registry

MODELS: Registry = Registry("model", "the network every client trains")
