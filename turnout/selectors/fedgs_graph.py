"""FedGS's 3DG (data-distribution-dependency graph) and its shortest-path distance matrix.

Pipeline (FedGS §3.2, Eqs. (10)–(12), as coded in ``WwZzz/FedGS`` ``algorithm/oracle_fedgs.py``;
``docs/algorithms/fedgs.md#3dg-construction``; every feature type goes through the same steps):

1. features ``u_i`` (one row per client): oracle label proportions or the synthetic task's local
   optima, the mean output logits of each client's round-0 model on Gaussian noise
   (*functional* similarity), or the clients' uploaded updates (*update cosine*);
2. similarity ``V_ij = cos(u_i, u_j)`` off the diagonal, min–max normalised to [0, 1]
   (:func:`normalised_similarity`);
3. edges ``R_ij = exp(−V_ij² / σ)`` when ``V_ij > ε``, no edge otherwise, ``R_ii = 0``
   (:func:`adjacency`);
4. Floyd–Warshall all-pairs shortest paths (``scipy.sparse.csgraph``), divided by the largest
   finite distance; disconnected pairs get that maximum, 1.0 (:func:`shortest_path_distances`).

Clients whose features are not known yet (learned graphs before a client has reported) are
isolated nodes: distance 1.0 (the maximum) to everyone else. The matrices are dense ``N × N``
and Floyd–Warshall is ``O(N³)``, which is fine for FedGS's 30–100 clients and a few thousand at
most (the selector refuses populations above its ``max_clients``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from scipy.sparse.csgraph import csgraph_from_dense, floyd_warshall

from ..core import numerics

#: FedGS code defaults (``create_adj_from_graph(graph, epsilon=0.01, sigma=0.1)``).
DEFAULT_EPSILON = 0.01
DEFAULT_SIGMA = 0.1
#: Noise batch size of FedGS's functional ("logit") features: one test batch of 128.
NOISE_BATCH = 128


def cosine_similarity(features: np.ndarray, clamp_negative: bool = False) -> np.ndarray:
    """``cos(u_i, u_j)`` for every pair, float64 ``(n, n)`` with a zero diagonal.

    A zero feature vector (a client with no training labels, a zero update) has similarity 0 to
    everyone (FedGS would produce NaN). ``clamp_negative`` applies the paper's ``max(cos, 0)``
    (Eqs. 11–12); the FedGS code does not clamp, which is the default. The graph decides the cohort,
    so the products are exact on every BLAS kernel (:func:`turnout.core.numerics.cosine_similarity`).
    """
    v = numerics.cosine_similarity(features)
    if clamp_negative:
        np.maximum(v, 0.0, out=v)
    np.fill_diagonal(v, 0.0)
    return v


def normalised_similarity(sim: np.ndarray) -> np.ndarray:
    """Min–max normalise a similarity matrix with a zero diagonal to [0, 1], as the FedGS code does.

    [QUIRK, kept] ``create_graph_from_features`` takes ``max`` and ``min`` *before* filling the
    diagonal, so the zero diagonal takes part: ``lo = min(0, min_{i≠j} V)``,
    ``hi = max(0, max_{i≠j} V)``. With non-negative features (label proportions) that makes the
    normalisation ``V / max V``. The diagonal is then set to ``hi`` (→ 1.0); it is never used for
    edges. When ``hi == lo`` (every pair orthogonal, or a single client) every similarity is 0.
    """
    v = np.array(sim, dtype=np.float64, copy=True)
    n = len(v)
    np.fill_diagonal(v, 0.0)
    hi, lo = (float(v.max()), float(v.min())) if n else (0.0, 0.0)
    np.fill_diagonal(v, hi)
    if hi <= lo:
        return np.zeros_like(v)
    return (v - lo) / (hi - lo)


def adjacency(sim01: np.ndarray, epsilon: float = DEFAULT_EPSILON, sigma: float = DEFAULT_SIGMA) -> np.ndarray:
    """Edge lengths ``exp(−V² / σ)`` where ``V > ε``, ``inf`` (no edge) elsewhere, 0 on the diagonal.

    This is the FedGS code's rule; the paper writes ``exp(−V / σ²)`` with ``V ≥ ε`` (the edge rule
    after its Eq. (10); default: the code, ``ε = 0.01``, ``σ = 0.1``). Similar clients are joined by short
    edges, dissimilar ones (``V ≤ ε``) are not joined at all.
    """
    v = np.asarray(sim01, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        r = np.where(v > epsilon, np.exp(-(v * v) / sigma), np.inf)
    np.fill_diagonal(r, 0.0)
    return r


def shortest_path_distances(adj: np.ndarray) -> np.ndarray:
    """Floyd–Warshall over ``adj`` (``inf`` = no edge), normalised as FedGS does.

    Distances are divided by the largest finite one; unreachable pairs then get that maximum,
    1.0. Zero-length edges (``exp`` underflowing for tiny σ) are kept as edges. If no pair is
    reachable at positive distance (no edges at all), every off-diagonal distance is 1.0 and
    reachable zero-length pairs stay 0 (FedGS would divide by zero here).
    """
    a = np.asarray(adj, dtype=np.float64)
    n = len(a)
    if n == 0:
        return np.zeros((0, 0))
    # null_value=inf: zeros are real (zero-length) edges, only inf means "no edge".
    graph = csgraph_from_dense(a, null_value=np.inf)
    d = floyd_warshall(graph, directed=False)
    finite = np.isfinite(d)
    top = float(d[finite].max()) if finite.any() else 0.0
    if top > 0:
        d = np.where(finite, d / top, 1.0)
    else:
        d = np.where(finite, 0.0, 1.0)
    np.fill_diagonal(d, 0.0)
    return d


def distances_from_features(features: np.ndarray, known: np.ndarray | None = None, *,
                            epsilon: float = DEFAULT_EPSILON, sigma: float = DEFAULT_SIGMA,
                            clamp_negative: bool = False) -> np.ndarray:
    """The normalised shortest-path matrix ``H`` (``N × N``) of the 3DG built from ``features``.

    ``known`` (bool ``(N,)``) marks clients whose features exist; the graph is built over those and
    every other client is an isolated node at distance 1.0 from everyone.
    """
    feats = np.asarray(features)
    n = len(feats)
    idx = np.arange(n) if known is None else np.flatnonzero(known)
    sub = shortest_path_distances(adjacency(
        normalised_similarity(cosine_similarity(feats[idx], clamp_negative)), epsilon, sigma))
    if len(idx) == n:
        return sub
    h = np.ones((n, n))
    h[np.ix_(idx, idx)] = sub
    np.fill_diagonal(h, 0.0)
    return h


# ------------------------------------------------------------------------------------------------
# Feature extractors
def label_features(label_hist: np.ndarray) -> np.ndarray:
    """Per-client label proportions (rows of the label histogram divided by their sums; empty → 0)."""
    h = np.asarray(label_hist, dtype=np.float64)
    tot = h.sum(axis=1, keepdims=True)
    return np.divide(h, tot, out=np.zeros_like(h), where=tot > 0)


def noise_inputs(reference: torch.Tensor, generator: torch.Generator, batch: int = NOISE_BATCH) -> torch.Tensor:
    """FedGS's probe batch: Gaussian noise shaped like ``reference[:batch]`` with its scalar mean and std.

    The FedGS code takes the first test batch (128 rows) and draws
    ``normal(mean(batch), std(batch), batch.shape)``; the paper speaks of the mean and covariance
    of a server validation set (FedGS §3.2, Eq. (12)) — we follow the code.
    """
    ref = torch.as_tensor(reference)[:batch].to(torch.float32)
    mean = float(ref.mean()) if ref.numel() else 0.0
    std = float(ref.std()) if ref.numel() > 1 else 1.0
    if not np.isfinite(std) or std <= 0:
        std = 1.0
    return torch.normal(mean, std, size=tuple(ref.shape), generator=generator)


@torch.no_grad()
def functional_features(forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                        local_params: torch.Tensor, noise: torch.Tensor) -> np.ndarray:
    """Mean output (logits) of every local model on the noise batch, ``(k, outputs)`` float64.

    ``forward(flat_params, x) -> outputs`` evaluates the task's model with a flat parameter vector;
    ``local_params`` holds one flat local model per row (``x^t + Δ_i``).
    """
    rows = [forward(p, noise).reshape(len(noise), -1).mean(dim=0) for p in local_params]
    if not rows:
        return np.zeros((0, 0))
    return torch.stack(rows).to(torch.float64).numpy()


class CountSketch:
    """A fixed random signed-bucket projection of long update vectors (preserves inner products in expectation).

    Cosine similarity of model updates in the full parameter space needs ``N × dim`` memory; above
    ``width`` coordinates we keep a count sketch instead: coordinate ``j`` is added, with sign
    ``s_j ∈ {±1}``, to bucket ``h_j``. Bucket and sign come from the ``(seed, "fedgs/sketch")``
    stream so every run on a seed sketches alike.
    """

    def __init__(self, dim: int, width: int, rng: np.random.Generator):
        self.dim, self.width = int(dim), int(width)
        self.bucket = torch.from_numpy(rng.integers(0, self.width, self.dim, dtype=np.int64))
        self.sign = torch.from_numpy(np.where(rng.random(self.dim) < 0.5, -1.0, 1.0).astype(np.float32))

    def __call__(self, updates: torch.Tensor) -> torch.Tensor:
        u = updates.to(torch.float32).reshape(len(updates), self.dim)
        out = torch.zeros(len(u), self.width, dtype=torch.float32)
        return out.index_add_(1, self.bucket, u * self.sign)
