"""The federated dataset: a few big arrays plus per-client offsets.

A population of a million clients must not mean a million Python objects, so client data is
stored contiguously: client ``i``'s training rows are ``x_train[train_offsets[i]:train_offsets[i+1]]``.
Every loader (synthetic, digits, IDX, Shakespeare, LEAF JSON) produces this one structure, and
partitioners produce the row order and offsets that build it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def offsets_from_counts(counts: np.ndarray) -> np.ndarray:
    """``[0, c0, c0+c1, ...]`` as int64: the offsets array for per-client counts."""
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def group_by_client(client_of_row: np.ndarray, num_clients: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by client (stable) and the offsets; rows with client −1 are dropped.

    Returns ``(order, offsets)`` such that ``x[order]`` stores each client's rows contiguously.
    """
    client_of_row = np.asarray(client_of_row, dtype=np.int64)
    keep = np.flatnonzero(client_of_row >= 0)
    order = keep[np.argsort(client_of_row[keep], kind="stable")]
    counts = np.bincount(client_of_row[keep], minlength=num_clients)
    return order, offsets_from_counts(counts)


@dataclass(frozen=True)
class DataFootprint:
    """A dataset's size estimated from its config alone, for the memory pre-flight (:mod:`turnout.runs.preflight`).

    A dataset class may offer ``footprint(cfg) -> DataFootprint``; fields it cannot know without
    reading its files are ``None``. ``driver`` names the option that makes it big (``dim``,
    ``num_clients``, ``path``), so a refusal can name the key to change.
    """

    bytes: int  # peak memory while building it and holding the result
    driver: str
    num_clients: int | None = None
    input_shape: tuple[int, ...] | None = None
    num_classes: int | None = None
    max_client_rows: int = 0


@dataclass(frozen=True)
class InputScaling:
    """How stored integer inputs become the floats a model reads: ``(x / scale − mean) / std``, per channel.

    Large image sets are kept as uint8 (a quarter of float32's memory) and converted batch by
    batch inside the model's forward (:meth:`attach`), never as a float copy of the whole set.
    ``mean`` and ``std`` hold one value or one per channel (axis 1 of a batch). With the defaults
    (scale 255, mean 0, std 1) a pixel becomes exactly ``pixel / 255`` in float32, as the IDX
    loaders give it. Float inputs pass through the same formula, so inputs drawn on the stored
    scale (FedGS's noise probes) land where real ones do.
    """

    scale: float = 255.0
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)

    def __call__(self, module, args):
        import torch  # the data layer itself needs no torch until a model reads it

        (x, *rest) = args
        x = x.to(torch.float32) if not torch.is_floating_point(x) else x
        x = x / self.scale
        if self.mean != (0.0,) or self.std != (1.0,):
            shape = (1, -1) + (1,) * (x.dim() - 2) if x.dim() >= 2 else (-1,)
            mean = torch.tensor(self.mean, dtype=x.dtype, device=x.device).reshape(shape)
            std = torch.tensor(self.std, dtype=x.dtype, device=x.device).reshape(shape)
            x = (x - mean) / std
        return (x, *rest)

    def attach(self, module):
        """Run the conversion at the start of ``module``'s forward (a pre-hook: parameter names stay the same)."""
        module.register_forward_pre_hook(self)
        return module


@dataclass
class FederatedDataset:
    """Train/test data of every client plus a server-side test set.

    ``x_*`` hold features (float32 images/vectors, or int64 token ids for text); ``y_*`` hold
    int64 class labels. ``*_offsets`` have ``num_clients + 1`` entries. ``valid`` arrays are
    optional (FedGS's 15 % validation split) and ``extras`` carries dataset-specific arrays such
    as FedGS's per-client optimal models (``"optimal"``) or the Shakespeare vocabulary.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    train_offsets: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    test_offsets: np.ndarray
    x_server_test: np.ndarray
    y_server_test: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    client_names: np.ndarray | None = None
    x_valid: np.ndarray | None = None
    y_valid: np.ndarray | None = None
    valid_offsets: np.ndarray | None = None
    extras: dict = field(default_factory=dict)
    #: how stored integer inputs (uint8 images) become floats in the model; None: stored as the model reads them
    input_scaling: InputScaling | None = None

    def __post_init__(self) -> None:
        n = len(self.train_offsets) - 1
        if len(self.test_offsets) != n + 1:
            raise ValueError("train_offsets and test_offsets disagree on the number of clients")
        if self.train_offsets[-1] != len(self.x_train) or self.test_offsets[-1] != len(self.x_test):
            raise ValueError("offsets do not cover the data arrays")
        if len(self.y_train) != len(self.x_train) or len(self.y_test) != len(self.x_test):
            raise ValueError("x and y lengths differ")
        if tuple(self.x_train.shape[1:]) != tuple(self.input_shape):
            raise ValueError(f"x_train rows have shape {self.x_train.shape[1:]}, expected {self.input_shape}")

    @property
    def num_clients(self) -> int:
        return len(self.train_offsets) - 1

    @property
    def n_train(self) -> np.ndarray:
        """Training samples per client (int64, length ``num_clients``)."""
        return np.diff(self.train_offsets)

    @property
    def n_test(self) -> np.ndarray:
        return np.diff(self.test_offsets)

    def client_train(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.train_offsets[i], self.train_offsets[i + 1]
        return self.x_train[a:b], self.y_train[a:b]

    def client_test(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.test_offsets[i], self.test_offsets[i + 1]
        return self.x_test[a:b], self.y_test[a:b]

    def label_histogram(self) -> np.ndarray:
        """Per-client training label counts, shape ``(num_clients, num_classes)``."""
        client_of_row = np.repeat(np.arange(self.num_clients, dtype=np.int64), self.n_train)
        client_of_row *= self.num_classes
        flat = client_of_row
        flat += self.y_train
        return np.bincount(flat, minlength=self.num_clients * self.num_classes).reshape(
            self.num_clients, self.num_classes)
