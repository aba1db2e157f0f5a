"""Rounded-linear labels of Gaussian features: the synthetic task of Adaptive-OU's §4.1.

Ribero & Vikalo, "Reducing communication in federated learning via efficient client sampling" (Adaptive-OU;
Pattern Recognition 2024, arXiv:2007.15197), §4.1: 10⁴ samples ``x ~ N(0, I₁₀₀)``, one ``β ~ N(0, I₁₀₀)``, labels
``y = round(xᵀβ)``, split evenly among 100 clients, a logistic regression. It is a homogeneous task (every
client draws from one distribution), unlike FedProx's Synthetic(α, β) in :mod:`turnout.data.synthetic`,
whose per-client models, feature means and lognormal sizes it shares nothing with: hence a module of its own.

Classes. ``xᵀβ ~ N(0, ‖β‖²)`` with ``‖β‖² ≈ dim``, so the labels are integers spread over about ±4·√dim
(≈ 75 distinct values at the paper's sizes). Every integer from the smallest label to the largest is a class,
``class = y − min(y)`` (``num_classes = max − min + 1``): the paper does not bin its labels, and merging
the sparse tails into end classes would change the task it reports on. The tails cost little — the classes
beyond ±2.5·√dim hold about 1 % of the rows — and a softmax regression can express the rule exactly
(``argmax_k (k·xᵀβ − k²/2)`` is ``round(xᵀβ)``), so what limits accuracy is training, not the model.
The class count therefore depends on the data seed; it is known once the data is built.

Rows are IID, so client ``i`` takes the next ``n_i`` rows (sizes differ by at most one) and keeps the
first ``int(0.9·n_i)`` for training and the rest as its test part (FedProx's 90/10, which
:mod:`turnout.data.synthetic` also uses; the paper gives no split); the server tests on the union of the
test parts. Labels are computed with :func:`turnout.core.numerics.ordered_matmul`: a label is a
discrete outcome and must not depend on which BLAS kernel the machine picks.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from ..config.base import StrictModel
from ..config.limits import MAX_CLIENTS, MAX_FEATURES, MAX_SAMPLES, MAX_SEED
from ..core import numerics
from ..core import rng as rngmod
from ..core.errors import ConfigError
from .federated import DataFootprint, FederatedDataset, offsets_from_counts
from .registry import DATASETS

#: share of each client's rows used for training (FedProx's split; the rest is the client's test part)
TRAIN_FRACTION = 0.9


def labels(x: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """``round(x β)`` as int64 (ties to even, as numpy and TensorFlow round), summed in a fixed order."""
    return np.rint(numerics.ordered_matmul(x, beta)).astype(np.int64)


def client_sizes(num_samples: int, num_clients: int) -> np.ndarray:
    """An even split: ``num_samples // num_clients`` rows each, one more for the first ``num_samples % num_clients``."""
    q, r = divmod(num_samples, num_clients)
    return (q + (np.arange(num_clients) < r)).astype(np.int64)


@DATASETS.register("rounded_linear")
class RoundedLinearDataset:
    """Adaptive-OU §4.1's synthetic task: ``x ~ N(0, I)``, ``y = round(xᵀβ)`` with ``β ~ N(0, I)``, split evenly.

    Classes are ``y − min(y)``, every integer between the extremes (so ``num_classes`` comes from the data);
    each client keeps its first 90 % of rows for training, the rest for testing; the server tests on the
    union of the test parts. ``extras["beta"]`` holds the true ``β``.
    """

    class Config(StrictModel):
        num_samples: int = Field(10_000, ge=2, le=MAX_SAMPLES, description="rows in all (the paper: 10^4)")
        dim: int = Field(100, ge=1, le=MAX_FEATURES, description="features per row (the paper: 100)")
        num_clients: int = Field(100, ge=1, le=MAX_CLIENTS, description="clients the rows are split evenly "
                                                                        "among (the paper: 100)")
        data_seed: int | None = Field(None, ge=0, le=MAX_SEED,
                                      description="seed of the data; default: the run seed (0 <= seed < 2^32)")

        @model_validator(mode="after")
        def _two_rows_each(self):
            if self.num_samples < 2 * self.num_clients:
                raise ConfigError("num_samples", self.num_samples,
                                  f"must be >= 2 x num_clients ({2 * self.num_clients}) so every client has a "
                                  "train row and a test row")
            return self

    @classmethod
    def footprint(cls, cfg: "RoundedLinearDataset.Config") -> DataFootprint:
        """Features drawn as float64, copied to float32 and split (about three float32 copies), plus labels;
        the class count depends on the draw, so it is left unknown."""
        n, dim = cfg.num_samples, cfg.dim
        return DataFootprint(n * (dim * (8 + 4 + 4) + 3 * 8), "num_samples", num_clients=cfg.num_clients,
                             input_shape=(dim,), num_classes=None,
                             max_client_rows=int(client_sizes(n, cfg.num_clients)[0]))

    @classmethod
    def build(cls, cfg: "RoundedLinearDataset.Config", seed: int) -> FederatedDataset:
        data_seed = seed if cfg.data_seed is None else cfg.data_seed
        beta = rngmod.stream(data_seed, "rounded-linear-beta").standard_normal(cfg.dim)
        x64 = rngmod.stream(data_seed, "rounded-linear-x").standard_normal((cfg.num_samples, cfg.dim))
        y = labels(x64, beta)
        y -= y.min()
        x = x64.astype(np.float32)
        del x64
        sizes = client_sizes(cfg.num_samples, cfg.num_clients)
        n_train = (TRAIN_FRACTION * sizes).astype(np.int64)
        starts = offsets_from_counts(sizes)[:-1]
        owner = np.repeat(np.arange(cfg.num_clients), sizes)
        pos = np.arange(cfg.num_samples) - starts[owner]
        train = pos < n_train[owner]
        tr, te = np.flatnonzero(train), np.flatnonzero(~train)
        return FederatedDataset(
            name="rounded_linear",
            x_train=x[tr], y_train=y[tr], train_offsets=offsets_from_counts(n_train),
            x_test=x[te], y_test=y[te], test_offsets=offsets_from_counts(sizes - n_train),
            x_server_test=x[te], y_server_test=y[te],
            num_classes=int(y.max()) + 1, input_shape=(cfg.dim,),
            client_names=np.array([f"c{i:0{len(str(cfg.num_clients - 1))}d}" for i in range(cfg.num_clients)]),
            extras={"beta": beta.astype(np.float32)},
        )
