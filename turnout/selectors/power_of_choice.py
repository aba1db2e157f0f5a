"""Power-of-Choice: biased selection towards clients with high local loss, in three published versions.

Notes: ``docs/algorithms/baselines.md#power-of-choice``. ``variant`` picks the version:

``cho`` — Cho, Wang & Joshi (2020/22; arXiv:2010.01243, as described in the paper):
  1. a candidate set ``A`` of ``d`` clients is drawn from the available ones **without
     replacement, ∝ n_k** (sequential weighted sampling, implemented with Efraimidis–Spirakis keys
     ``log(u)/n_k`` so it is one vectorised pass over the population);
  2. each candidate's local loss ``F_k(x_t)`` is estimated — ``estimate: full`` on all its training
     data (``pow-d``), ``cpow`` on a ``probe_batch``-sample minibatch (``cpow-d``), ``rpow`` from
     the training loss it last reported (``rpow-d``: no extra communication; never-seen clients
     count as +inf so they are tried first — our [RECON] initialisation);
  3. the ``m`` candidates with the highest loss train (ties broken at random) and the server takes
     the simple average (``weighting: equal``).
  ``d`` unset means every available client (FLGo's default ``d = N``); ``d_end`` decays ``d``
  linearly to ``d_end`` over the run (the paper's "d may be decayed"). ``d`` is raised to the
  launch count when the round mode over-commits past it.

``fedgs`` — the ``WwZzz/FedGS`` baseline (FedGS §4.1, ``algorithm/powerofchoice.py``): the loss of
  the global model on **every** available client (``d = N_a``, no candidate sampling), the top
  ``min(m, N_a)`` train, uniform average. [Deviation] FedGS evaluates each client's *validation*
  split; ``ctx.probe_loss`` only evaluates training data (and ``world.extras`` carries no validation
  split for our datasets), so the loss is measured on the client's full training data. FLGo's
  indexing [QUIRK] (``flgo/algorithm/powerofchoice.py``) does not arise: we always index the
  candidate set.

``adaptive_ou`` — the ``mriberodiaz/selection_ou_weights`` baseline (Adaptive-OU §4.2, §4.3.4; ``--loss=True``):
  ``clients_per_round`` clients are sampled uniformly and **all train**; the server ranks them by
  their reported training loss and the top ``keep`` (the code's ``effective_num_clients``, default
  ⌈K/2⌉ = the code's 5 of 10) keep weight ``n_k``, the rest get weight 0; aggregation is the
  weighted mean. The code ranks by the *summed* training-loss metric (``loss_statistic: sum``,
  mean loss × samples processed); ``mean`` ranks by the mean. The ranking needs the losses of the
  round being aggregated, so it happens in :meth:`PowerOfChoiceSelector.settle_weights`, which the
  engine calls between the round's close and aggregation.
  ``rank_by: probe`` is the paper's reading ("loss at the beginning of a round", Adaptive-OU §4.2):
  the sampled clients' losses are probed before training and the ranking is fixed at selection.
  Non-finite training losses (non-finite updates) get weight 0, as in the code.

Loss probes (``full``, ``cpow``, ``fedgs``, ``rank_by: probe``) go through ``ctx.probe_loss``, which
the engine bills to the round: each probed client downloads the model, runs a forward pass and
uploads its loss, and the round starts when the slowest answer is in. A probed client with no
data (loss NaN) ranks last.
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from ..config.base import StrictModel
from ..config.limits import MAX_BATCH, MAX_CLIENTS
from ..core.capabilities import WorldNeed
from ..world.context import WorldContext
from .base import SELECTORS, Cohort, RoundFeedback, SelectionContext, Selector

_CHO_ONLY = ("d", "d_end", "estimate", "probe_batch")
_AOU_ONLY = ("keep", "rank_by", "loss_statistic")


def weighted_sample_without_replacement(rng: np.random.Generator, candidates: np.ndarray, weights: np.ndarray,
                                        size: int) -> np.ndarray:
    """``size`` of ``candidates`` drawn one after another without replacement, each draw ∝ ``weights``.

    Efraimidis–Spirakis: the ``size`` smallest keys ``E_i/w_i`` (``E_i`` standard exponential, i.e.
    ``−log u_i``; one per candidate) have exactly the distribution of sequential weighted draws.
    Zero-weight candidates are only taken, uniformly at random, when the positive-weight ones run out.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    n = len(candidates)
    if size >= n:
        return candidates.copy()
    if size <= 0:
        return np.zeros(0, np.int64)
    w = np.asarray(weights, dtype=np.float64)
    e = rng.standard_exponential(n)
    pos = w > 0
    npos = int(np.count_nonzero(pos))
    if npos == n:
        return candidates[np.argpartition(e / w, size - 1)[:size]]
    if npos >= size:
        keys = np.full(n, np.inf)
        keys[pos] = e[pos] / w[pos]
        return candidates[np.argpartition(keys, size - 1)[:size]]
    zeros = np.flatnonzero(~pos)
    extra = zeros[np.argpartition(e[zeros], size - npos - 1)[:size - npos]]
    return np.concatenate([candidates[pos], candidates[extra]])


def top_by_loss(rng: np.random.Generator, candidates: np.ndarray, losses: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` candidates with the highest loss; NaN ranks last; ties broken at random."""
    loss = np.asarray(losses, dtype=np.float64)
    loss = np.where(np.isnan(loss), -np.inf, loss)
    order = np.lexsort((rng.random(len(candidates)), -loss))
    return np.asarray(candidates, dtype=np.int64)[order[:max(m, 0)]]


@SELECTORS.register("power_of_choice")
class PowerOfChoiceSelector(Selector):
    """Power-of-Choice: the highest-loss clients train (Cho et al. pow-d/cpow-d/rpow-d, FedGS, Adaptive-OU repos)."""

    needs_training = "ranks clients by their loss on the global model"
    fills_free_slots = True
    reads_client_data = "ranks clients by their loss on the global model"

    class Config(StrictModel):
        clients_per_round: int = Field(
            10, ge=1, le=MAX_CLIENTS,
            description="m: clients that train per round (adaptive_ou: clients sampled, all of which train)")
        variant: Literal["cho", "fedgs", "adaptive_ou"] = Field(
            "cho", description="cho: d candidates ∝ n_k, top m by loss (Cho et al.); fedgs: loss on every available "
                               "client, top m (FedGS repo); adaptive_ou: all sampled train, top keep by reported "
                               "training loss keep weight n_k (Adaptive-OU repo)")
        d: Optional[int] = Field(
            None, ge=1, le=MAX_CLIENTS,
            description="cho: candidate-set size d ≥ clients_per_round (unset: every available client)")
        d_end: Optional[int] = Field(
            None, ge=1, le=MAX_CLIENTS,
            description="cho: decay d linearly to this value over the run (unset: constant d)")
        estimate: Literal["full", "cpow", "rpow"] = Field(
            "full", description="cho: candidate loss on all local training data (pow-d), on a probe_batch minibatch "
                                "(cpow-d), or the last reported training loss (rpow-d, no probe)")
        probe_batch: int = Field(64, ge=1, le=MAX_BATCH,
                                 description="cho with estimate: cpow — samples per loss estimate")
        weighting: Optional[Literal["equal", "n_samples"]] = Field(
            None, description="aggregation weight: equal (simple average; default for cho / fedgs) or n_samples "
                              "(default and only choice for adaptive_ou, whose dropped clients get 0)")
        keep: Optional[int] = Field(
            None, ge=1, le=MAX_CLIENTS,
            description="adaptive_ou: k clients that keep weight (effective_num_clients; unset: "
                        "⌈clients_per_round/2⌉)")
        rank_by: Literal["train_loss", "probe"] = Field(
            "train_loss", description="adaptive_ou: rank by the training loss reported this round (the code) or by "
                                      "a loss probe before training (the paper's 'loss at the beginning of a round')")
        loss_statistic: Literal["sum", "mean"] = Field(
            "sum", description="adaptive_ou with rank_by: train_loss — the code's summed loss metric (mean × "
                               "samples processed) or the mean loss")

        @model_validator(mode="after")
        def _variant_options(self) -> "PowerOfChoiceSelector.Config":
            given = self.model_fields_set
            if self.variant != "cho":
                bad = [k for k in _CHO_ONLY if k in given]
                if bad:
                    raise ValueError(f"{', '.join(bad)}: only for variant: cho (variant is {self.variant})")
            if self.variant != "adaptive_ou":
                bad = [k for k in _AOU_ONLY if k in given]
                if bad:
                    raise ValueError(f"{', '.join(bad)}: only for variant: adaptive_ou (variant is {self.variant})")
            elif self.weighting == "equal":
                raise ValueError("variant adaptive_ou weights the kept clients by n_k (weighting: n_samples)")
            if self.d is not None and self.d < self.clients_per_round:
                raise ValueError(f"d = {self.d} must be >= clients_per_round = {self.clients_per_round}")
            if self.d_end is not None:
                if self.d is None:
                    raise ValueError("d_end needs d (the starting candidate-set size)")
                if not self.clients_per_round <= self.d_end <= self.d:
                    raise ValueError(f"d_end = {self.d_end} must be between clients_per_round and d = {self.d}")
            if self.keep is not None and self.keep > self.clients_per_round:
                raise ValueError(f"keep = {self.keep} must be <= clients_per_round = {self.clients_per_round}")
            return self

    state_attrs = ("last_loss",)

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        #: rpow-d: each client's last reported training loss (+inf: never reported, tried first)
        self.last_loss = np.full(self.num_clients, np.inf)
        self.keep = cfg.keep if cfg.keep is not None else math.ceil(cfg.clients_per_round / 2)
        self.weighting = cfg.weighting or ("n_samples" if cfg.variant == "adaptive_ou" else "equal")

    @classmethod
    def needs_simulator(cls, cfg: Config) -> WorldNeed | None:
        why = "probes losses by evaluating the clients' training data on the server"
        if cfg.variant == "fedgs":
            return WorldNeed("variant", "fedgs", why, "selector.variant: cho with selector.estimate: rpow "
                                                      "(the training losses clients report)")
        if cfg.variant == "cho" and cfg.estimate != "rpow":
            return WorldNeed("estimate", cfg.estimate, why,
                             "selector.estimate: rpow (the training losses clients report)")
        if cfg.variant == "adaptive_ou" and cfg.rank_by == "probe":
            return WorldNeed("rank_by", "probe", why,
                             "selector.rank_by: train_loss (the training losses clients report)")
        return None

    def candidates_d(self, round: int) -> Optional[int]:
        """Candidate-set size of round ``round`` (None: every available client)."""
        c = self.cfg
        if c.d is None or c.d_end is None:
            return c.d
        frac = min(1.0, round / max(1, self.world.rounds - 1))
        return int(round_half_up(c.d + (c.d_end - c.d) * frac))

    def _weights(self, clients: np.ndarray) -> np.ndarray:
        if self.weighting == "equal":
            return np.ones(len(clients))
        return self.n_train[clients].astype(np.float64)

    def _empty(self) -> Cohort:
        return Cohort(np.zeros(0, np.int64), np.zeros(0), normalize=True, target=0)

    # ------------------------------------------------------------------------------------------
    def select(self, ctx: SelectionContext) -> Cohort:
        avail = np.asarray(ctx.available, dtype=np.int64)
        if len(avail) == 0:
            return self._empty()
        m = min(int(ctx.launch), len(avail))
        target = min(self.target(), m)
        v = self.cfg.variant
        if v == "adaptive_ou":
            return self._select_adaptive_ou(ctx, avail, m, target)
        if v == "fedgs":
            cands = avail
            losses = ctx.probe_loss(cands, None)
        else:
            d = self.candidates_d(ctx.round)
            d = len(avail) if d is None else min(max(d, m), len(avail))
            cands = weighted_sample_without_replacement(ctx.rng, avail, self.n_train[avail], d)
            est = self.cfg.estimate
            if est == "rpow":
                losses = self.last_loss[cands]
            else:
                losses = ctx.probe_loss(cands, None if est == "full" else self.cfg.probe_batch)
        clients = np.sort(top_by_loss(ctx.rng, cands, losses, m))
        return Cohort(clients, self._weights(clients), normalize=True, target=target)

    def _select_adaptive_ou(self, ctx: SelectionContext, avail: np.ndarray, m: int, target: int) -> Cohort:
        clients = np.sort(ctx.rng.choice(avail, size=m, replace=False))
        w = self._weights(clients)
        if self.cfg.rank_by == "probe":
            losses = ctx.probe_loss(clients, None)
            kept = np.zeros(len(clients), bool)
            kept[np.isin(clients, top_by_loss(ctx.rng, clients, losses, self.keep))] = True
            w = np.where(kept, w, 0.0)
        return Cohort(clients, w, normalize=True, target=target)

    # ------------------------------------------------------------------------------------------
    def settle_weights(self, cohort: Cohort, feedback: RoundFeedback) -> np.ndarray:
        """Final weights once the round's reports are in (called by the engine before aggregation).

        Only ``adaptive_ou`` with ``rank_by: train_loss`` changes anything: among the reports
        aggregated this round the ``keep`` with the highest training loss keep ``n_k``, every
        other launched client gets 0 (non-finite losses rank last and get 0, as in the code).
        """
        if self.cfg.variant != "adaptive_ou" or self.cfg.rank_by != "train_loss":
            return cohort.weights
        agg = np.asarray(feedback.aggregated, dtype=bool)
        loss = np.asarray(feedback.train_loss, dtype=np.float64)
        if self.cfg.loss_statistic == "sum":
            loss = loss * np.asarray(feedback.n_samples, dtype=np.float64)
        ok = agg & np.isfinite(loss)
        idx = np.flatnonzero(ok)
        order = idx[np.lexsort((idx, -loss[idx]))]  # highest loss first; ties by cohort position
        w = np.zeros(len(cohort.clients))
        top = order[:self.keep]
        w[top] = np.asarray(cohort.weights, dtype=np.float64)[top]
        return w

    def observe(self, feedback: RoundFeedback) -> None:
        delivered = np.asarray(feedback.aggregated, bool) | np.asarray(feedback.late, bool)
        loss = np.asarray(feedback.train_loss, dtype=np.float64)
        ok = delivered & np.isfinite(loss)
        self.last_loss[np.asarray(feedback.clients)[ok]] = loss[ok]



def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))
