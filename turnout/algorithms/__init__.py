"""Algorithm seam: a client rule (what a client computes and sends) + a server rule (how reports become the next \
model)."""

from . import (  # noqa: F401  (registers components)
    adaptive_ou,
    fedasync,
    fedau,
    fedavg,
    fedawe,
    fedbuff,
    fedprox,
    fedsum,
    fedvarp,
    mifa,
    safa,
    scaffold,
    server_optim,
    stale_aware,
)
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmContext", "Reports"]
