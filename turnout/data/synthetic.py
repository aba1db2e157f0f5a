"""Synthetic(α, β): the FedProx generator and FedGS's seeded variant of it.

Every client ``k`` has its own softmax-regression "true" model ``(W_k, b_k)`` and its own
Gaussian feature distribution; its labels are ``y = argmax(x @ W_k + b_k)``.

* **α (alpha) — model / concept skew.** ``W_k, b_k ~ N(u_k, 1)`` with ``u_k ~ N(0, α)``: the
  larger α, the more the clients' optimal models disagree (``P(y|x)`` differs across clients).
* **β (beta) — feature skew.** ``x ~ N(v_k, Σ)`` with ``v_k[j] ~ N(B_k, 1)`` and
  ``B_k ~ N(0, β)``: the larger β, the further apart the clients' feature distributions
  (``P(x)``) are. ``Σ = diag((j+1)^-1.2)``.
* Sizes are imbalanced: ``n_k = int(lognormal(4, 2)) + min_samples``.
* ``iid=True`` shares one global model and uses feature means ``v_k = B_k·1`` (FedProx) or
  ``0`` (FedGS), so ``α=β=0`` is *not* IID, while ``iid`` is.

Two variants reproduce the two published generators draw for draw (``litian96/FedProx``
``generate_synthetic.py`` and ``WwZzz/FedGS`` ``benchmark/synthetic_regression/core.py``;
``docs/algorithms/world.md#datasets``): ``fedprox`` (FedProx, MLSys 2020; 90 %/10 % train/test after a
per-user shuffle) and ``fedgs`` (FedGS / easyFL ``dist_id=10``; seeded ``RandomState(97+seed)``;
75 % train / 15 % valid / 10 % test, no shuffle). Both store the clients' optimal models.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_CLASSES, MAX_CLIENTS, MAX_FEATURES, MAX_SAMPLES, MAX_SCALE, MAX_SEED
from ..core import numerics
from ..core import rng as rngmod
from .federated import DataFootprint, FederatedDataset, offsets_from_counts
from .registry import DATASETS


def _covariance(dim: int) -> np.ndarray:
    """``Σ = diag((j+1)^-1.2)``, built as the reference scripts build it."""
    return np.diag(np.power(np.arange(1, dim + 1, dtype=np.float64), -1.2))


def _labels(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``argmax(softmax(x W + b))``; softmax is monotone, so it is left out.

    The product is summed in a fixed order (:func:`turnout.core.numerics.ordered_matmul`): a label is a discrete
    outcome and must not depend on which BLAS kernel the machine picks.
    """
    return np.argmax(numerics.ordered_matmul(x, w) + b, axis=1).astype(np.int64)


def _generate_fedprox(rs: np.random.RandomState, alpha: float, beta: float, iid: bool, num_clients: int,
                      dim: int, num_classes: int, min_samples: int):
    """FedProx ``generate_synthetic.py``, same order of draws from one legacy RandomState.

    Order: lognormal sizes → mean_W → B → mean_x (per user, non-IID only) → [W_global, b_global]
    (IID only) → per user (W, b, X). In the IID case the script still draws a per-user W and b and
    then discards them; that is kept so the stream stays aligned with the reference. (FedProx's
    published ``synthetic_iid`` came from a separate ``generate_iid.py`` with fewer draws; with
    α=β=0 its distribution is the same as ``iid=True`` here: one global model, feature mean 0.)
    """
    sizes = rs.lognormal(4, 2, num_clients).astype(int) + min_samples
    mean_w = rs.normal(0, alpha, num_clients)
    mean_b = mean_w
    big_b = rs.normal(0, beta, num_clients)
    cov = _covariance(dim)
    mean_x = np.zeros((num_clients, dim))
    for k in range(num_clients):
        mean_x[k] = np.ones(dim) * big_b[k] if iid else rs.normal(big_b[k], 1, dim)
    if iid:
        w_global = rs.normal(0, 1, (dim, num_classes))
        b_global = rs.normal(0, 1, num_classes)
    xs, ys, opt = [], [], []
    for k in range(num_clients):
        w = rs.normal(mean_w[k], 1, (dim, num_classes))
        b = rs.normal(mean_b[k], 1, num_classes)
        if iid:
            w, b = w_global, b_global
        x = rs.multivariate_normal(mean_x[k], cov, sizes[k])
        xs.append(x)
        ys.append(_labels(x, w, b))
        opt.append(np.concatenate([w, b[None, :]]).ravel())
    return sizes.astype(np.int64), xs, ys, np.stack(opt)


def _generate_fedgs(rs: np.random.RandomState, alpha: float, beta: float, iid: bool, num_clients: int,
                    dim: int, num_classes: int, min_samples: int):
    """FedGS / easyFL ``TaskGen.gen_data``, same order of draws from one legacy RandomState.

    Non-IID is easyFL's ``dist_id=10`` (concept + feature skew + imbalance): W_global, b_global
    (drawn though unused) → Us → all W_k → all b_k → B → V[k] per client → lognormal sizes →
    per client X_k. easyFL uses a single ``skewness`` for both Us and B; here Us (the model skew)
    uses ``alpha`` and B (the feature skew) uses ``beta``, so alpha = beta = skew reproduces it.
    ``iid=True`` is easyFL's ``dist_id=6`` (global model, global zero feature mean, imbalance):
    W_global, b_global → lognormal sizes → per client X_k.
    """
    w_global = rs.normal(0, 1, (dim, num_classes))
    b_global = rs.normal(0, 1, num_classes)
    cov = _covariance(dim)
    if iid:
        ws = [w_global] * num_clients
        bs = [b_global] * num_clients
        v = np.zeros((num_clients, dim))
    else:
        us = rs.normal(0, alpha, num_clients)  # easyFL: skewness (model skew -> alpha)
        ws = [rs.normal(us[k], 1, (dim, num_classes)) for k in range(num_clients)]
        bs = [rs.normal(us[k], 1, num_classes) for k in range(num_clients)]
        big_b = rs.normal(0, beta, num_clients)  # easyFL: skewness (feature skew -> beta)
        v = np.zeros((num_clients, dim))
        for k in range(num_clients):
            v[k] = rs.normal(big_b[k], 1, dim)
    sizes = rs.lognormal(4, 2, num_clients).astype(int) + min_samples
    xs, ys = [], []
    for k in range(num_clients):
        x = rs.multivariate_normal(v[k], cov, sizes[k])
        xs.append(x)
        ys.append(_labels(x, ws[k], bs[k]))
    opt = np.stack([np.concatenate([ws[k], bs[k][None, :]]).ravel() for k in range(num_clients)])
    return sizes.astype(np.int64), xs, ys, opt


def _cut(sizes: np.ndarray, fractions: tuple[float, ...]) -> list[np.ndarray]:
    """Per-client part sizes for cut points ``int(f·n)`` (the reference's slicing), last part = rest."""
    cuts = [np.zeros_like(sizes)] + [(f * sizes).astype(np.int64) for f in fractions] + [sizes]
    return [cuts[i + 1] - cuts[i] for i in range(len(cuts) - 1)]


def _select(owner: np.ndarray, pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Row indices whose within-client position lies in ``[lo[owner], hi[owner])``, client-major."""
    return np.flatnonzero((pos >= lo[owner]) & (pos < hi[owner]))


@DATASETS.register("synthetic")
class SyntheticDataset:
    """Synthetic(α,β) softmax-regression data of FedProx (α model skew, β feature skew), or FedGS's seeded variant.

    ``variant: fedprox`` follows FedProx's script (unseeded there; here a legacy ``RandomState``
    seeded from ``turnout.core.rng.int_seed(seed, "synthetic")``), shuffles each user's rows and keeps
    the first ``int(0.9 n)`` for training. ``variant: fedgs`` seeds ``RandomState(97 + seed)``
    exactly as FedGS does, so seed 0 with 30 clients and α=β=0.5 reproduces its task
    ``synthetic_regression_cnum30_dist10_skew0.5_seed0``; it splits 75/15/10 train/valid/test
    without shuffling. The server test set is the pooled client test parts.
    ``extras["optimal"]`` holds each client's true model ``concat(W_k, b_k)`` flattened,
    shape ``(num_clients, (dim+1)·num_classes)``.
    """

    class Config(StrictModel):
        alpha: float = Field(0.5, ge=0.0, le=MAX_SCALE,
                             description="model (concept) skew: std of u_k in W_k, b_k ~ N(u_k, 1)")
        beta: float = Field(0.5, ge=0.0, le=MAX_SCALE, description="feature skew: std of B_k in v_k ~ N(B_k, 1)")
        iid: bool = Field(False, description="one global model and a common feature mean for all clients")
        num_clients: int = Field(30, ge=1, le=MAX_CLIENTS, description=f"at most {MAX_CLIENTS:,}")
        dim: int = Field(60, ge=1, le=MAX_FEATURES, description=f"features per sample (at most {MAX_FEATURES:,}; "
                                                                "generation holds a dim × dim covariance)")
        num_classes: int = Field(10, ge=2, le=MAX_CLASSES)
        variant: Literal["fedprox", "fedgs"] = "fedprox"
        min_samples: int = Field(50, ge=1, le=MAX_SAMPLES, description="added to int(lognormal(4, 2)) for every client")
        data_seed: int | None = Field(None, ge=0, le=MAX_SEED,
                                      description="seed of the data; default: the run seed (0 <= seed < 2^32)")

    @classmethod
    def footprint(cls, cfg: "SyntheticDataset.Config") -> DataFootprint:
        """Expected size: ``E[lognormal(4, 2)] = e^6`` rows per client plus ``min_samples``, each drawn as
        float64 then copied to float32 (shuffled, split); ``multivariate_normal`` factorises the
        ``dim × dim`` covariance (about four such matrices); every client's true model is kept."""
        n, dim = cfg.num_clients, cfg.dim
        rows = n * (math.exp(6.0) + cfg.min_samples)
        samples = rows * (dim * (8 + 4 + 4 + 4) + 3 * 8)
        covariance = 4 * 8 * dim * dim
        models = n * ((dim + 1) * cfg.num_classes * (8 + 4) + dim * 8)
        driver = "dim" if covariance > samples + models else "num_clients"
        return DataFootprint(int(samples + covariance + models), driver, num_clients=n, input_shape=(dim,),
                             num_classes=cfg.num_classes,
                             max_client_rows=int(math.exp(4 + 2 * 4) + cfg.min_samples))  # lognormal's 4σ quantile

    @classmethod
    def build(cls, cfg: "SyntheticDataset.Config", seed: int) -> FederatedDataset:
        data_seed = seed if cfg.data_seed is None else cfg.data_seed
        args = (cfg.alpha, cfg.beta, cfg.iid, cfg.num_clients, cfg.dim, cfg.num_classes, cfg.min_samples)
        if cfg.variant == "fedgs":
            # FedGS's BasicTaskGen.set_random_seed: np.random.seed(97 + seed). The modulo only
            # matters for seeds outside RandomState's range; it is the identity for seeds 0..2^32-98.
            rs = np.random.RandomState((97 + int(data_seed)) % 2**32)
            sizes, xs, ys, opt = _generate_fedgs(rs, *args)
            names = np.array([f"Client{i:0{len(str(cfg.num_clients))}d}" for i in range(cfg.num_clients)])
        else:
            # FedProx's script calls no seed; a legacy RandomState seeded from the run keeps its draw
            # order (and numpy's legacy distributions) while making runs reproducible.
            rs = np.random.RandomState(rngmod.int_seed(data_seed, "synthetic") % 2**32)
            sizes, xs, ys, opt = _generate_fedprox(rs, *args)
            names = np.array([f"f_{i:05d}" for i in range(cfg.num_clients)])

        x = np.concatenate(xs).astype(np.float32)
        y = np.concatenate(ys)
        owner = np.repeat(np.arange(cfg.num_clients), sizes)
        starts = offsets_from_counts(sizes)
        if cfg.variant == "fedprox":
            # FedProx shuffles each user's (x, y) pairs with Python's ``random`` (a generator separate
            # from numpy's), so the shuffle gets its own turnout stream; one lexsort shuffles everyone.
            r = rngmod.stream(data_seed, "synthetic-shuffle")
            order = np.lexsort((r.random(len(y)), owner))
            x, y = x[order], y[order]
            fractions: tuple[float, ...] = (0.9,)
        else:
            fractions = (0.75, 0.9)
        pos = np.arange(len(y)) - starts[owner]
        parts = _cut(sizes, fractions)
        bounds = np.cumsum([np.zeros_like(sizes)] + parts, axis=0)
        idx = [_select(owner, pos, bounds[i], bounds[i + 1]) for i in range(len(parts))]
        tr, te = idx[0], idx[-1]
        valid = {}
        if cfg.variant == "fedgs":
            va = idx[1]
            valid = dict(x_valid=x[va], y_valid=y[va], valid_offsets=offsets_from_counts(parts[1]))
        return FederatedDataset(
            name="synthetic",
            x_train=x[tr], y_train=y[tr], train_offsets=offsets_from_counts(parts[0]),
            x_test=x[te], y_test=y[te], test_offsets=offsets_from_counts(parts[-1]),
            x_server_test=x[te], y_server_test=y[te],
            num_classes=cfg.num_classes, input_shape=(cfg.dim,), client_names=names,
            extras={"optimal": opt.astype(np.float32)}, **valid,
        )
