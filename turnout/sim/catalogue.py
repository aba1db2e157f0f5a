"""What an experiment can be made of: the seams, the registries that name their components, the plain blocks.

One table (:data:`SEAMS`) says, per seam, its config key, the package whose import registers its
components and the registry; :func:`listed_registries` is what ``turnout list`` shows and what a
plugin may add to (:mod:`turnout.sim.plugins` takes back a bad plugin's registrations from them).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel

from ..config.schema import EvalConfig, OutputConfig, RuntimeConfig
from ..config.train import LRSchedule, TrainConfig
from ..core.registry import Registry
from ..data.registry import PARTITIONERS
from ..loggers import LOGGERS


@dataclass(frozen=True)
class Seam:
    """One simulation concern: its config block, where its components live, how one is built."""

    key: str
    package: str
    registry: str
    receives: str  # the constructor's arguments, as `turnout list` documents them

    def load(self) -> Registry:
        return getattr(importlib.import_module(self.package), self.registry)


#: Every seam, in the order its block is validated (and written to ``config.yaml``).
SEAMS: tuple[Seam, ...] = (
    Seam("data", "turnout.data", "DATASETS", "build(cfg, seed) → FederatedDataset"),
    Seam("model", "turnout.models", "MODELS", "build(cfg, input_shape, num_classes) → torch.nn.Module"),
    Seam("algorithm", "turnout.algorithms", "ALGORITHMS", "(cfg, AlgorithmContext)"),
    Seam("selector", "turnout.selectors", "SELECTORS", "(cfg, WorldContext)"),
    Seam("availability", "turnout.availability", "AVAILABILITY", "(cfg, WorldContext)"),
    Seam("devices", "turnout.devices", "DEVICES", "(cfg); .profiles(num_clients, seed) → DeviceProfiles"),
    Seam("round_mode", "turnout.round_modes", "ROUND_MODES", "(cfg)"),
    Seam("compressor", "turnout.compressors", "COMPRESSORS", "(cfg, dim, seed, store, layout)"),
    Seam("executor", "turnout.executors", "EXECUTORS", "(cfg)"),
    Seam("recorder", "turnout.recorders", "RECORDERS", "(cfg)"),
    Seam("privacy", "turnout.privacy", "PRIVACY", "(cfg, PrivacyContext)"),
    Seam("secure_aggregation", "turnout.privacy", "SECURE_AGGREGATION", "(cfg)"),
)


@cache
def registries() -> dict[str, Registry]:
    """Config key → registry for every seam (imports the component packages so they register)."""
    return {s.key: s.load() for s in SEAMS}


@cache
def component_lists() -> dict[str, Registry]:
    """Top-level keys that hold a list of components, not one: ``loggers: [tensorboard, mlflow]``."""
    return {"loggers": LOGGERS}


@cache
def listed_registries() -> dict[str, Registry]:
    """What ``turnout list`` names: every seam, the partitioners that pooled datasets take, the loggers."""
    return {**registries(), "data.partition": PARTITIONERS, **component_lists()}


#: The blocks of an experiment that are not components (no ``name`` to choose): their key → options model.
BLOCKS: dict[str, type[BaseModel]] = {
    "train": TrainConfig, "train.lr_schedule": LRSchedule, "eval": EvalConfig, "runtime": RuntimeConfig,
    "output": OutputConfig,
}
