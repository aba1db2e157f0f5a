"""scikit-learn's bundled 8×8 handwritten digits: the fastest real-image dataset, fully offline.

``load_digits()`` reads a 57 KB file shipped inside the scikit-learn wheel, so this dataset needs
no download and builds in milliseconds, which makes it the image fixture for unit tests and quick
experiments. It has no writer ids (the bundled copy of the UCI set does not carry them), so clients come from a
partitioner via :func:`~turnout.data.pooled.split_pool`; a random ``server_test_fraction`` of the
1,797 images is held out first as the server test set.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ..core import rng as rngmod
from .federated import DataFootprint, FederatedDataset
from .pooled import PooledSplitConfig, pooled_footprint, split_pool
from .registry import DATASETS


def server_test_mask(n: int, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of the ``round(fraction·n)`` rows (at least 1, at most n−1) held out for the server.

    Drawn from its own stream, so the held-out rows do not move when the partitioner changes.
    """
    k = int(np.clip(round(fraction * n), 1, n - 1))
    mask = np.zeros(n, dtype=bool)
    mask[rngmod.stream(seed, "server-test-split").permutation(n)[:k]] = True
    return mask


@DATASETS.register("digits")
class DigitsDataset:
    """scikit-learn's 1,797 handwritten 8×8 digits (10 classes), partitioned over clients; offline and tiny.

    Pixels (0–16) are scaled to ``[0, 1]`` float32 with shape ``(n, 1, 8, 8)``. A random
    ``server_test_fraction`` of the images is the server test set; the rest is divided over
    ``num_clients`` by ``partition``, and each client keeps ``client_test_fraction`` of its rows
    as its local test part.
    """

    class Config(PooledSplitConfig):
        server_test_fraction: float = Field(
            0.25, gt=0.0, lt=1.0, description="share of the 1,797 images held out as the server test set")

    @classmethod
    def footprint(cls, cfg: "DigitsDataset.Config") -> DataFootprint:
        return pooled_footprint(cfg, 1797, (1, 8, 8), 10, raw_bytes=1797 * 64 * 8)

    @classmethod
    def build(cls, cfg: "DigitsDataset.Config", seed: int) -> FederatedDataset:
        from sklearn.datasets import load_digits  # imported here: sklearn is slow to import

        images, labels = load_digits(return_X_y=True)
        x = (images.astype(np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
        y = labels.astype(np.int64)
        held = server_test_mask(len(y), cfg.server_test_fraction, seed if cfg.data_seed is None else cfg.data_seed)
        return split_pool("digits", x[~held], y[~held], x[held], y[held], 10, cfg, seed)
