"""Adaptive-OU (Ribero & Vikalo): clients send an update only when its norm beats a threshold;
the server estimates the rest.

Adaptive-OU Algorithms 1–3, as coded in ``mriberodiaz/selection_ou_weights``
(``fed_avg_schedule_{ou,zero,ignore}.py``, ``estimation_utils.py``); notes: ``docs/algorithms/adaptive_ou.md``.

Client rule (round ``t``, threshold ``γ_t`` broadcast with the model):

* ``Δ_k = x_k − x_t`` (the engine's local training), ``m_k = ‖Δ_k‖₂`` over the whole flat vector;
* ``rule: adaptive`` / ``fixed``: transmit iff ``m_k > γ_t``; ``rule: random`` (the code's ``*_random``):
  transmit with probability ``prob_transmit`` from the (seed, "adaptive_ou/transmit", round, client)
  stream;
* otherwise the client sends a **NACK carrying m_k**. On the engine's dense upload path a NACK is
  encoded as the vector ``(m_k, 0, 0, …, 0)``; the server recognises it by its all-zero tail (a real
  update is never zero in every coordinate but the first). :meth:`upload_bytes` charges it
  ``nack_bytes`` (default 8: a 4-byte flag/header and the float32 norm) instead of a model;
* ``quantize: true`` (the code's ``*_compression``): a transmitted update is sent as 8-bit affine
  codes with stochastic rounding (unbiased) plus its float32 minimum and step, i.e. ``⌈bytes/4⌉ + 8``.

Server rule:

1. Substitute for the clients that NACKed — ``ou``: the OU prediction ``Δ̂_t`` with the client's
   weight; ``zero``: 0 with its weight; ``ignore``: weight 0.
2. ``Δ_t = Σ_k w_k Δ̃_k / Σ_k w_k`` (selector weights, ``n_k`` by default as in the code; absolute
   selector weights are used as given), ``x_{t+1} = x_t + η_g Δ_t``.
3. ``γ_{t+1} = m̄ − s``: ``n_k``-weighted mean and standard deviation of the norms of every client
   that reported (the code's weighted version; ``threshold_weighting: uniform`` is the paper's, Algorithm 1).
   ``rule: fixed`` keeps ``γ`` at ``threshold``.
4. The OU estimator (:mod:`.ou_estimator`) adds the pair ``(x_t, x_{t+1})`` and predicts
   ``Δ̂_{t+1} = a ⊙ x_{t+1} + b − x_{t+1}``. The pair is added at the start of the next round from the
   model the engine actually holds, so a compressor's server-side step is included.

Stability: with ``min_pairs: 2`` (the code) the round-1 estimate is an exact 2-point fit per
coordinate, ``Δ̂ = (x_2 − x_1)² / (x_1 − x_0)``, which explodes on coordinates that barely moved in the
first step; on small problems a few NACKs can then throw the model far off (it recovers over hundreds
of rounds). ``min_pairs`` (wait for more pairs) and ``clip_estimate`` (scale the substitute down to the
norm the NACKing client reported) are the two remedies; both default to the code's behaviour.

Choices: ``Δ̂`` is used only by the server, so it is not charged on the downlink (the code's broadcast
carries it but no client reads it); a report whose upload did not reach the server (dropout, deadline)
is neither a transmission nor a NACK — the OU substitute covers only NACKs, as in the code, where every
sampled client answers. Late reports are not used (its config has no ``max_staleness``).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from ..config.base import Fraction
from ..config.limits import MAX_ROUNDS
from ..core import rng as rngmod
from ..core.capabilities import UploadKind, WorldNeed
from .base import ALGORITHMS, Algorithm, AlgorithmContext, Reports, Traffic
from .ou_estimator import OUEstimator
from .server_step import ServerLRConfig


class AdaptiveOUConfig(ServerLRConfig):
    strategy: Literal["ou", "zero", "ignore"] = Field(
        "ou", description="what replaces a NACKed update: ou (the OU estimate, weight n_k), zero (0, weight n_k), "
                          "ignore (weight 0)")
    rule: Literal["adaptive", "fixed", "random"] = Field(
        "adaptive", description="adaptive: transmit iff ‖Δ‖ > γ_t with γ_{t+1} = mean − std of the norms; fixed: "
                                "γ stays at `threshold`; random: transmit with probability prob_transmit")
    threshold: float = Field(0.0, ge=0.0, allow_inf_nan=False,
                             description="γ_0 of the adaptive rule (code: 0), the constant γ of the fixed rule")
    prob_transmit: Fraction = Field(0.5, description="transmission probability of rule: random")
    threshold_weighting: Literal["n_samples", "uniform"] = Field(
        "n_samples", description="weights of the mean − std threshold update: n_k (code) or uniform (paper)")
    quantize: bool = Field(False, description="send transmitted updates as 8-bit codes (the code's *_compression)")
    nack_bytes: int = Field(8, ge=0, le=1 << 20, description="wire size of a NACK + its float32 norm")
    min_pairs: int = Field(2, ge=2, le=MAX_ROUNDS,
                           description="model pairs (x_t, x_{t+1}) seen before the OU estimate is used "
                                       "(code: 2, i.e. from round 1 on); Δ̂ = 0 before")
    clip_estimate: bool = Field(
        False, description="scale the OU substitute of a NACKed client down to the norm m_k it reported (not in the "
                           "code; tames the estimate while only a few pairs have been seen)")


def is_nack(updates: torch.Tensor) -> np.ndarray:
    """Rows of ``updates`` that are NACK payloads ``(m, 0, …, 0)``."""
    if len(updates) == 0:
        return np.zeros(0, dtype=bool)
    return (updates[:, 1:] == 0).all(dim=1).numpy()


def quantize_8bit(v: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``v`` after an 8-bit affine round trip with stochastic (unbiased) rounding."""
    lo, hi = float(v.min()), float(v.max())
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi == lo:
        return v.clone()
    step = (hi - lo) / 255.0
    scaled = (v.double() - lo) / step
    q = torch.floor(scaled + torch.rand(v.shape, generator=gen, dtype=torch.float64)).clamp_(0, 255)
    return (lo + q * step).to(v.dtype)


@ALGORITHMS.register("adaptive_ou")
class AdaptiveOU(Algorithm):
    """Adaptive-OU: send an update only if its norm beats mean − std, else a NACK; OU/ZERO/IGNORE fill the gaps."""

    needs_training = "decides from each update's norm whether to send it or a NACK"

    Config = AdaptiveOUConfig
    traffic = Traffic(upload=UploadKind.NACK_OR_DELTA,  # a NACK is (norm, 0, …, 0): a compressor would corrupt it
                      own_compression="algorithm.quantize: true (its own 8-bit uploads, which keep the NACKs intact)")
    cohort_bound = "estimates the silent members of the round's own cohort from their OU models"
    reads_each_report = ("keeps OU estimates fitted to raw updates and its send-or-not reads each raw norm; its "
                         "NACKs carry the norm un-noised")

    state_attrs = ("threshold", "ou", "predicted", "prev_params", "full_uploads", "nacks")
    scratch_attrs = ("round", "last_metrics")

    def __init__(self, cfg: AdaptiveOUConfig, ctx: AlgorithmContext):
        super().__init__(cfg, ctx)
        if ctx.dim < 2:
            raise ValueError("adaptive_ou encodes a NACK as (norm, 0, …, 0): the model needs at least 2 parameters")
        self.threshold = float(cfg.threshold)  # γ_t
        self.ou = OUEstimator(ctx.dim)
        self.predicted = torch.zeros(ctx.dim)  # Δ̂_t
        self.prev_params: torch.Tensor | None = None
        self.round = 0
        self.full_uploads = 0  # Σ_t Σ_k 1[transmitted]
        self.nacks = 0
        self.last_metrics: dict[str, object] = {}

    @classmethod
    def needs_simulator(cls, cfg: AdaptiveOUConfig) -> WorldNeed | None:
        return WorldNeed("name", "adaptive_ou", "its clients decide between an upload and a NACK against the server's "
                         "running threshold, which the server and clients share only inside the simulator",
                         "algorithm.name: fedavg (compressor: quant8 for 8-bit uploads)")

    # ---- client rule ------------------------------------------------------------------------
    def begin_round(self, round: int, clients: np.ndarray, steps: np.ndarray, lr: float) -> None:
        self.round = int(round)

    def transmits(self, client: int, norm: float) -> bool:
        if self.cfg.rule == "random":
            u = rngmod.stream(self.ctx.seed, "adaptive_ou/transmit", self.round, client).random()
            return bool(u < self.cfg.prob_transmit)
        return norm > self.threshold

    def client_update(self, client: int, start: torch.Tensor, end: torch.Tensor,
                      grad_sum: torch.Tensor | None = None) -> torch.Tensor:
        delta = end - start
        norm = float(torch.linalg.vector_norm(delta))
        if not math.isfinite(norm):
            return delta  # non-finite: the engine rejects the report
        if self.transmits(client, norm):
            if self.cfg.quantize:
                return quantize_8bit(delta, rngmod.torch_generator(self.ctx.seed, "adaptive_ou/quantize",
                                                                   self.round, client))
            return delta
        nack = torch.zeros_like(delta)
        nack[0] = norm
        return nack

    def upload_bytes(self, round: int, clients: np.ndarray, uploads: torch.Tensor,
                     default_bytes: np.ndarray) -> np.ndarray:
        """Wire bytes of each client's upload: ``nack_bytes`` for a NACK, 8-bit codes when quantising.

        Engine hook: called after the compressor with the raw client uploads and the bytes
        the engine would charge (compressor bytes × ``Traffic.up``).
        """
        out = np.asarray(default_bytes, dtype=np.int64).copy()
        if self.cfg.quantize:
            out = (out + 3) // 4 + 8  # 8 bits instead of 32 per value, plus the float32 minimum and step
        out[is_nack(uploads)] = self.cfg.nack_bytes
        return out

    # ---- server rule ------------------------------------------------------------------------
    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        cfg = self.cfg
        if self.prev_params is not None:  # the pair (x_{t−1}, x_t): x_t as the engine holds it
            self.ou.update(self.prev_params, global_params)
        use_ou = cfg.strategy == "ou" and self.ou.n >= cfg.min_pairs
        self.predicted = self.ou.predict_delta(global_params) if use_ou else torch.zeros_like(global_params)
        self.prev_params = global_params.detach().clone()

        k = len(reports)
        ups = reports.updates
        nack = is_nack(ups)
        norms = np.zeros(k)
        if k:
            norms = np.where(nack, ups[:, 0].double().numpy(), torch.linalg.vector_norm(ups.double(), dim=1).numpy())
        w = np.asarray(reports.weights, np.float64).copy()
        subst = ups.clone()
        if nack.any():
            rows = torch.from_numpy(nack)
            if cfg.strategy == "ou":
                subst[rows] = self.predicted.to(ups.dtype)
                if cfg.clip_estimate:
                    pn = float(torch.linalg.vector_norm(self.predicted.double()))
                    if pn > 0:
                        scale = np.minimum(1.0, norms[nack] / pn)
                        subst[rows] *= torch.as_tensor(scale, dtype=ups.dtype)[:, None]
            else:
                subst[rows] = 0.0
                if cfg.strategy == "ignore":
                    w[nack] = 0.0
        update = torch.zeros_like(global_params)
        if k:
            total = w.sum()
            if reports.normalize:
                if total > 0:
                    update = torch.as_tensor(w / total, dtype=ups.dtype) @ subst
            else:
                update = torch.as_tensor(w, dtype=ups.dtype) @ subst

        if cfg.rule == "adaptive" and k:
            nk = (np.asarray(reports.n_samples, np.float64) if cfg.threshold_weighting == "n_samples"
                  else np.ones(k))
            if nk.sum() <= 0:
                nk = np.ones(k)
            mean = float(np.average(norms, weights=nk))
            std = math.sqrt(float(np.average((norms - mean) ** 2, weights=nk)))
            self.threshold = mean - std
        sent = int((~nack).sum())
        self.full_uploads += sent
        self.nacks += int(nack.sum())
        self.last_metrics = {"ou_threshold": self.threshold, "n_full_uploads": sent, "n_nack": int(nack.sum())}
        return update

    def round_metrics(self) -> dict[str, object]:
        """Extra columns for the round's row: threshold, full uploads, NACKs."""
        return dict(self.last_metrics)

