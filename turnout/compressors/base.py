"""The compressor interface and the wire-size rules shared by every compressor.

Sizes are bytes. Values are float32 (4 B); a sparse message carries its coordinates either as
int32 indices (4 B each) or as a bitmap over the model (⌈D/8⌉ B), whichever is smaller, and a
message is never larger than the dense vector.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping

import numpy as np
import torch
from pydantic import BaseModel

from ..core.capabilities import Deployable, UploadKind, upload_kinds
from ..core.records import Cohort, SentStep
from ..core.registry import Registry
from ..core.state import Stateful
from ..core.wire import INDEX_BYTES, VALUE_BYTES
from ..world.state_store import ClientStateStore

COMPRESSORS: Registry = Registry("compressor", "what goes on the wire up and down, with error feedback")



def sparse_bytes(nnz: np.ndarray | int, dim: int, value_bytes: int = VALUE_BYTES) -> np.ndarray:
    """Bytes to send ``nnz`` of ``dim`` coordinates: values + min(indices, bitmap), capped at dense."""
    nnz = np.asarray(nnz, dtype=np.int64)
    dense = dim * value_bytes
    coded = nnz * value_bytes + np.minimum(nnz * INDEX_BYTES, (dim + 7) // 8)
    return np.where(nnz >= dim, dense, np.minimum(coded, dense))


class Compressor(Stateful, Deployable, ABC):
    """Encodes client uploads and prices downloads from what each client lacks.

    Server-side state (masks, server residuals) is declared in ``state_attrs``; per-client
    residuals live in the client-state store.
    """

    Config: type[BaseModel]
    #: the upload kinds (``Algorithm.traffic``'s ``upload``) this compressor may encode; ``None`` = any.
    #: Config validation refuses other pairs instead of silently breaking an algorithm's invariants.
    #: Plain names are accepted and read as :class:`~turnout.core.capabilities.UploadKind` once, per class.
    accepts: frozenset[UploadKind] | None = None
    #: uploads reach the server exactly as the client computed them, so there is no encoding to run on a
    #: device (a deployment may then derive an upload on the server, see :mod:`turnout.flower`)
    passes_uploads_through: bool = False
    #: why the compressor needs real update values (top-k picks the largest coordinates); empty: its
    #: upload price depends on the model size only, so it runs in the system-only mode (``--no-train``)
    needs_training: str = ""

    def __init_subclass__(cls, **kwargs):
        """A subclass's ``accepts``, as upload kinds: plain names become :class:`UploadKind` (an unknown one is
        an error when the class is defined, not a refusal at validation)."""
        super().__init_subclass__(**kwargs)
        cls.accepts = upload_kinds(cls.accepts)

    def __init__(self, cfg: BaseModel, dim: int, seed: int, store: ClientStateStore | None = None,
                 layout: list[int] | None = None):
        self.cfg = cfg
        self.dim = dim
        self.seed = seed
        self.store = store  # per-client residuals (error feedback) live here
        self.tensor_sizes = list(layout) if layout is not None else [dim]  # the model's parameter tensors

    def begin_round(self, round: int, cohort: Cohort) -> None:
        """Called after selection with the cohort (weights, and tags such as GlueFL's ``sticky``). Default: nothing."""

    @classmethod
    def keeps_round_cohort(cls) -> bool:
        """Whether it keeps the round's one launched cohort (it overrides :meth:`begin_round`): a round that launches
        several (``round_mode.refill: arrival``) would leave it the last one's weights."""
        return cls.begin_round is not Compressor.begin_round

    @abstractmethod
    def encode_uploads(self, round: int, clients: np.ndarray, updates: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """(what the server decodes, bytes sent per client) for a batch of client updates ``(k, dim)``."""

    def dense_upload_bytes(self, count: int) -> np.ndarray:
        """What :meth:`encode_uploads` charges for ``count`` dense updates (the system-only mode's upload price)."""
        return np.full(count, self.dim * VALUE_BYTES, dtype=np.int64)

    def server_update(self, round: int, update: torch.Tensor) -> SentStep:
        """Compress the server's model change before it is applied/broadcast, with the coordinates the sent step
        carries (for a compressor that sparsifies uploads or the step). Default: unchanged and dense."""
        return SentStep(update)

    def device_state(self, round: int) -> dict[str, torch.Tensor]:
        """Server-side state that round ``round``'s upload encoding reads (a shared mask, a frozen set).

        A deployment encodes uploads on the devices and ships this with each instruction; its size
        is part of what :meth:`download_bytes` charges. Default: nothing.
        """
        return {}

    def load_device_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """Install, on a device's own copy of this compressor, what :meth:`device_state` shipped."""
        for name, value in state.items():
            setattr(self, name, value)

    def download_bytes(self, lacking: np.ndarray) -> np.ndarray:
        """Bytes to bring clients up to date, given how many coordinates each lacks."""
        return sparse_bytes(lacking, self.dim)
