"""Registry of model architectures.

An entry is a class with a pydantic ``Config`` and a ``build(cfg, input_shape, num_classes)``
classmethod returning a plain ``torch.nn.Module`` whose ``forward`` maps a batch of inputs
(shape ``(B, *input_shape)``) to logits ``(B, num_classes)`` — or, for a model of token windows that
predicts at every position, ``(B, T, num_classes)`` (:mod:`turnout.models.scoring` says how each is
scored). An entry may also define
``traits(cfg) -> ModelTraits``: what an executor must know before the model is built, so config
validation can refuse an executor that cannot train it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.registry import Registry

MODELS: Registry = Registry("model", "the network every client trains")


@dataclass(frozen=True)
class ModelTraits:
    """Properties of an architecture under given options that decide which executors can train it."""

    #: BatchNorm running statistics: buffers that training changes, per client
    running_stats: bool = False
    #: ``(option, value, fix)`` when that option selects a layer ``torch.func.vmap`` cannot batch
    vmap_blocker: tuple[str, object, str] | None = None


def model_traits(cls: type, cfg) -> ModelTraits:
    """The traits a model class declares for options ``cfg`` (none declared: plain layers)."""
    traits = getattr(cls, "traits", None)
    return traits(cfg) if traits is not None else ModelTraits()
