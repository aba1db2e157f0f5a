"""Registries of dataset builders and partitioners.

A dataset entry is a class with a pydantic ``Config`` (its options, validated up front — a
missing path is a config error, not a crash mid-run) and a ``build(cfg, seed)`` classmethod
returning a :class:`~turnout.data.federated.FederatedDataset`. A partitioner entry has a ``Config``
and ``assign(cfg, labels, num_clients, rng) -> client_of_row`` (−1 = row unused).
"""

from __future__ import annotations

from ..core.registry import Registry

DATASETS: Registry = Registry("dataset", "where client data comes from and how it is split")
PARTITIONERS: Registry = Registry("partition", "how a pooled dataset is split over clients")
