"""Federated datasets (arrays + per-client offsets), their loaders and partitioners."""

from . import (  # noqa: F401  (register components)
    digits,
    flower_partition,
    huggingface,
    idx,
    leaf,
    partition,
    population,
    rounded_linear,
    shakespeare,
    synthetic,
    synthetic_images,
)
from .federated import FederatedDataset
from .registry import DATASETS, PARTITIONERS

__all__ = ["DATASETS", "PARTITIONERS", "FederatedDataset"]
