"""Shared machinery of the sparsifying compressors (top-k, STC, GlueFL): layouts, masks, residuals, sizes.

**Layout.** Per-tensor top-k (GlueFL and STC as coded: ``k = max(1, ⌊q·numel⌋)`` for every parameter
tensor) needs the model's tensor sizes inside the flat vector. Compressors take them as the
constructor keyword ``layout`` (a list of sizes summing to ``dim``); without it the whole vector is
one tensor, i.e. per-tensor and global top-k coincide.

**Cohort information.** Re-scaled error compensation (GlueFL eq. 7) needs each client's
aggregation weight ν_i and, for the code's reload rule, whether it was sampled as sticky. The engine
hands both over through :meth:`SparsifierBase.begin_round` (see :class:`CohortMemory`); when it does
not, every client of a round gets ν = 1/k and counts as not sticky.

**Residuals** live in the per-client state store (``store``), or in a small dict when a compressor is
built without one (unit tests). Re-scaled residuals are stored as ``h̃ = ν·h`` and reloaded as
``h̃/ν_now``, which is ``(ν_prev/ν_now)·h_prev``: the client's *weighted* contribution telescopes,
``Σ_t ν_t·sent_t + h̃_T = Σ_t ν_t·update_t``, whatever its weights do.

**Wire sizes** (bytes; float32 values, int32 indices): see :func:`index_bytes`, :func:`upload_bytes`
and :func:`download_bytes_for`. Two accountings: ``exact`` (values + the cheaper of indices and a
bitmap, only for positions the receiver does not already know; the shared-mask broadcast priced
separately) and ``gluefl_code`` (the formulas of ``TCtower/GlueFL``, for faithful reproduction of
its bandwidth numbers; ``docs/algorithms/gluefl.md#bandwidth-accounting``).
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import numpy as np
import torch

from ..core.capabilities import UploadKind
from ..core.finite import finite_rows
from ..core.records import Cohort, SentStep
from .base import INDEX_BYTES, VALUE_BYTES, Compressor, sparse_bytes

Accounting = Literal["exact", "gluefl_code"]
ACCOUNTING_HELP = ("exact: values + the cheaper of int32 indices and a bitmap (positions the receiver already "
                   "knows cost nothing; the shared-mask broadcast is priced); gluefl_code: the byte formulas of "
                   "TCtower/GlueFL, for reproducing its bandwidth numbers")
SCOPE_HELP = ("tensor: k = max(1, ⌊q·numel⌋) per parameter tensor (GlueFL/STC as coded; needs the model layout "
              "from the engine, else the whole vector counts as one tensor); global: one top-k over the whole vector")


def bitmap_bytes(dim: int) -> int:
    """A bitmap over the model: 1 bit per coordinate."""
    return (int(dim) + 7) // 8


def index_bytes(n: np.ndarray | int, dim: int) -> np.ndarray:
    """Cost of telling the receiver which ``n`` of ``dim`` positions: min(int32 indices, bitmap); 0 if all or none."""
    n = np.asarray(n, dtype=np.int64)
    return np.where((n <= 0) | (n >= dim), 0, np.minimum(n * INDEX_BYTES, bitmap_bytes(dim)))


class Layout:
    """Where each parameter tensor lies in the flat vector (offsets and sizes)."""

    def __init__(self, sizes: Sequence[int] | None, dim: int):
        sizes = [int(dim)] if not sizes else [int(s) for s in sizes]
        if sum(sizes) != dim or any(s <= 0 for s in sizes):
            raise ValueError(f"layout sizes {sizes[:8]}... must be positive and sum to dim = {dim}")
        self.sizes = sizes
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.dim = int(dim)

    @classmethod
    def build(cls, sizes: Sequence[int] | None, dim: int, scope: str = "tensor") -> "Layout":
        return cls(None if scope == "global" else sizes, dim)

    def __len__(self) -> int:
        return len(self.sizes)

    def segments(self):
        for i, n in enumerate(self.sizes):
            yield int(self.offsets[i]), int(self.offsets[i + 1]), n

    def k_for(self, ratio: float) -> list[int]:
        """``max(1, ⌊ratio·numel⌋)`` per tensor (FedScale's TopKCompressor); 0 where ratio is 0."""
        if ratio <= 0:
            return [0] * len(self.sizes)
        return [min(n, max(1, int(n * ratio))) for n in self.sizes]


def topk_select(x: torch.Tensor, ks: list[int], layout: Layout, forced: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean mask ``(rows, dim)`` of the positions each row sends.

    Per tensor, the ``ks[t]`` largest magnitudes are chosen, with ``forced`` positions (the shared
    mask) chosen first (GlueFL's "set M to max|g|, then top_q"); chosen positions whose value is 0 are
    dropped unless forced (the code's ``decompress(...).to(bool)``). ``|forced ∩ tensor| ≤ ks[t]``.
    """
    rows = x.shape[0]
    mask = torch.zeros(x.shape, dtype=torch.bool)
    mag = x.abs()
    if forced is not None:
        mag = torch.where(forced.unsqueeze(0), torch.full_like(mag, math.inf), mag)
    mag = torch.nan_to_num(mag, nan=0.0)
    for (a, b, n), k in zip(layout.segments(), ks):
        if k <= 0 or rows == 0:
            continue
        if k >= n:
            mask[:, a:b] = True
            continue
        mask[:, a:b] = largest_k(mag[:, a:b], k)
    keep = x != 0
    if forced is not None:
        keep |= forced.unsqueeze(0)
    return mask & keep


def largest_k(mag: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of each row's ``k`` largest entries (``0 < k < n``, no NaN): the set ``torch.topk`` picks.

    On the CPU each row's k-th largest value is found by ``np.partition`` (1.5× faster than ``torch.topk`` on
    GlueFL's MLP cohort, ``bench/upload_encoding.py``) and the row keeps what is at least that value. That set
    *is* the top k unless the k-th value is tied across the boundary; such a row (more than k at least the k-th
    value, e.g. a row with fewer than k non-zeros) takes ``torch.topk``'s own choice, so the mask is always topk's.
    """
    if mag.device.type != "cpu":
        return _topk_mask(mag, k)
    m = mag.numpy()
    n = m.shape[1]
    out = m >= np.partition(m, n - k, axis=1)[:, n - k:n - k + 1]
    tied = np.flatnonzero(np.count_nonzero(out, axis=1) != k)
    if len(tied):
        out[tied] = _topk_mask(mag[torch.from_numpy(tied)], k).numpy()
    return torch.from_numpy(out)


def _topk_mask(mag: torch.Tensor, k: int) -> torch.Tensor:
    mask = torch.zeros(mag.shape, dtype=torch.bool, device=mag.device)
    return mask.scatter_(1, torch.topk(mag, k, dim=1, sorted=False).indices, True)


def ternarize(x: torch.Tensor, mask: torch.Tensor, layout: Layout) -> torch.Tensor:
    """STC's ternarisation: on each row's kept positions of a tensor, sign(x)·mean|x| over those positions."""
    out = torch.zeros_like(x)
    for a, b, _ in layout.segments():
        m = mask[:, a:b]
        cnt = m.sum(dim=1, keepdim=True).clamp(min=1)
        mu = (x[:, a:b].abs() * m).sum(dim=1, keepdim=True) / cnt
        out[:, a:b] = torch.sign(x[:, a:b]) * mu * m
    return out


class DictStore:
    """A stand-in for :class:`ClientStateStore` when a compressor is built without one (zeros when unseen)."""

    def __init__(self, dim: int):
        self.dim = dim
        self.rows: dict[tuple[str, int], torch.Tensor] = {}

    def get(self, name: str, clients: np.ndarray) -> torch.Tensor:
        out = torch.zeros(len(clients), self.dim)
        for i, c in enumerate(np.asarray(clients).tolist()):
            if (name, c) in self.rows:
                out[i] = self.rows[(name, c)]
        return out

    def put(self, name: str, clients: np.ndarray, values: torch.Tensor) -> None:
        for i, c in enumerate(np.asarray(clients).tolist()):
            self.rows[(name, c)] = torch.as_tensor(values[i], dtype=torch.float32).clone()


class CohortMemory:
    """This round's aggregation weights ν_i (shares of the total when relative) and sticky flags, by client."""

    def __init__(self):
        self.round: int | None = None
        self.pos: dict[int, int] = {}
        self.nu = np.zeros(0)
        self.sticky: np.ndarray | None = None

    def set(self, round: int, clients: np.ndarray, weights: np.ndarray, normalize: bool,
            sticky: np.ndarray | None) -> None:
        clients = np.asarray(clients, dtype=np.int64)
        w = np.asarray(weights, dtype=np.float64)
        if normalize:
            tot = float(w.sum())
            w = w / tot if tot > 0 else np.full(len(w), 1.0 / max(len(w), 1))
        self.round = int(round)
        self.pos = {c: i for i, c in enumerate(clients.tolist())}
        self.nu = w
        self.sticky = (np.asarray(sticky, dtype=bool) if sticky is not None and len(sticky) == len(clients) else None)

    def lookup(self, round: int, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ν, sticky) per client; ν = 1/k and not sticky for clients the engine told nothing about."""
        k = len(clients)
        nu = np.full(k, 1.0 / max(k, 1))
        sticky = np.zeros(k, dtype=bool)
        if self.round != round:
            return nu, sticky
        for i, c in enumerate(np.asarray(clients, dtype=np.int64).tolist()):
            j = self.pos.get(c)
            if j is not None:
                nu[i] = self.nu[j]
                if self.sticky is not None:
                    sticky[i] = self.sticky[j]
        return nu, sticky


def code_upload_bytes(ratio: float, dim: int, unique_ratio: float | None = None) -> int:
    """GlueFL code's upload: ``q·M + bitmap`` (STC) or ``q·M + min((q − q_shr)·M, bitmap)`` (GlueFL)."""
    dense = dim * VALUE_BYTES
    idx = bitmap_bytes(dim) if unique_ratio is None else min(math.ceil(unique_ratio * dense), bitmap_bytes(dim))
    return int(math.ceil(ratio * dense) + idx)


def code_download_bytes(lacking: np.ndarray, dim: int) -> np.ndarray:
    """GlueFL code's download for STC / GlueFL / APF: ``min(ρ·M + bitmap, M)``."""
    lacking = np.asarray(lacking, dtype=np.int64)
    return np.minimum(lacking * VALUE_BYTES + bitmap_bytes(dim), dim * VALUE_BYTES)


class SparsifierBase(Compressor):
    """Client top-q (optionally around a shared mask), server top-q of the update, error feedback, exact sizes.

    Subclasses set the knobs in ``__init__``:

    - ``client_ratio`` / ``server_ratio``: q on each side (None: that side is not compressed);
    - ``shared_ratio``: q_shr of GlueFL's shared mask (None: no mask shifting);
    - ``regenerate_every``: I (None: the mask is never regenerated after round 0);
    - ``ec``: "off", "rescaled" (store ν·h, reload /ν_now) or "unscaled" (store and reload h);
    - ``reload``: "always" or "sticky" (only clients sampled as sticky reload their residual);
    - ``server_ec``: server-side error feedback of what the server's top-q dropped;
    - ``ternary``: STC's sign × mean-magnitude values on both sides.
    """

    needs_training = "sends the largest coordinates of each update"

    accepts = frozenset({UploadKind.MODEL_DELTA})
    residual_name = "residual"
    state_attrs = ("shared_mask", "mask_in_use", "server_residual")
    #: this round's cohort (set by begin_round) and the last upload support (for tests and metrics)
    scratch_attrs = ("cohort", "last_upload_support")

    client_ratio: float | None = None
    server_ratio: float | None = None
    shared_ratio: float | None = None
    regenerate_every: int | None = None
    ec: str = "off"
    reload: str = "always"
    server_ec: bool = False
    ternary: bool = False
    #: (q − q_shr) in the GlueFL code's upload formula; None: STC's ``q·M + bitmap``
    code_unique_ratio: float | None = None

    def __init__(self, cfg, dim: int, seed: int, store=None, layout: Sequence[int] | None = None):
        super().__init__(cfg, dim, seed, store)
        # every sparsifier's Config has ``scope`` and ``accounting`` (SCOPE_HELP, ACCOUNTING_HELP)
        self.layout = Layout.build(layout, dim, cfg.scope)
        self.accounting: str = cfg.accounting
        self._store = store if store is not None else DictStore(dim)
        self.cohort = CohortMemory()
        self.shared_mask = torch.zeros(dim, dtype=torch.bool)  # M for the next round
        self.mask_in_use = False  # whether the coming round's clients need M
        self.server_residual = torch.zeros(dim)
        self.last_upload_support: torch.Tensor | None = None  # (k, dim) bool, for tests and metrics

    # ---- engine hooks ------------------------------------------------------------------------
    def begin_round(self, round: int, cohort: Cohort) -> None:
        """The cohort's aggregation weights and sticky flags (aligned with its clients), before training."""
        self.cohort.set(round, cohort.clients, np.asarray(cohort.weights, np.float64), cohort.normalize,
                        cohort.tag("sticky"))

    def regenerates(self, round: int) -> bool:
        """Whether ``round`` is a regeneration round (plain top-q on both sides, fresh mask)."""
        if self.shared_ratio is None:
            return True
        if self.regenerate_every is None:
            return round == 0
        return round % self.regenerate_every == 0

    def _forced(self, round: int) -> torch.Tensor | None:
        if self.shared_ratio is None or self.regenerates(round) or not bool(self.shared_mask.any()):
            return None
        return self.shared_mask

    def device_state(self, round: int) -> dict[str, torch.Tensor]:
        """The shared mask M when this round's uploads are built around it (it is priced in the download)."""
        return {} if self._forced(round) is None else {"shared_mask": self.shared_mask.clone()}

    # ---- client side -------------------------------------------------------------------------
    def encode_uploads(self, round: int, clients: np.ndarray, updates: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        k = len(clients)
        if k == 0:
            return updates, np.zeros(0, dtype=np.int64)
        if self.client_ratio is None:
            return updates, np.full(k, self.dim * VALUE_BYTES, dtype=np.int64)
        clients = np.asarray(clients, dtype=np.int64)
        updates = updates.to(torch.float32)
        finite = finite_rows(updates)
        nu, sticky = self.cohort.lookup(round, clients)
        g = updates.clone()
        if self.ec != "off":
            reload = (sticky if self.reload == "sticky" else np.ones(k, bool)) & finite.numpy() & (nu > 0)
            if reload.any():
                res = self._store.get(self.residual_name, clients[reload])
                if self.ec == "rescaled":
                    res = res / torch.as_tensor(nu[reload], dtype=torch.float32).unsqueeze(1)
                g[torch.from_numpy(reload)] += res
        forced = self._forced(round)
        mask = topk_select(g, self.layout.k_for(self.client_ratio), self.layout, forced)
        sent = ternarize(g, mask, self.layout) if self.ternary else g * mask
        if self.ec != "off" and bool(finite.any()):
            h = g - sent
            if self.ec == "rescaled":
                h = h * torch.as_tensor(nu, dtype=torch.float32).unsqueeze(1)
            self._store.put(self.residual_name, clients[finite.numpy()], h[finite])
        decoded = torch.where(finite.unsqueeze(1), sent, updates)  # a non-finite report goes through (rejected)
        self.last_upload_support = mask
        return decoded, self._upload_bytes(mask, forced)

    def _upload_bytes(self, mask: torch.Tensor, forced: torch.Tensor | None) -> np.ndarray:
        dim = self.dim
        # counted in numpy: a bool tensor's ``sum(dim=1)`` is ~4x slower (bench/upload_encoding.py)
        n = np.count_nonzero(mask.numpy(), axis=1).astype(np.int64)
        n_shared = int(forced.sum()) if forced is not None else 0
        n_unique = n - np.count_nonzero((mask & forced.unsqueeze(0)).numpy(), axis=1).astype(np.int64) \
            if forced is not None else n
        if self.accounting == "gluefl_code":
            return np.full(len(n), code_upload_bytes(self.client_ratio, dim, self.code_unique_ratio), dtype=np.int64)
        if self.ternary:  # positions + one sign bit per value + one float32 mean magnitude per tensor
            return (index_bytes(n, dim) + (n + 7) // 8 + VALUE_BYTES * len(self.layout)).astype(np.int64)
        # the receiver knows the shared positions (it broadcast M): only the unique ones are indexed
        values = (n_shared + n_unique) * VALUE_BYTES
        return np.minimum(values + index_bytes(n_unique, dim), dim * VALUE_BYTES).astype(np.int64)

    # ---- server side -------------------------------------------------------------------------
    def server_update(self, round: int, update: torch.Tensor) -> SentStep:
        u = update.to(torch.float32)
        if self.server_ec:
            u = u + self.server_residual
        if self.server_ratio is not None and torch.isfinite(u).all():
            forced = self._forced(round)
            mask = topk_select(u.unsqueeze(0), self.layout.k_for(self.server_ratio), self.layout, forced)
            sent = (ternarize(u.unsqueeze(0), mask, self.layout) if self.ternary else u.unsqueeze(0) * mask)[0]
        else:
            sent = u
        if self.server_ec:
            self.server_residual = (u - sent) if torch.isfinite(u).all() else torch.zeros(self.dim)
        if self.shared_ratio is not None:  # M ← top_{q_shr}(|G|), non-zero positions only
            ks = self.layout.k_for(self.shared_ratio)
            self.shared_mask = topk_select(sent.unsqueeze(0), ks, self.layout)[0] & (sent != 0)
            self.mask_in_use = not self.regenerates(round + 1) and bool(self.shared_mask.any())
        sent = sent.to(update.dtype)
        return SentStep(sent, sent != 0)  # sparse uploads (and the server's top-k, where set) make a sparse step

    # ---- downloads ---------------------------------------------------------------------------
    def mask_broadcast_bytes(self) -> int:
        """Bytes to send the shared mask M to one client (0 when the coming round does not use it)."""
        if not self.mask_in_use:
            return 0
        return int(index_bytes(int(self.shared_mask.sum()), self.dim))

    def download_bytes(self, lacking: np.ndarray) -> np.ndarray:
        if self.accounting == "gluefl_code":
            return code_download_bytes(lacking, self.dim)
        return sparse_bytes(lacking, self.dim) + self.mask_broadcast_bytes()
