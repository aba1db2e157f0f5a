"""Federated datasets (arrays + per-client offsets), their loaders and partitioners."""

from . import digits, huggingface, idx, leaf, partition, population, shakespeare, synthetic  # noqa: F401  (register)
from .federated import FederatedDataset
from .registry import DATASETS, PARTITIONERS

__all__ = ["DATASETS", "PARTITIONERS", "FederatedDataset"]
