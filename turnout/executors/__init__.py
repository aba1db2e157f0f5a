"""Executor seam: how the local training of a cohort is run."""

from . import auto, parallel, ray_actors, sequential, vectorized  # noqa: F401  (registers components)
from .base import EXECUTORS, ClientBatch, CohortResult, Executor

__all__ = ["EXECUTORS", "ClientBatch", "CohortResult", "Executor"]
