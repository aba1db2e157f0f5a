"""A dataset's training rows kept on the training device, put there once per simulation.

On a GPU, copying each client's rows (and each step's minibatch indices) from the host every
round costs more than training a small model on them: pfl-research moves each user's data to the
GPU once for the same reason. :class:`ResidentRows` holds the pooled training arrays on the
device in the smallest exact type — uint8 images stay uint8 (the model's input scaling turns
them into floats on the device), float32 values that float16 holds exactly are stored as
float16 — and a client's rows are then views into them. It is used only when the arrays fit a
share of the device's free memory (:func:`fits`); otherwise rows travel per client as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: at most this share of the device's free memory may hold the resident rows
RESIDENT_SHARE = 0.4


@dataclass(frozen=True)
class ResidentRows:
    """``x`` and ``y`` on the device; :meth:`inputs` turns gathered rows into what the model reads."""

    x: torch.Tensor
    y: torch.Tensor
    source: int  # id of the host array the rows came from (the cache key)

    @classmethod
    def put(cls, x: np.ndarray, y: np.ndarray, device: torch.device) -> "ResidentRows":
        """Copies ``x`` and ``y`` to ``device`` once; exact float16 storage where float32 values allow it."""
        host = np.ascontiguousarray(x)
        if host.dtype == np.float32 and host.size and _float16_exact(host):
            host = host.astype(np.float16)
        return cls(torch.from_numpy(host).to(device), torch.from_numpy(np.ascontiguousarray(y)).to(device), id(x))

    def inputs(self, rows: torch.Tensor) -> torch.Tensor:
        """The model's input for gathered rows: float16 storage is widened to float32 (exactly)."""
        return rows.to(torch.float32) if rows.dtype == torch.float16 else rows


def stored_bytes(x: np.ndarray, y: np.ndarray) -> int:
    """Bytes :meth:`ResidentRows.put` may need on the device (before a float16 narrowing)."""
    return int(x.nbytes + y.nbytes)


def free_bytes(device: torch.device) -> int | None:
    """The device's free memory in bytes (CUDA), or None where torch cannot tell."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return None


def fits(x: np.ndarray, y: np.ndarray, device: torch.device) -> bool:
    """Whether the rows may live on ``device``: not the CPU (they are already there) and within its share."""
    if device.type == "cpu":
        return False
    free = free_bytes(device)
    return free is None or stored_bytes(x, y) <= RESIDENT_SHARE * free


def _float16_exact(x: np.ndarray) -> bool:
    """Whether every value survives float32 → float16 → float32 unchanged (checked in blocks: no big copy)."""
    flat = x.reshape(-1)
    block = 1 << 22
    for a in range(0, len(flat), block):
        part = flat[a:a + block]
        with np.errstate(over="ignore"):
            if not np.array_equal(part.astype(np.float16).astype(np.float32), part):
                return False
    return True


__all__ = ["RESIDENT_SHARE", "ResidentRows", "fits", "free_bytes", "stored_bytes"]
