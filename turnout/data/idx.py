"""IDX files (the MNIST format) and the two datasets stored in it: Fashion-MNIST and MNIST.

Fashion-MNIST ships offline in the Debian package ``dataset-fashion-mnist`` (Zalando's original
IDX files); MNIST is in no package, so users point ``data.path`` at their own
copy. Both are four IDX files, gzipped or not. A missing file is reported when the config is
validated, with how to get it, rather than as a crash when the run starts.

IDX layout (big-endian): two zero bytes, a type code (0x08 ubyte, 0x09 sbyte, 0x0B int16,
0x0C int32, 0x0D float32, 0x0E float64), the number of dimensions, one uint32 per dimension,
then the values in row-major order.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator

from ..config.limits import MAX_SAMPLES
from ..core import rng as rngmod
from ..core.errors import DataError
from .federated import DataFootprint, FederatedDataset
from .pooled import PooledSplitConfig, pooled_footprint, split_pool
from .registry import DATASETS

#: IDX type code → big-endian numpy dtype.
IDX_DTYPES: dict[int, str] = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
#: Magic numbers of the MNIST-family files: ubyte labels (1-D) and ubyte images (3-D).
MAGIC_LABELS = 0x00000801
MAGIC_IMAGES = 0x00000803

#: The four files of an MNIST-family dataset, each found raw or with ``.gz``.
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def read_idx(path: str | os.PathLike, expect_magic: int | None = None) -> np.ndarray:
    """Read one IDX file (gzipped or raw, detected by content) into a writable native-endian array.

    Raises :class:`DataError` naming the file if it is unreadable, not gzip/IDX, has an unknown
    type code, is shorter or longer than its header says, or (with ``expect_magic``) holds a
    different type or number of dimensions than expected.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except FileNotFoundError:
        raise DataError(f"{p}: no such IDX file") from None
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; a cut gzip is EOFError
        raise DataError(f"{p}: cannot read or decompress ({exc}); the file is damaged or truncated") from None
    if len(raw) < 4:
        raise DataError(f"{p}: truncated IDX file ({len(raw)} bytes, shorter than the 4-byte magic number)")
    magic = int.from_bytes(raw[:4], "big")
    code, ndim = raw[2], raw[3]
    if raw[0] != 0 or raw[1] != 0 or code not in IDX_DTYPES or ndim == 0:
        raise DataError(f"{p}: bad IDX magic number 0x{magic:08x} (expected 0x000008NN..0x00000eNN with "
                        f"a type code in {{{', '.join(f'0x{c:02x}' for c in IDX_DTYPES)}}} and >= 1 dimension)")
    if expect_magic is not None and magic != expect_magic:
        raise DataError(f"{p}: IDX magic number 0x{magic:08x}, expected 0x{expect_magic:08x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{p}: truncated IDX file ({len(raw)} bytes, header needs {header})")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(IDX_DTYPES[code])
    count = int(np.prod(dims, dtype=np.int64))
    have, want = len(raw) - header, count * dtype.itemsize
    if have < want:
        raise DataError(f"{p}: truncated IDX file: shape {dims} needs {want} data bytes, found {have}")
    if have > want:
        raise DataError(f"{p}: IDX file has {have - want} bytes after the data its header {dims} describes")
    # astype copies: the result is writable and native-endian whatever the file held.
    return np.frombuffer(raw, dtype=dtype, count=count, offset=header).astype(dtype.newbyteorder("=")).reshape(dims)


def _idx_header(path: Path | None) -> tuple[int, ...] | None:
    """The dimensions an IDX file's header declares (reading only the header), or ``None``."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        with (gzip.open(path) if gzipped else open(path, "rb")) as f:
            head = f.read(4)
            ndim = head[3] if len(head) == 4 else 0
            dims = f.read(4 * ndim)
    except (OSError, EOFError, zlib.error):
        return None
    if ndim == 0 or len(dims) != 4 * ndim:
        return None
    return tuple(int(d) for d in np.frombuffer(dims, dtype=">u4"))


def find_idx_file(directory: str | os.PathLike, stem: str) -> Path | None:
    """``directory/stem`` if present (raw is faster), else ``directory/stem.gz``, else ``None``."""
    d = Path(directory).expanduser()
    for name in (stem, stem + ".gz"):
        if (d / name).is_file():
            return d / name
    return None


def check_idx_dir(path: str, how_to_get: str) -> str:
    """Config-time check that ``path`` holds the four IDX files; ``ValueError`` names the first missing one."""
    d = Path(path).expanduser()
    if not d.is_dir():
        raise ValueError(f"directory {path} does not exist; {how_to_get}")
    for stem in IDX_FILES:
        if find_idx_file(d, stem) is None:
            raise ValueError(f"{path} has no {stem} (or {stem}.gz); {how_to_get}")
    return path


def _subset(n: int, limit: int | None, seed: int, purpose: str) -> np.ndarray | None:
    """Sorted random ``limit`` row indices out of ``n``, or ``None`` to keep all rows."""
    if limit is None or limit >= n:
        return None
    return np.sort(rngmod.stream(seed, purpose).choice(n, size=limit, replace=False))


def _load_split(directory: str, prefix: str, limit: int | None, seed: int,
                purpose: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(n, 1, rows, cols)`` float32 in [0, 1] and int64 labels of the ``train`` or ``t10k`` files."""
    img_path = find_idx_file(directory, f"{prefix}-images-idx3-ubyte")
    lbl_path = find_idx_file(directory, f"{prefix}-labels-idx1-ubyte")
    if img_path is None or lbl_path is None:  # deleted since the config was validated
        raise DataError(f"{directory} no longer holds the {prefix} IDX files")
    images = read_idx(img_path, MAGIC_IMAGES)
    labels = read_idx(lbl_path, MAGIC_LABELS)
    if len(images) != len(labels):
        raise DataError(f"{img_path} has {len(images)} images but {lbl_path} has {len(labels)} labels")
    if labels.size and labels.max() >= 10:
        raise DataError(f"{lbl_path}: label {int(labels.max())} is outside 0..9")
    keep = _subset(len(labels), limit, seed, purpose)
    if keep is not None:
        images, labels = images[keep], labels[keep]
    # Subset before converting: the float copy is 4x the uint8 one.
    x = images.reshape(len(images), 1, *images.shape[1:]).astype(np.float32)
    np.divide(x, np.float32(255.0), out=x)  # division, not * (1/255): exact pixel/255 in float32
    return x, labels.astype(np.int64)


class _IdxConfig(PooledSplitConfig):
    """Options shared by the IDX datasets (``path`` is declared by each dataset)."""

    limit_train: int | None = Field(None, ge=1, le=MAX_SAMPLES,
                                    description="use a random subset of this many training images")
    limit_test: int | None = Field(None, ge=1, le=MAX_SAMPLES,
                                   description="use a random subset of this many server test images")


class _IdxDataset:
    """Build logic shared by Fashion-MNIST and MNIST: t10k is the server test set, train is partitioned."""

    name = ""

    @classmethod
    def footprint(cls, cfg: _IdxConfig) -> DataFootprint | None:
        """From the image files' headers (read from the first bytes only); ``None`` if they are unreadable."""
        path: str = cfg.path  # type: ignore[attr-defined]
        shapes = [_idx_header(find_idx_file(path, f"{p}-images-idx3-ubyte")) for p in ("train", "t10k")]
        if None in shapes or len(shapes[0]) != 3:
            return None
        (n_train, h, w), (n_test, *_) = shapes
        rows = min(n_train, cfg.limit_train or n_train) + min(n_test, cfg.limit_test or n_test)
        return pooled_footprint(cfg, rows, (1, h, w), 10, raw_bytes=2 * (n_train + n_test) * h * w)

    @classmethod
    def build(cls, cfg: _IdxConfig, seed: int) -> FederatedDataset:
        path: str = cfg.path  # type: ignore[attr-defined]
        data_seed = seed if cfg.data_seed is None else cfg.data_seed
        x, y = _load_split(path, "train", cfg.limit_train, data_seed, "limit-train")
        xs, ys = _load_split(path, "t10k", cfg.limit_test, data_seed, "limit-test")
        if x.shape[1:] != xs.shape[1:]:
            raise DataError(f"{path}: train images are {x.shape[2:]} but t10k images are {xs.shape[2:]}")
        return split_pool(cls.name, x, y, xs, ys, 10, cfg, seed)


FASHION_MNIST_HINT = ("install it with `apt-get install dataset-fashion-mnist` or set data.path to a directory "
                      "holding the four IDX files")
MNIST_HINT = "set data.path to a directory holding the MNIST IDX files"


@DATASETS.register("fashion_mnist")
class FashionMnistDataset(_IdxDataset):
    """Fashion-MNIST (70k 28×28 clothing images, 10 classes) from Debian's dataset-fashion-mnist, partitioned \
over clients.

    Reads the four IDX files under ``path`` (default: where the Debian package installs them).
    The 60,000 training images are divided over clients by ``partition``; the 10,000 t10k images
    are the server test set. ``limit_train`` / ``limit_test`` take random subsets for quick runs.
    """

    name = "fashion_mnist"

    class Config(_IdxConfig):
        path: str = Field("/usr/share/datasets/fashion-mnist", description="directory holding the four IDX files")

        @field_validator("path")
        @classmethod
        def _check_path(cls, v: str) -> str:
            return check_idx_dir(v, FASHION_MNIST_HINT)


@DATASETS.register("mnist")
class MnistDataset(_IdxDataset):
    """MNIST (70k 28×28 handwritten digits, 10 classes) from IDX files you supply in ``path``, partitioned over clients.

    MNIST is in no offline package, so ``path`` is required. The training images are divided
    over clients by ``partition``; the t10k images are the server test set.
    """

    name = "mnist"

    class Config(_IdxConfig):
        path: str = Field(description="directory holding the four MNIST IDX files")

        @field_validator("path")
        @classmethod
        def _check_path(cls, v: str) -> str:
            return check_idx_dir(v, MNIST_HINT)
