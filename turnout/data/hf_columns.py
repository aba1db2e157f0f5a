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

from ..core.errors import ConfigError
from .hf_source import Unreadable
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

    if isinstance(feature, Unreadable):
        return "unreadable"
    if isinstance(feature, datasets.Image):
        return "image"
    if isinstance(feature, datasets.Audio):
        return "audio"
    if isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string"):
        return "text"
    return "array"


#: Most classes a label column may number (``num_classes``' own bound).
MAX_LABEL_CLASSES = 1_000_000


def _leaf_values(arr, column: str):
    """A (possibly nested) list array flattened to its primitive values, honouring slices; nulls are refused."""
    import pyarrow as pa

    while True:
        if isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        if arr.null_count:
            raise ConfigError("input", column, "has missing values (nulls, in a row or inside one); drop or fill "
                                               "those rows before the data is used")
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
        values = _leaf_values(arr, self.column)
        if values.size != n * math.prod(self.shape):
            raise ConfigError("input", self.column, f"rows do not all hold {math.prod(self.shape)} values (the first "
                                                    f"row's shape {list(self.shape)}); make the rows equal")
        return values.reshape((n, *self.shape)).astype(self.dtype, copy=False)

    def _images(self, arr) -> np.ndarray:
        import datasets

        decoder = datasets.Image()
        out = np.empty((len(arr), *self.shape), dtype=np.uint8)
        for i, cell in enumerate(arr.to_pylist()):
            if cell is None:
                raise ConfigError("input", self.column, "a row has no image (null); drop those rows first")
            px = np.asarray(_decode(decoder, cell, self.column, self.mode), dtype=np.uint8)
            px = px[None] if px.ndim == 2 else px.transpose(2, 0, 1)
            if px.shape != self.shape:
                raise ConfigError("input", self.column, f"an image is {px.shape[2]}x{px.shape[1]}, the first one "
                                                        f"{self.shape[2]}x{self.shape[1]}; turnout needs images of one "
                                                        "size (resize them)")
            out[i] = px
        return out


def _decode(decoder, cell, column: str, mode: str | None = None):
    """One image cell (``{bytes, path}`` or bytes) decoded in full, converted to ``mode`` if given: whatever is wrong
    with it (not an image, cut short, a path to no file) is one line naming the input."""
    import os

    from PIL import Image

    try:
        if isinstance(cell, dict) and cell.get("bytes") is not None:
            img = Image.open(io.BytesIO(cell["bytes"]))
        elif isinstance(cell, dict) and isinstance(cell.get("path"), str) and os.path.isfile(cell["path"]):
            img = decoder.decode_example(cell)
        elif isinstance(cell, (bytes, bytearray)):
            img = Image.open(io.BytesIO(cell))
        elif isinstance(cell, dict):
            raise ValueError(f"a row's image has no bytes, and its path {cell.get('path')!r} is no file")
        else:
            raise ValueError(f"a row holds {type(cell).__name__}, not image bytes or the path of an image file")
        img.load()  # decoding happens here: a cut file fails now, not later
        return img.convert(mode) if mode else img
    except Exception as exc:  # Pillow's errors for damaged images are many (OSError, ValueError, SyntaxError...)
        raise ConfigError("input", column, f"an image cannot be decoded ({' '.join(str(exc).split())[:200]}); "
                                           "drop or replace it") from None


def _text_ids(texts: list, seq_len: int, column: str) -> np.ndarray:
    """The last ``seq_len`` characters of each text as character ids, left-padded with spaces."""
    out = np.full((len(texts), seq_len), _SPACE_ID, dtype=np.uint8)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ConfigError("input", column, f"a row holds {'no text (null)' if t is None else type(t).__name__}, "
                                               "not text; drop or fill those rows")
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
    first = next((b.column(0).slice(0, 1) for _, b in split.batches([column]) if b.num_rows), None)
    if first is None:  # files of no rows (counted in their metadata, which said otherwise)
        raise ConfigError("split", split.name, f"{split.source}: the split has no rows; choose a split that has some")
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
    values = _leaf_values(first, column)
    shape = _row_shape(first) or (1,)
    if math.prod(shape) == 0:
        raise ConfigError("input", column, f"rows hold no values (the first row's shape {list(shape)}); name a "
                                           "column of numbers")
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


def _label_kind(t) -> str | None:
    """``names`` (strings) or ``ids`` (integers, booleans): what a label column may hold."""
    import pyarrow as pa

    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "names"
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "ids"
    return None


@dataclass
class Labels:
    """Class ids of the train and test rows and how many classes there are."""

    train: np.ndarray
    test: np.ndarray | None
    num_classes: int


def encode_labels(feature, train, test, text_input: bool, num_classes: int | None, column: str) -> Labels:
    """Class ids (int64) from a label column of the split and, if any, of the test split (same numbering)."""
    import datasets

    arrays = [a for a in (train, test) if a is not None]
    if any(a.null_count for a in arrays):
        raise ConfigError("label", column, "has missing values (nulls); drop or fill those rows first")
    kinds = [_label_kind(a.type) for a in arrays]
    if kinds[0] is None:
        raise ConfigError("label", column, f"holds {train.type} values; a label column holds class ids or names")
    if len(set(kinds)) > 1:
        raise ConfigError("label", column, f"holds {train.type} values in the split but {test.type} values in the test "
                                           "split; give both splits labels of one type")
    if kinds[0] == "names":
        values = [np.asarray(a.to_pylist(), dtype=object) for a in arrays]
        if text_input and all(len(v) == 1 for a in values for v in a):
            ids = [encode("".join(a)).astype(np.int64) for a in values]
            top = TEXT_CLASSES
        else:
            names = np.unique(np.concatenate(values).astype(str))
            ids = [np.searchsorted(names, a.astype(str)).astype(np.int64) for a in values]
            top = len(names)
    else:
        raw = [a.to_numpy(zero_copy_only=False) for a in arrays]
        if any(len(r) and r.min() < 0 for r in raw):
            raise ConfigError("label", column, "holds negative labels (unlabelled rows?); drop those rows")
        most = max((int(r.max()) for r in raw if len(r)), default=0)
        if most >= MAX_LABEL_CLASSES:
            raise ConfigError("label", column, f"holds label {most}; class ids are 0 to {MAX_LABEL_CLASSES - 1:,} "
                                               "(renumber them)")
        ids = [r.astype(np.int64) for r in raw]
        top = len(feature.names) if isinstance(feature, datasets.ClassLabel) else max(2, most + 1)
        if num_classes is None and most >= top:
            raise ConfigError("label", column, f"holds label {most}, but its ClassLabel names {top} classes; fix the "
                                               "labels or set num_classes")
    if num_classes is not None:
        if any(len(i) and i.max() >= num_classes for i in ids):
            raise ConfigError("num_classes", num_classes, f"label column {column!r} holds label "
                                                          f"{max(int(i.max()) for i in ids if len(i))}; raise "
                                                          "num_classes or leave it out")
        top = num_classes
    return Labels(ids[0], ids[1] if test is not None else None, top)
