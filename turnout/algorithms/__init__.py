"""Algorithm seam: a client rule (what a client computes and sends) + a server rule (how reports become the next model)."""

from . import fedavg  # noqa: F401  (registers components)
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmContext", "Reports"]
