"""Load federated data stored in LEAF's JSON format (FEMNIST, FedProx Synthetic, ...).

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {u: {"x": [...], "y": [...]}},
"hierarchies": [...]?}``. Every user becomes one client, in the order of ``users``. LEAF ships a
train file and a test file with the same users; given only one file, each user's samples are
split here with a deterministic stream. Problems with a file are :class:`DataError`\\ s that name
the file and what is wrong, so a bad download is never a traceback.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, field_validator

from ..config.base import StrictModel
from ..config.limits import MAX_CLASSES, MAX_FEATURES
from ..core import rng as rngmod
from ..core.errors import DataError
from .federated import DataFootprint, FederatedDataset, offsets_from_counts
from .registry import DATASETS

_NOT_FOUND = "file not found; give the path of a LEAF JSON file (users/num_samples/user_data)"


class _Part:
    """One LEAF file, parsed: users, per-user counts, and the stacked x / y arrays."""

    def __init__(self, users: list[str], counts: np.ndarray, x: np.ndarray, y: np.ndarray,
                 hierarchies: list | None):
        self.users, self.counts, self.x, self.y, self.hierarchies = users, counts, x, y, hierarchies


def _read(path: str) -> _Part:
    """Parse and check one LEAF JSON file; every problem is a one-line DataError naming ``path``."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc}); expected a LEAF JSON file") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: top level is a {type(data).__name__}, expected a JSON object "
                        "with users/num_samples/user_data")
    for key in ("users", "num_samples", "user_data"):
        if key not in data:
            raise DataError(f"{path}: missing key {key!r} (a LEAF file has users, num_samples, user_data)")
    users, num_samples, user_data = data["users"], data["num_samples"], data["user_data"]
    if not isinstance(users, list) or not isinstance(num_samples, list) or not isinstance(user_data, dict):
        raise DataError(f"{path}: users and num_samples must be lists and user_data an object")
    if len(users) != len(num_samples):
        raise DataError(f"{path}: users has {len(users)} entries but num_samples has {len(num_samples)}")
    if not users:
        raise DataError(f"{path}: no users")
    if len(set(map(str, users))) != len(users):
        raise DataError(f"{path}: users contains duplicate names")
    xs, ys = [], []
    for u, n in zip(users, num_samples):
        d = user_data.get(u)
        if not isinstance(d, dict) or "x" not in d or "y" not in d:
            raise DataError(f"{path}: user_data has no x/y for user {u!r}")
        if not isinstance(d["x"], list) or not isinstance(d["y"], list):
            raise DataError(f"{path}: user {u!r}: x and y must be lists")
        if not (len(d["x"]) == len(d["y"]) == n):
            raise DataError(f"{path}: user {u!r}: num_samples says {n} but x has {len(d['x'])} "
                            f"and y has {len(d['y'])} entries")
        xs.append(d["x"])
        ys.append(d["y"])
    first = next((xx[0] for xx in xs if xx), None)
    if isinstance(first, str) or (isinstance(first, list) and first and isinstance(first[0], str)):
        raise DataError(f"{path}: x holds strings (LEAF Shakespeare/Sent140); string-valued LEAF data is not "
                        "supported by leaf_json yet; use the 'shakespeare' dataset")
    try:
        # One conversion for the whole file: no per-user arrays.
        x = np.asarray(list(itertools.chain.from_iterable(xs)), dtype=np.float32)
    except (ValueError, TypeError):
        raise DataError(f"{path}: x must be numeric lists of the same length for every sample") from None
    try:
        yf = np.asarray(list(itertools.chain.from_iterable(ys)), dtype=np.float64)
    except (ValueError, TypeError):
        raise DataError(f"{path}: y must be numeric class labels") from None
    if yf.ndim != 1:
        raise DataError(f"{path}: y must be one class label per sample")
    if len(yf) and (not np.all(np.isfinite(yf)) or np.any(yf != np.round(yf)) or yf.min() < 0):
        raise DataError(f"{path}: y must hold non-negative whole-number class labels (floats such as 3.0 are fine)")
    if x.ndim == 1:  # one scalar feature per sample
        x = x[:, None]
    hier = data.get("hierarchies")
    if hier is not None and (not isinstance(hier, list) or len(hier) != len(users)):
        raise DataError(f"{path}: hierarchies must be a list with one entry per user")
    return _Part([str(u) for u in users], np.asarray(num_samples, dtype=np.int64), x,
                 yf.astype(np.int64), hier)


@DATASETS.register("leaf_json")
class LeafJsonDataset:
    """Federated data from LEAF JSON files (one client per LEAF user), e.g. FEMNIST or FedProx Synthetic.

    ``train_path`` (and ``test_path`` when LEAF's own split is wanted) point at LEAF JSON files.
    Without ``test_path`` each user's samples are shuffled with a deterministic stream and the
    first ``max(1, int(train_fraction·n))`` go to training (LEAF's ``-t sample`` rule; a user with
    a single sample keeps it for training). With ``test_path``, users are matched by name: a train
    user absent from the test file has no local test data, and test-only users (LEAF's ``-t user``
    split) contribute only to the server test set, which pools every test sample.
    ``input_shape`` reshapes the flat x (e.g. ``[1, 28, 28]`` for FEMNIST).
    """

    class Config(StrictModel):
        train_path: str = Field(..., description="LEAF JSON file of training data (or of all data)")
        test_path: str | None = Field(None, description="LEAF JSON test file; None = split train_path per user")
        train_fraction: float = Field(0.9, gt=0.0, lt=1.0, description="per-user train share without test_path")
        server_test: Literal["pooled_client_test"] = "pooled_client_test"
        input_shape: list[Annotated[int, Field(ge=1, le=MAX_FEATURES)]] | None = Field(
            None, min_length=1, max_length=8, description="shape of one sample, e.g. [1, 28, 28]")
        num_classes: int | None = Field(None, ge=2, le=MAX_CLASSES, description="None = largest label + 1")

        @field_validator("train_path", "test_path")
        @classmethod
        def _exists(cls, v: str | None) -> str | None:
            """A missing file is a config error naming the key, not a crash once the run has started."""
            if v is not None and not os.path.isfile(v):
                raise ValueError(_NOT_FOUND)
            return v

        @field_validator("input_shape")
        @classmethod
        def _positive_shape(cls, v: list[int] | None) -> list[int] | None:
            if v is not None and any(d < 1 for d in v):
                raise ValueError("every dimension must be >= 1")
            return v

    @classmethod
    def footprint(cls, cfg: "LeafJsonDataset.Config") -> DataFootprint | None:
        """From the JSON files' sizes: parsed into Python lists (~8 bytes per character), then arrays."""
        try:
            size = sum(os.path.getsize(p) for p in (cfg.train_path, cfg.test_path) if p is not None)
        except OSError:
            return None
        shape = tuple(cfg.input_shape) if cfg.input_shape is not None else None
        return DataFootprint(8 * size, "train_path", input_shape=shape, num_classes=cfg.num_classes)

    @classmethod
    def build(cls, cfg: "LeafJsonDataset.Config", seed: int) -> FederatedDataset:
        train = _read(cfg.train_path)
        if len(train.x) == 0:
            raise DataError(f"{cfg.train_path}: no samples (every user has num_samples 0)")
        users = train.users
        num = len(users)
        owner = np.repeat(np.arange(num), train.counts)
        if cfg.test_path is None:
            # Shuffle every user's rows with one stream (lexsort by (user, random key)), then cut.
            r = rngmod.stream(seed, "leaf-split")
            order = np.lexsort((r.random(len(owner)), owner))
            n = train.counts
            n_train = np.where(n >= 2, np.maximum(1, np.floor(cfg.train_fraction * n).astype(np.int64)), n)
            pos = np.arange(len(owner)) - np.repeat(offsets_from_counts(n)[:-1], n)
            is_train = pos < n_train[owner]
            tr, te = order[is_train], order[~is_train]
            x_train, y_train = train.x[tr], train.y[tr]
            x_test, y_test = train.x[te], train.y[te]
            n_test = n - n_train
            x_server, y_server = x_test.copy(), y_test.copy()
        else:
            test = _read(cfg.test_path)
            if len(test.x) == 0:
                test.x = np.zeros((0,) + train.x.shape[1:], dtype=np.float32)
            if test.x.shape[1:] != train.x.shape[1:]:
                raise DataError(f"{cfg.test_path}: samples have {test.x.shape[1:]} features but "
                                f"{cfg.train_path} has {train.x.shape[1:]}")
            x_train, y_train, n_train = train.x, train.y, train.counts
            index = {u: i for i, u in enumerate(users)}
            test_client = np.array([index.get(u, -1) for u in test.users], dtype=np.int64)
            row_client = np.repeat(test_client, test.counts)
            keep = np.flatnonzero(row_client >= 0)
            keep = keep[np.argsort(row_client[keep], kind="stable")]
            x_test, y_test = test.x[keep], test.y[keep]
            n_test = np.bincount(row_client[row_client >= 0], minlength=num)
            x_server, y_server = test.x, test.y
        if cfg.num_classes is None:
            top = max((int(a.max()) for a in (y_train, y_test, y_server) if len(a)), default=0)
            num_classes = max(top + 1, 2)
        else:
            num_classes = cfg.num_classes
            for a, f in ((y_train, cfg.train_path), (y_server, cfg.test_path or cfg.train_path)):
                if len(a) and a.max() >= num_classes:
                    raise DataError(f"{f}: label {int(a.max())} does not fit num_classes = {num_classes}")
        feat = x_train.shape[1:]
        shape: tuple[int, ...] = feat
        if cfg.input_shape is not None:
            shape = tuple(cfg.input_shape)
            if math.prod(shape) != math.prod(feat):
                raise DataError(f"{cfg.train_path}: input_shape {list(shape)} has {math.prod(shape)} values "
                                f"but each sample has {math.prod(feat)} features")
            x_train, x_test, x_server = (a.reshape((len(a),) + shape) for a in (x_train, x_test, x_server))
        extras: dict = {}
        if train.hierarchies is not None:
            extras["hierarchies"] = np.array(train.hierarchies, dtype=object)
        return FederatedDataset(
            name="leaf_json",
            x_train=x_train, y_train=y_train, train_offsets=offsets_from_counts(n_train),
            x_test=x_test, y_test=y_test, test_offsets=offsets_from_counts(n_test),
            x_server_test=x_server, y_server_test=y_server,
            num_classes=num_classes, input_shape=shape, client_names=np.array(users), extras=extras,
        )
