"""Flat vectors and masks on the wire, in the format turnout's byte accounting prices.

A sparse message carries float32 values plus the cheaper of int32 indices and a bitmap over the
model, and is never larger than the dense vector (:func:`turnout.compressors.base.sparse_bytes`).
:func:`encode_values` writes exactly that, so the arrays a deployment sends for a model sync weigh
what the simulator charges for the same download. A coordinate set alone (a compressor's shared or
frozen mask) is sent as the cheaper of indices and a bitmap, or as nothing when it is empty or full.
Every encoding is a dict of numpy arrays plus a ``form`` string, so it travels in any container.
"""

from __future__ import annotations

import numpy as np

from ..core.wire import INDEX_BYTES, VALUE_BYTES

EMPTY, DENSE, INDICES, BITMAP, FULL = "empty", "dense", "indices", "bitmap", "full"


def _support_form(nnz: int, dim: int, dense_alternative: bool) -> str:
    """How to name ``nnz`` of ``dim`` positions: the cheaper of int32 indices and a bitmap."""
    if nnz == 0:
        return EMPTY
    if nnz >= dim:
        return DENSE if dense_alternative else FULL
    return INDICES if nnz * INDEX_BYTES <= (dim + 7) // 8 else BITMAP


def encode_values(vector: np.ndarray, mask: np.ndarray) -> tuple[str, dict[str, np.ndarray]]:
    """The values of ``vector`` at ``mask`` (bool), as ``(form, arrays)`` of the priced size."""
    vector = np.asarray(vector, dtype=np.float32)
    mask = np.asarray(mask, dtype=bool)
    dim, nnz = len(vector), int(mask.sum())
    form = _support_form(nnz, dim, dense_alternative=True)
    coded = nnz * VALUE_BYTES + min(nnz * INDEX_BYTES, (dim + 7) // 8)
    if form != EMPTY and coded >= dim * VALUE_BYTES:
        form = DENSE
    if form == EMPTY:
        return form, {}
    if form == DENSE:
        return form, {"values": vector.copy()}
    values = vector[mask]
    if form == INDICES:
        return form, {"values": values, "index": np.flatnonzero(mask).astype(np.int32)}
    return form, {"values": values, "bitmap": np.packbits(mask)}


def decode_values(form: str, arrays: dict[str, np.ndarray], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, values at the mask)`` of an :func:`encode_values` message over ``dim`` coordinates."""
    if form == EMPTY:
        return np.zeros(dim, dtype=bool), np.zeros(0, dtype=np.float32)
    values = np.asarray(arrays["values"], dtype=np.float32)
    if form == DENSE:
        if len(values) != dim:
            raise ValueError(f"a dense message carries {len(values)} values for a model of {dim}")
        return np.ones(dim, dtype=bool), values
    mask = decode_mask(form, arrays, dim)
    if int(mask.sum()) != len(values):
        raise ValueError(f"a sparse message names {int(mask.sum())} positions but carries {len(values)} values")
    return mask, values


def sparse_vector(form: str, arrays: dict[str, np.ndarray], dim: int) -> np.ndarray:
    """The dense float32 vector of an :func:`encode_values` message (zeros off its support)."""
    mask, values = decode_values(form, arrays, dim)
    out = np.zeros(dim, dtype=np.float32)
    out[mask] = values
    return out


def encode_mask(mask: np.ndarray) -> tuple[str, dict[str, np.ndarray]]:
    """A coordinate set as the cheaper of int32 indices and a bitmap; nothing when it is empty or full."""
    mask = np.asarray(mask, dtype=bool)
    form = _support_form(int(mask.sum()), len(mask), dense_alternative=False)
    if form == INDICES:
        return form, {"index": np.flatnonzero(mask).astype(np.int32)}
    if form == BITMAP:
        return form, {"bitmap": np.packbits(mask)}
    return form, {}


def decode_mask(form: str, arrays: dict[str, np.ndarray], dim: int) -> np.ndarray:
    """The bool mask of an :func:`encode_mask` (or the support of an :func:`encode_values`) message."""
    if form == EMPTY:
        return np.zeros(dim, dtype=bool)
    if form in (FULL, DENSE):
        return np.ones(dim, dtype=bool)
    mask = np.zeros(dim, dtype=bool)
    if form == INDICES:
        index = np.asarray(arrays["index"], dtype=np.int64)
        if len(index) and (index.min() < 0 or index.max() >= dim):
            raise ValueError(f"a sparse message names positions outside the model's {dim}")
        mask[index] = True
        return mask
    if form == BITMAP:
        bits = np.unpackbits(np.asarray(arrays["bitmap"], dtype=np.uint8))
        if len(bits) < dim:
            raise ValueError(f"a bitmap of {len(bits)} bits cannot cover a model of {dim}")
        return bits[:dim].astype(bool)
    raise ValueError(f"unknown message form {form!r}")


def nbytes(arrays: dict[str, np.ndarray]) -> int:
    """Payload bytes of a message: the raw size of its arrays."""
    return int(sum(np.asarray(a).nbytes for a in arrays.values()))


__all__ = ["decode_mask", "decode_values", "encode_mask", "encode_values", "nbytes", "sparse_vector"]
