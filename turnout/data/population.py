"""A population of per-client sample counts only: no features, no labels (the system-only mode's data).

A what-if study of availability, selection, bytes and time over a million phones needs how much
data each client holds (it sets compute time and aggregation weights), not the data itself. The
counts are drawn from the seed; the feature arrays are zero-stride views of one zero row, so they
cost no memory while the model is still built for ``input_shape`` — which is what prices its
bytes. Usable only with ``no_train: true`` (``--no-train``): there is nothing to train on.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from ..config.base import StrictModel
from ..config.limits import MAX_CLASSES, MAX_CLIENTS, MAX_FEATURES, MAX_SAMPLES
from ..core import rng as rngmod
from ..core.errors import ConfigError
from .federated import DataFootprint, FederatedDataset, offsets_from_counts
from .registry import DATASETS


class SizesConfig(StrictModel):
    """How many training samples each client holds, drawn from the seed and clipped to ``[min, max]``."""

    distribution: Literal["lognormal", "uniform", "constant"] = Field(
        "lognormal", description="lognormal (median, sigma: the skew of LEAF-style populations), uniform integers "
                                 "in [low, high], or constant value")
    median: float = Field(50.0, ge=1.0, le=MAX_SAMPLES, description="lognormal: median samples per client")
    sigma: float = Field(1.0, ge=0.0, le=10.0, description="lognormal: sigma of log(samples)")
    low: int = Field(1, ge=0, le=MAX_SAMPLES, description="uniform: fewest samples")
    high: int = Field(100, ge=0, le=MAX_SAMPLES, description="uniform: most samples")
    value: int = Field(50, ge=0, le=MAX_SAMPLES, description="constant: samples of every client")
    min: int = Field(1, ge=0, le=MAX_SAMPLES, description="no client holds fewer")
    max: int = Field(10_000, ge=0, le=MAX_SAMPLES, description="no client holds more")


class CountsOnlyDataset(FederatedDataset):
    """A :class:`FederatedDataset` whose rows are all the same zero row: it has sizes, not labels."""

    def label_histogram(self) -> np.ndarray:
        raise ConfigError("data.name", "population", "holds per-client sample counts only (no labels), and a component "
                                                     "of this experiment reads label histograms; choose one that does "
                                                     "not")


@DATASETS.register("population")
class PopulationDataset:
    """Per-client sample counts only (no features or labels), drawn from the seed: for --no-train what-ifs."""

    #: sample counts only: validation refuses it for a run that trains
    counts_only = True

    class Config(StrictModel):
        num_clients: int = Field(1000, ge=1, le=MAX_CLIENTS, description="clients in the population")
        sizes: SizesConfig = Field(default_factory=SizesConfig, description="samples per client")
        input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] = Field(
            [60], min_length=1, max_length=4,
            description="shape of one input: the model is built for it to count its parameters (bytes on the wire)")
        num_classes: int = Field(10, ge=2, le=MAX_CLASSES, description="outputs of the model")

        @model_validator(mode="after")
        def _consistent(self):
            if self.sizes.min > self.sizes.max:
                raise ConfigError("sizes.min", self.sizes.min, f"must be <= sizes.max ({self.sizes.max})")
            if self.sizes.low > self.sizes.high:
                raise ConfigError("sizes.low", self.sizes.low, f"must be <= sizes.high ({self.sizes.high})")
            return self

    @classmethod
    def footprint(cls, cfg: "PopulationDataset.Config") -> DataFootprint:
        """Counts and offsets: three int64 columns over the clients (the rows cost nothing)."""
        n = cfg.num_clients
        return DataFootprint(24 * (n + 1), "num_clients", num_clients=n, input_shape=tuple(cfg.input_shape),
                             num_classes=cfg.num_classes, max_client_rows=0)

    @classmethod
    def counts(cls, cfg: "PopulationDataset.Config", seed: int) -> np.ndarray:
        """Samples per client, from the (seed, "population-sizes") stream."""
        s, n = cfg.sizes, cfg.num_clients
        rng = rngmod.stream(seed, "population-sizes")
        if s.distribution == "lognormal":
            raw = np.floor(rng.lognormal(np.log(s.median), s.sigma, n))
        elif s.distribution == "uniform":
            raw = rng.integers(s.low, s.high + 1, n)
        else:
            raw = np.full(n, s.value)
        return np.clip(raw, s.min, s.max).astype(np.int64)

    @classmethod
    def build(cls, cfg: "PopulationDataset.Config", seed: int) -> FederatedDataset:
        counts = cls.counts(cfg, seed)
        shape = tuple(cfg.input_shape)
        total = int(counts.sum())
        x = np.lib.stride_tricks.as_strided(np.zeros(shape, np.float32), shape=(total + 1, *shape),
                                            strides=(0,) * (len(shape) + 1), writeable=False)
        y = np.lib.stride_tricks.as_strided(np.zeros(1, np.int64), shape=(total + 1,), strides=(0,), writeable=False)
        no_rows = np.zeros(cfg.num_clients + 1, np.int64)
        return CountsOnlyDataset(name="population", x_train=x[:total], y_train=y[:total],
                                 train_offsets=offsets_from_counts(counts), x_test=x[:0], y_test=y[:0],
                                 test_offsets=no_rows, x_server_test=x[total:], y_server_test=y[total:],
                                 num_classes=cfg.num_classes, input_shape=shape)
