"""Hugging Face columns → the arrays turnout trains on: images, numeric arrays, text, labels.

* **image** (an ``Image`` column, PIL-decodable bytes or paths): ``(C, H, W)`` uint8, C = 1 for
  greyscale and 3 for colour (``channels`` converts); the model sees ``(pixel / 255 − mean) / std``
  through :class:`~turnout.data.federated.InputScaling`, converted batch by batch.
* **array** (nested lists / ``Array2D``/``Array3D``): the stored shape (or ``input_shape``); uint8
  arrays stay uint8 and are scaled like images, other numbers become float32 as stored.
* **text** (a string column): the last ``seq_len`` characters as ids of LEAF's 80-character
  Shakespeare alphabet (other characters share one out-of-vocabulary id), left-padded with spaces
  as LEAF pads, i.e. what ``char_lstm`` embeds.
* **audio**: refused with one line; no feature library (log-mel) installs under turnout's pins.

Labels are ``ClassLabel`` or whole numbers, or strings: single characters of a text task become the
same character ids as the inputs (next-character prediction), other strings are numbered in sorted order.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, DataError
from .shakespeare import LEAF_VOCAB, encode

#: Character ids of text inputs and labels: LEAF's alphabet plus one out-of-vocabulary id.
TEXT_CLASSES = len(LEAF_VOCAB) + 1
_SPACE_ID = LEAF_VOCAB.index(" ")

AUDIO_REFUSAL = ("is an audio column; audio is not supported (no log-mel feature library installs under "
                 "turnout's pinned torch/numpy): store features as an array column and name that column")


def input_kind(feature) -> str:
    """``image``, ``audio``, ``text`` or ``array`` for a ``datasets`` feature (``array`` for numbers too);
    ``unreadable`` for a column of mixed types (:class:`~.hf_source.Unreadable`)."""
    import datasets

    from .hf_source import Unreadable

    if isinstance(feature, Unreadable):
        return "unreadable"
    if isinstance(feature, datasets.Image):
        return "image"
    if isinstance(feature, datasets.Audio):
        return "audio"
    if isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string"):
        return "text"
    return "array"


def _leaf_values(arr):
    """A (possibly nested) list array flattened to its primitive values, honouring slices; nulls are refused."""
    import pyarrow as pa

    while True:
        if isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        if arr.null_count:
            raise DataError("the input column has missing values (nulls); drop those rows first")
        if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
            arr = arr.flatten()
        else:
            return arr.to_numpy(zero_copy_only=False)


def _row_shape(arr) -> tuple[int, ...]:
    """The nested list lengths of the first row of a list array (``()`` for a scalar column)."""
    first = arr.slice(0, 1).to_pylist()[0]
    shape = []
    while isinstance(first, list):
        shape.append(len(first))
        first = first[0] if first else None
    return tuple(shape)


@dataclass
class Converter:
    """Turns one Arrow column batch into rows of ``shape`` and ``dtype``."""

    column: str
    kind: str
    shape: tuple[int, ...]
    dtype: np.dtype
    mode: str | None = None  # image: the PIL mode every image is converted to
    seq_len: int = 0

    def convert(self, arr) -> np.ndarray:
        n = len(arr)
        if self.kind == "image":
            return self._images(arr)
        if self.kind == "text":
            return _text_ids(arr.to_pylist(), self.seq_len, self.column)
        values = _leaf_values(arr)
        if values.size != n * math.prod(self.shape):
            raise DataError(f"column {self.column!r}: rows do not all hold {math.prod(self.shape)} values "
                            f"(shape {list(self.shape)}); give input_shape or make the rows equal")
        return values.reshape((n, *self.shape)).astype(self.dtype, copy=False)

    def _images(self, arr) -> np.ndarray:
        import datasets

        decoder = datasets.Image()
        out = np.empty((len(arr), *self.shape), dtype=np.uint8)
        for i, cell in enumerate(arr.to_pylist()):
            if cell is None:
                raise DataError(f"column {self.column!r}: a row has no image")
            img = _decode(decoder, cell, self.column).convert(self.mode)
            px = np.asarray(img, dtype=np.uint8)
            px = px[None] if px.ndim == 2 else px.transpose(2, 0, 1)
            if px.shape != self.shape:
                raise DataError(f"column {self.column!r}: an image is {px.shape[2]}x{px.shape[1]}, the first one "
                                f"{self.shape[2]}x{self.shape[1]}; turnout needs images of one size")
            out[i] = px
        return out


def _decode(decoder, cell, column: str):
    from PIL import Image, UnidentifiedImageError

    try:
        if isinstance(cell, dict):
            if cell.get("bytes") is not None:
                return Image.open(io.BytesIO(cell["bytes"]))
            return decoder.decode_example(cell)
        return Image.open(io.BytesIO(cell))
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise DataError(f"column {column!r}: an image cannot be decoded ({exc})") from None


def _text_ids(texts: list, seq_len: int, column: str) -> np.ndarray:
    """The last ``seq_len`` characters of each text as character ids, left-padded with spaces."""
    out = np.full((len(texts), seq_len), _SPACE_ID, dtype=np.uint8)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise DataError(f"column {column!r}: a row holds {type(t).__name__}, not text")
        ids = encode(t[-seq_len:]) if t else np.zeros(0, np.uint8)
        if len(ids):
            out[i, seq_len - len(ids):] = ids
    return out


def make_converter(split, column: str, kind: str, *, channels: int | None, seq_len: int,
                   input_shape: tuple[int, ...] | None) -> Converter:
    """The converter of ``column``, its row shape found from the feature or the first row."""
    feature = split.features[column]
    found = input_kind(feature)
    if found == "unreadable":
        raise feature.refuse("input", column)
    if found == "audio":
        raise ConfigError("input", column, AUDIO_REFUSAL)
    if kind != "auto" and kind != found:
        raise ConfigError("input_kind", kind, f"column {column!r} holds {found} data; set input_kind: {found} "
                                              "or auto")
    first = next(split.batches([column]))[1].column(0).slice(0, 1)
    if found == "image":
        from PIL import Image  # noqa: F401  (Pillow comes with matplotlib)

        img = _decode(__import__("datasets").Image(), first.to_pylist()[0], column)
        mode = {1: "L", 3: "RGB"}[channels] if channels else ("L" if img.mode in ("L", "1", "I", "I;16") else "RGB")
        w, h = img.size
        shape = (1 if mode == "L" else 3, h, w)
        if input_shape is not None and tuple(input_shape) != shape:
            raise ConfigError("input_shape", list(input_shape), f"reshapes array columns only; {column!r} holds "
                                                                f"images of shape {list(shape)} (their channels are "
                                                                "data.channels): leave input_shape out")
        return Converter(column, "image", shape, np.dtype(np.uint8), mode=mode)
    if found == "text":
        if input_shape is not None:
            raise ConfigError("input_shape", list(input_shape), f"reshapes array columns only; {column!r} holds "
                                                                "text (its length is data.seq_len): leave it out")
        return Converter(column, "text", (seq_len,), np.dtype(np.uint8), seq_len=seq_len)
    values = _leaf_values(first)
    shape = _row_shape(first) or (1,)
    dtype = np.dtype(np.uint8) if values.dtype == np.uint8 else np.dtype(np.float32)
    if values.dtype.kind not in "biuf":
        raise ConfigError("input", column, f"holds {values.dtype} values; an input column holds images, text or "
                                           "numbers")
    if input_shape is not None:
        if math.prod(input_shape) != math.prod(shape):
            raise ConfigError("input_shape", list(input_shape), f"has {math.prod(input_shape)} values but each row "
                                                                f"of {column!r} has {math.prod(shape)}")
        shape = tuple(input_shape)
    return Converter(column, "array", shape, dtype)


@dataclass
class Labels:
    """Class ids of the train and test rows and how many classes there are."""

    train: np.ndarray
    test: np.ndarray | None
    num_classes: int


def encode_labels(feature, train, test, text_input: bool, num_classes: int | None, column: str) -> Labels:
    """Class ids (int64) from a label column of the split and, if any, of the test split (same numbering)."""
    import datasets
    import pyarrow as pa

    arrays = [a for a in (train, test) if a is not None]
    if any(a.null_count for a in arrays):
        raise DataError(f"label column {column!r} has missing values; drop those rows first")
    if pa.types.is_string(train.type) or pa.types.is_large_string(train.type):
        values = [np.asarray(a.to_pylist(), dtype=object) for a in arrays]
        if text_input and all(len(v) == 1 for a in values for v in a):
            ids = [encode("".join(a)).astype(np.int64) for a in values]
            top = TEXT_CLASSES
        else:
            names = np.unique(np.concatenate(values).astype(str))
            ids = [np.searchsorted(names, a.astype(str)).astype(np.int64) for a in values]
            top = len(names)
    elif pa.types.is_integer(train.type) or pa.types.is_boolean(train.type):
        ids = [a.to_numpy(zero_copy_only=False).astype(np.int64) for a in arrays]
        if any(len(i) and i.min() < 0 for i in ids):
            raise DataError(f"label column {column!r} holds negative labels (unlabelled rows?); drop those rows")
        top = len(feature.names) if isinstance(feature, datasets.ClassLabel) else \
            max(2, max(int(i.max()) + 1 for i in ids if len(i)))
    else:
        raise ConfigError("label", column, f"holds {train.type} values; a label column holds class ids or names")
    if num_classes is not None:
        if any(len(i) and i.max() >= num_classes for i in ids):
            raise DataError(f"label column {column!r}: label {max(int(i.max()) for i in ids if len(i))} does not "
                            f"fit num_classes = {num_classes}")
        top = num_classes
    return Labels(ids[0], ids[1] if test is not None else None, top)
