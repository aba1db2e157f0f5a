"""Synthetic CIFAR-shaped images drawn from the seed: image-model benchmarks without a download.

Measuring a convolutional model (``cnn_fedavg``, ``resnet18_gn``) on a GPU needs images of the
right shape and a task the model can learn, not CIFAR-10 itself, which a lent machine may not
reach. Every class has one smooth prototype (a coarse ``resolution × resolution`` grid of
normal values per channel, bilinearly upsampled to the image size); a sample of class ``y`` is
its prototype's grid moved by ``jitter`` (a smooth per-sample change, so classes overlap and a
model has something to learn) and upsampled, then per-pixel noise of std ``noise`` on the 0–255
scale, rounded and clipped to 0..255. Images are stored as uint8 (a quarter of float32's memory)
and the model sees ``pixel / 255`` through :class:`~turnout.data.federated.InputScaling`.

Every client holds ``samples_per_client`` rows; its labels are IID, or drawn from
``classes_per_client`` classes of its own (label skew). The per-pixel noise is a normal
distribution discretised to the 256 quantiles ``(i + ½) / 256`` of its inverse CDF and indexed
by one random byte per pixel: 150 million pixels (1,000 clients × 50 CIFAR-sized images) take
a second where drawing float normals takes several; its tails stop at ±2.9 std.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Annotated

import numpy as np
from pydantic import Field, model_validator

from ..config.base import StrictModel
from ..config.limits import MAX_CLASSES, MAX_CLIENTS, MAX_FEATURES, MAX_SAMPLES, MAX_SCALE, MAX_SEED
from ..core import rng as rngmod
from ..core.errors import ConfigError
from .federated import DataFootprint, FederatedDataset, InputScaling, offsets_from_counts
from .registry import DATASETS

#: rows rendered at a time: bounds the float32 scratch (rows × pixels × 4 bytes × CHUNK_COPIES) whatever the population
CHUNK_ROWS = 2048
#: float32 scratch arrays a chunk holds at once (the two taps of the last upsampling, their weighted sum, the noise)
CHUNK_COPIES = 4


def upsampling_taps(size: int, grid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear interpolation from ``grid`` to ``size`` points (pixel centres aligned, edges clamped): for every
    output point its two source points ``lo``, ``hi`` and the weight ``frac`` of ``hi`` (float32)."""
    src = np.clip((np.arange(size) + 0.5) * grid / size - 0.5, 0.0, grid - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, grid - 1)
    return lo, hi, (src - lo).astype(np.float32)


def upsample(x: np.ndarray, taps: tuple[np.ndarray, np.ndarray, np.ndarray], axis: int) -> np.ndarray:
    """``x`` interpolated along ``axis`` with two taps per output point.

    Element-wise products and sums, not a matrix product: a BLAS kernel may sum a product's terms in
    another order on another CPU, and a pixel whose float lands on the other side of a rounding
    boundary would make the dataset differ by machine. Each output here is ``x[lo]·(1 − frac) + x[hi]·frac``
    in float32, the same bits everywhere.
    """
    lo, hi, frac = taps
    shape = [1] * x.ndim
    shape[axis] = len(frac)
    f = frac.reshape(shape)
    return np.take(x, lo, axis=axis) * (np.float32(1.0) - f) + np.take(x, hi, axis=axis) * f


def noise_table(std: float) -> np.ndarray:
    """The 256 quantiles ``(i + ½) / 256`` of ``N(0, std²)``, float32: a random byte indexes one."""
    if std == 0.0:
        return np.zeros(256, np.float32)
    dist = NormalDist(0.0, std)
    return np.array([dist.inv_cdf((i + 0.5) / 256) for i in range(256)], np.float32)


@DATASETS.register("synthetic_images")
class SyntheticImagesDataset:
    """Synthetic uint8 images (CIFAR-shaped by default): a smooth prototype per class plus noise, from the seed.

    Every client holds ``samples_per_client`` rows, the last ``client_test_fraction`` of them its
    local test part; labels are IID or from ``classes_per_client`` classes per client. The server
    test set (``server_test`` rows, IID labels) comes from the same classes. The model reads
    ``pixel / 255``.
    """

    class Config(StrictModel):
        num_clients: int = Field(1000, ge=1, le=MAX_CLIENTS, description="clients in the population")
        samples_per_client: int = Field(50, ge=1, le=MAX_SAMPLES,
                                        description="rows every client holds (train + local test)")
        input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] = Field(
            [3, 32, 32], min_length=3, max_length=3, description="(channels, height, width) of one image")
        num_classes: int = Field(10, ge=2, le=MAX_CLASSES, description="classes, one prototype image each")
        classes_per_client: int | None = Field(
            None, ge=1, le=MAX_CLASSES, description="label skew: each client's labels come from this many classes "
                                                    "of its own (drawn from the seed); null: IID labels")
        resolution: int = Field(4, ge=1, le=MAX_FEATURES,
                                description="side of the coarse grid a prototype is upsampled from (smaller: "
                                            "smoother images)")
        contrast: float = Field(16.0, ge=0.0, le=MAX_SCALE,
                                description="std of a prototype's grid values around mid-grey, on the 0-255 scale")
        jitter: float = Field(2.0, ge=0.0, le=MAX_SCALE,
                              description="std of a sample's smooth change of its prototype's grid, in units of "
                                          "contrast (larger: classes overlap more)")
        noise: float = Field(64.0, ge=0.0, le=MAX_SCALE, description="std of the per-pixel noise, on the 0-255 scale")
        client_test_fraction: float = Field(0.0, ge=0.0, lt=1.0, description="share of each client's rows kept as "
                                            "its local test part (the first rows train)")
        server_test: int = Field(2000, ge=1, le=MAX_SAMPLES, description="rows of the server test set (IID labels)")
        data_seed: int | None = Field(None, ge=0, le=MAX_SEED,
                                      description="seed of the data; default: the run seed (0 <= seed < 2^32)")

        @model_validator(mode="after")
        def _consistent(self):
            if self.classes_per_client is not None and self.classes_per_client > self.num_classes:
                raise ConfigError("classes_per_client", self.classes_per_client,
                                  f"must be <= num_classes ({self.num_classes})")
            c, h, w = self.input_shape
            if self.resolution > min(h, w):
                raise ConfigError("resolution", self.resolution, f"must be <= the image's height and width "
                                                                 f"({h} x {w})")
            return self

    @classmethod
    def footprint(cls, cfg: "SyntheticImagesDataset.Config") -> DataFootprint:
        """uint8 pixels and int64 labels of every row, one chunk's float32 scratch, the per-client class table."""
        pixels = math.prod(cfg.input_shape)
        rows = cfg.num_clients * cfg.samples_per_client + cfg.server_test
        scratch = CHUNK_COPIES * min(rows, CHUNK_ROWS) * pixels * 4
        classes = cfg.num_clients * cfg.num_classes * 16 if cfg.classes_per_client is not None else 0
        return DataFootprint(rows * (pixels + 8) + scratch + classes, "num_clients", num_clients=cfg.num_clients,
                             input_shape=tuple(cfg.input_shape), num_classes=cfg.num_classes,
                             max_client_rows=cfg.samples_per_client)

    @classmethod
    def labels(cls, cfg: "SyntheticImagesDataset.Config", seed: int) -> np.ndarray:
        """``(num_clients, samples_per_client)`` int64 labels from the (seed, "synthetic-images-labels") stream."""
        n, s, k = cfg.num_clients, cfg.samples_per_client, cfg.num_classes
        r = rngmod.stream(seed, "synthetic-images-labels")
        if cfg.classes_per_client is None:
            return r.integers(0, k, size=(n, s), dtype=np.int64)
        own = np.argsort(r.random((n, k)), axis=1)[:, :cfg.classes_per_client]  # each client's classes
        pick = r.integers(0, cfg.classes_per_client, size=(n, s))
        return np.take_along_axis(own, pick, axis=1).astype(np.int64)

    @classmethod
    def prototypes(cls, cfg: "SyntheticImagesDataset.Config", seed: int) -> np.ndarray:
        """``(num_classes, C, resolution, resolution)`` float32 coarse grids, in units of ``contrast``."""
        c = cfg.input_shape[0]
        r = rngmod.stream(seed, "synthetic-images-prototypes")
        return r.standard_normal((cfg.num_classes, c, cfg.resolution, cfg.resolution), dtype=np.float32)

    @classmethod
    def render(cls, cfg: "SyntheticImagesDataset.Config", y: np.ndarray, seed: int, purpose: str) -> np.ndarray:
        """uint8 images of labels ``y``, drawn from the (seed, purpose + "-jitter" / "-noise") streams, in chunks."""
        c, h, w = cfg.input_shape
        g = cfg.resolution
        protos = cls.prototypes(cfg, seed)
        taps_h, taps_w = upsampling_taps(h, g), upsampling_taps(w, g)
        table = noise_table(cfg.noise)
        # 0.5 rounds to nearest when the clipped float is truncated to uint8
        base = np.float32(127.5 + 0.5)
        contrast = np.float32(cfg.contrast)
        jitter_rng = rngmod.stream(seed, purpose + "-jitter")
        noise_rng = rngmod.stream(seed, purpose + "-noise")
        out = np.empty((len(y), c, h, w), np.uint8)
        for a in range(0, len(y), CHUNK_ROWS):
            ys = y[a:a + CHUNK_ROWS]
            n = len(ys)
            grid = protos[ys]
            if cfg.jitter:
                grid += np.float32(cfg.jitter) * jitter_rng.standard_normal(grid.shape, dtype=np.float32)
            # separable upsampling: along the width, then along the height (element-wise: the same bits on
            # every machine, see upsample)
            img = upsample(upsample(grid, taps_w, axis=3), taps_h, axis=2)  # (n, c, h, w)
            img *= contrast
            img += base
            img += table[noise_rng.integers(0, 256, img.shape, dtype=np.uint8)]
            np.clip(img, 0.0, 255.0, out=img)
            out[a:a + n] = img
        return out

    @classmethod
    def build(cls, cfg: "SyntheticImagesDataset.Config", seed: int) -> FederatedDataset:
        data_seed = seed if cfg.data_seed is None else cfg.data_seed
        n, s = cfg.num_clients, cfg.samples_per_client
        n_test = int(math.floor(s * cfg.client_test_fraction))
        y = cls.labels(cfg, data_seed)
        y_train, y_test = y[:, :s - n_test].reshape(-1), y[:, s - n_test:].reshape(-1)
        y_server = rngmod.stream(data_seed, "synthetic-images-server-labels").integers(
            0, cfg.num_classes, cfg.server_test, dtype=np.int64)
        return FederatedDataset(
            name="synthetic_images",
            x_train=cls.render(cfg, y_train, data_seed, "synthetic-images-train"), y_train=y_train,
            train_offsets=offsets_from_counts(np.full(n, s - n_test, np.int64)),
            x_test=cls.render(cfg, y_test, data_seed, "synthetic-images-test"), y_test=y_test,
            test_offsets=offsets_from_counts(np.full(n, n_test, np.int64)),
            x_server_test=cls.render(cfg, y_server, data_seed, "synthetic-images-server"), y_server_test=y_server,
            num_classes=cfg.num_classes, input_shape=tuple(cfg.input_shape), input_scaling=InputScaling(),
        )
