"""GlueFL sticky sampling: C clients from a sticky group S, K − C from outside, unbiased weights.

GlueFL §3.1, Algorithm 2, Eq. (3), Appendix B (Propositions 1–2) and Appendix F, as coded in
``TCtower/GlueFL`` (``gluefl_client_manager.py`` / ``gluefl_aggregator.py``); notes:
``docs/algorithms/gluefl.md#sticky-sampling``.

**Round 0 (initialisation, the code's round 1).** The group is empty: ``L = min(S, |available|)``
available clients are drawn uniformly into it, and the cohort is ``min(launch, L)`` of them, all
treated as *non-sticky* ("changed"), with weight ``ν = (N/K_run)·p_i`` (the code's ``1/K_run`` for
``p_i = 1/N``). The group is not rebalanced after this round (the code updates it only for r > 1).

**Later rounds.** With ``n_tot`` = the round mode's launch count and ``n_extra = n_tot − K``:
``n_ch = (K − C) + round(w_oc·n_extra)`` non-sticky candidates (``overcommit_weight = w_oc``; unset:
the code's ``w_oc = −1`` form ``round((K − C)·n_tot/K)``, i.e. extras split in proportion C : K − C)
and ``n_st = n_tot − n_ch`` sticky ones. Sticky candidates are drawn uniformly from the group's
available members, non-sticky ones uniformly from the available clients outside the group.
Without over-commitment this is exactly C from S and K − C from N∖S. ``round`` is Python's
(half to even), as in the code.

**Weights** (``Cohort.normalize = False``: absolute, unbiased), ``p_i`` = 1/N (``weighting: equal``,
GlueFL) or ``n_i/Σn`` (``n_samples``), ``S`` = the current group size, ``N`` = the population:

- ``weights: paper`` (default; the code's weights differ, [QUIRK]): sticky
  ``ν_s = (S/C_act)·p_i``, non-sticky ``ν_r = ((N − S)/R_act)·p_i`` with the *actual* numbers of
  sticky and non-sticky reports;
- ``weights: code``: ``ν_s = p_i·S/(K_run − (K − C))``, ``ν_r = p_i·(N − S)/(K − C)``, ``K_run`` the
  number of reports (the code's form, whose sticky denominator shrinks when fewer non-sticky
  clients finish).

With everyone available and no over-commitment the expectation of ``Σ ν_i v_i`` over a round is
exactly ``Σ_i p_i v_i`` for any group state (C of S uniformly, K − C of N − S uniformly).
The weights are fixed when the cohort is chosen, from the *planned* counts (the reports the
round is expected to aggregate: C and K − C, or fewer when fewer are available). Under
over-commitment which clients finish first is only known at the close, so the actual-count
weights are computed by :meth:`StickySelector.settle_weights`, which the engine calls
before aggregation.

**Group rebalancing** after a round, from :class:`RoundFeedback`: only non-sticky clients whose
report was *aggregated* (the fast completers; stragglers, dropouts and late reports are not)
are promoted into the group. To keep ``|group| ≤ S`` as many members are removed, uniformly at
random, from

- ``rebalance: paper`` (default): the group minus this round's sticky participants (``S∖C``);
- ``rebalance: code``: the whole group (it may evict this round's sticky participants).

When no non-sticky client ran nothing changes — the code's ``group[:-0]`` [BUG] would empty the
whole group; we guard it. While the group is smaller than S (few clients were available at
initialisation) promoted clients are added without removals until it reaches S (the code keeps
``|group| = L`` for ever; our deviation, so the group recovers the configured size).

**Fewer available than asked.** With ``fill: true`` (default) a side that has too few available
candidates is topped up from the other side, so every available client is launched when fewer
than the launch count are available (the code launches only what each side finds). Weights use
the actual side counts, which keeps them unbiased in the one case where fill happens with full
availability (S = N: no outside clients; everyone is weighted S/C·p_i = N/K·p_i).

Other deviations from the code, by design:

- Initial group: uniform. The code takes ``round(1.3·L)`` online clients and keeps the ``L`` with
  the highest ``min(up, down)`` bandwidth ([QUIRK] biased towards fast clients); the selector does
  not see device profiles, and the paper's group is uniform.
- ``L = min(S, |online|)`` and non-sticky candidates ``min(n_ch, |online outside|)``; the code's
  ``|online| − 1`` caps are off-by-one artefacts.
- Selection from the group is uniform among *available* members; GlueFL's within-round split
  (fastest K − C non-sticky, C sticky that finish before them) is a round-mode matter: the engine's
  over-commit mode aggregates the first K overall.

The cohort carries each member's sticky flag as the tag ``"sticky"`` (GlueFL's error compensation
reloads a residual only for clients sampled as sticky); the last cohort's flags and client-side
scales ``a_i = ν_i/p_i`` (``S/C``, ``(N − S)/(K − C)`` or ``N/K``) are also kept, for diagnostics, as
:attr:`StickySelector.last_sticky` and :attr:`StickySelector.last_scale`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from ..config.base import Fraction, StrictModel
from ..config.limits import MAX_CLIENTS
from ..core import rng as rngmod
from ..core.errors import ConfigError
from ..world.context import WorldContext
from .base import SELECTORS, Cohort, RoundFeedback, SelectionContext, Selector

REBALANCE_PURPOSE = "selector/sticky-rebalance"


def default_sticky_per_round(k: int) -> int:
    """C when unset: K − max(1, round(K/5)) — GlueFL's 24 of 30 (change_num 6)."""
    return k - max(1, int(round(k / 5)))


def resample_probability(r: np.ndarray | int, n: int, k: int, s: int, c: int) -> np.ndarray:
    """GlueFL Proposition 2: P(a client just sampled is next sampled exactly ``r`` rounds later)."""
    r = np.asarray(r, dtype=np.float64)
    den = (n - s) * k - (k - c) * s
    return (k * (n * c - s * k) / s * (1 - k / s) ** (r - 1)
            + (k - c) ** 2 * (1 - (k - c) / (n - s)) ** (r - 1)) / den


@dataclass
class _Launched:
    round: int
    clients: np.ndarray
    sticky: np.ndarray  # bool, aligned with clients
    p: np.ndarray  # p_i of each client
    group_size: int  # S at selection
    init: bool  # the initialisation round (everyone weighted N/K_run·p_i, no rebalancing)


@SELECTORS.register("sticky")
class StickySelector(Selector):
    """GlueFL sticky sampling: C from a sticky group of S, K − C from outside, unbiased weights, group rebalancing."""

    reads_client_data = ""  # the group and the draws are its own randomness (weights read sample counts only)

    class Config(StrictModel):
        clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS,
                                       description="K: reports wanted per round (GlueFL num_participants)")
        sticky_size: Optional[int] = Field(
            None, ge=1, le=MAX_CLIENTS,
            description="S: sticky group size (unset: 4K, GlueFL's default, capped at N − (K − C))")
        sticky_per_round: Optional[int] = Field(
            None, ge=0, le=MAX_CLIENTS,
            description="C: clients per round drawn from the sticky group (unset: K − max(1, "
                        "round(K/5)), GlueFL's 24 of 30); K − C is GlueFL's sticky_group_change_num")
        overcommit_weight: Optional[Fraction] = Field(
            0.4, description="share of the over-commitment extras drawn from outside the sticky group (GlueFL "
                             "overcommit_weight; 0.4 in every shipped config, 0.9 is App. F's best '10%' strategy); "
                             "unset: split in proportion C : K − C (the paper's default, the code's −1)")
        weights: Literal["paper", "code", "equal"] = Field(
            "paper", description="paper: ν_s = (S/C_act)p_i, ν_r = ((N−S)/R_act)p_i with the actual counts; code: "
                                 "ν_s = p_i·S/(K_run − (K−C)), ν_r = p_i·(N−S)/(K−C); equal: the biased "
                                 "'GlueFL (Equal)' of the paper's Fig. 5, ν_i = N·p_i/K_run (1/K_run with equal p_i)")
        rebalance: Literal["paper", "code"] = Field(
            "paper", description="which members make room for promoted clients: paper — the group minus this "
                                 "round's sticky participants (S∖C); code — the whole group")
        weighting: Literal["equal", "n_samples"] = Field(
            "equal", description="p_i in the weights: equal (1/N, GlueFL) or n_samples (n_i / Σ n)")
        fill: bool = Field(
            True, description="top up a side with too few available candidates from the other side, so that every "
                              "available client is launched when fewer than asked are available")

        @model_validator(mode="after")
        def _sizes(self) -> "StickySelector.Config":
            k = self.clients_per_round
            c = self.sticky_per_round if self.sticky_per_round is not None else default_sticky_per_round(k)
            if c > k:
                raise ValueError(f"sticky_per_round = {c} must be <= clients_per_round = {k}")
            if self.sticky_size is not None and self.sticky_size < k:
                raise ValueError(f"sticky_size = {self.sticky_size} must be >= clients_per_round = {k} "
                                 "(each round removes K − C members that did not run)")
            return self

    state_attrs = ("group", "in_group")
    scratch_attrs = ("last_sticky", "last_scale", "_last")  # the current round's cohort, set at selection

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        n, k = self.num_clients, cfg.clients_per_round
        self.K = k
        self.C = cfg.sticky_per_round if cfg.sticky_per_round is not None else default_sticky_per_round(k)
        if cfg.sticky_size is not None:
            if cfg.sticky_size > n:
                raise ConfigError("selector.sticky_size", cfg.sticky_size,
                                  f"must be <= the number of clients ({n}); GlueFL uses 4·clients_per_round")
            self.S = cfg.sticky_size
        else:
            self.S = min(4 * k, max(k, n - (k - self.C)))
        if cfg.weighting == "equal":
            self.p = np.full(n, 1.0 / n)
        else:
            tot = float(np.sum(self.n_train))
            self.p = self.n_train / tot if tot > 0 else np.full(n, 1.0 / n)
        self.group = np.zeros(0, np.int64)  # sorted member ids
        self.in_group = np.zeros(n, dtype=bool)
        self.last_sticky = np.zeros(0, dtype=bool)
        self.last_scale = np.zeros(0)
        self._last: Optional[_Launched] = None

    def target(self) -> int:
        return self.K

    def _set_group(self, members: np.ndarray) -> None:
        self.in_group[self.group] = False
        self.group = np.sort(np.asarray(members, dtype=np.int64))
        self.in_group[self.group] = True

    # ------------------------------------------------------------------------------------------
    def candidate_counts(self, n_tot: int) -> tuple[int, int]:
        """(sticky, non-sticky) candidates for a launch of ``n_tot`` (GlueFL App. F; the code's split)."""
        k, c = self.K, self.C
        w = self.cfg.overcommit_weight
        if w is None:
            n_ch = int(round((k - c) * n_tot / k))
        else:
            n_ch = (k - c) + int(round(w * max(0, n_tot - k)))
        n_ch = min(n_ch, n_tot)
        return n_tot - n_ch, n_ch

    def select(self, ctx: SelectionContext) -> Cohort:
        avail = np.asarray(ctx.available, dtype=np.int64)
        n_tot = int(ctx.launch)
        rng = ctx.rng
        if len(avail) == 0 or n_tot <= 0:
            return self._cohort(ctx.round, np.zeros(0, np.int64), np.zeros(0, bool), init=False)
        if len(self.group) == 0:  # initialisation (GlueFL §3.1: a random group of S)
            members = rng.choice(avail, size=min(self.S, len(avail)), replace=False)
            self._set_group(members)
            chosen = members[:min(n_tot, len(members))]  # `members` is in random order
            if self.cfg.fill and len(chosen) < n_tot:
                rest = avail[~self.in_group[avail]]
                more = min(n_tot - len(chosen), len(rest))
                if more > 0:
                    chosen = np.concatenate([chosen, rng.choice(rest, size=more, replace=False)])
            return self._cohort(ctx.round, chosen, np.zeros(len(chosen), bool), init=True)

        n_st, n_ch = self.candidate_counts(n_tot)
        in_grp = self.in_group[avail]
        st_pool, ch_pool = avail[in_grp], avail[~in_grp]
        a, b = min(n_st, len(st_pool)), min(n_ch, len(ch_pool))
        if self.cfg.fill:
            short = n_tot - a - b
            more_b = min(max(short, 0), len(ch_pool) - b)
            b += more_b
            a += min(max(short - more_b, 0), len(st_pool) - a)
        st = rng.choice(st_pool, size=a, replace=False) if a else np.zeros(0, np.int64)
        ch = rng.choice(ch_pool, size=b, replace=False) if b else np.zeros(0, np.int64)
        clients = np.concatenate([st, ch])
        sticky = np.concatenate([np.ones(a, bool), np.zeros(b, bool)])
        return self._cohort(ctx.round, clients, sticky, init=False)

    def _cohort(self, round: int, clients: np.ndarray, sticky: np.ndarray, init: bool) -> Cohort:
        order = np.argsort(clients, kind="stable")
        clients, sticky = np.asarray(clients, np.int64)[order], sticky[order]
        launched = _Launched(round, clients, sticky, self.p[clients], len(self.group), init)
        self._last = launched
        target = min(self.K, len(clients))
        # Planned reports per side: K − C non-sticky (or what there is), the rest of the target sticky.
        n_st, n_ch = int(sticky.sum()), int((~sticky).sum())
        r_plan = min(n_ch, max(self.K - self.C, target - n_st))
        c_plan = min(n_st, target - r_plan)
        w = self._weights(launched, c_plan, r_plan, target)
        self.last_sticky = sticky
        self.last_scale = w / np.where(launched.p > 0, launched.p, 1.0)
        return Cohort(clients, w, normalize=False, target=target, tags={"sticky": sticky})

    def _weights(self, launched: _Launched, c_run: int, r_run: int, k_run: int) -> np.ndarray:
        """ν_i for every launched client given the numbers of sticky / non-sticky / all reports."""
        p, s, n = launched.p, launched.group_size, self.num_clients
        if launched.init or self.cfg.weights == "equal":
            return p * n / max(k_run, 1)
        if self.cfg.weights == "paper":
            nu_s = s / max(c_run, 1)
            nu_r = (n - s) / max(r_run, 1)
        else:  # the code's K_run form; its denominators are guarded against 0 (the code would divide by 0)
            nu_s = s / max(k_run - (self.K - self.C), 1)
            nu_r = (n - s) / max(self.K - self.C, 1)
        return p * np.where(launched.sticky, nu_s, nu_r)

    # ------------------------------------------------------------------------------------------
    def settle_weights(self, cohort: Cohort, feedback: RoundFeedback) -> np.ndarray:
        """ν_i from the actual numbers of sticky and non-sticky reports of the closed round."""
        last = self._last
        if last is None or last.round != feedback.round or len(last.clients) != len(feedback.clients):
            return cohort.weights
        agg = np.asarray(feedback.aggregated, dtype=bool)
        c_run = int((agg & last.sticky).sum())
        r_run = int((agg & ~last.sticky).sum())
        return self._weights(last, c_run, r_run, c_run + r_run)

    def observe(self, feedback: RoundFeedback) -> None:
        last = self._last
        if last is None or last.round != feedback.round or last.init:
            return
        clients = np.asarray(feedback.clients, dtype=np.int64)
        if len(clients) != len(last.clients) or not np.array_equal(clients, last.clients):
            return
        agg = np.asarray(feedback.aggregated, dtype=bool)
        promoted = clients[agg & ~last.sticky]
        if len(promoted) == 0:
            return  # guard: the code's group[:-0] would empty the group
        grp = self.group
        excess = len(grp) + len(promoted) - self.S
        if excess > 0:
            rng = rngmod.stream(self.seed, REBALANCE_PURPOSE, feedback.round)
            if self.cfg.rebalance == "paper":
                ran = np.zeros(self.num_clients, dtype=bool)
                ran[clients[agg & last.sticky]] = True
                pool, protected = grp[~ran[grp]], grp[ran[grp]]
            else:
                pool, protected = grp, np.zeros(0, np.int64)
            take = min(excess, len(pool))
            removed = rng.choice(pool, size=take, replace=False) if take else np.zeros(0, np.int64)
            more = min(excess - take, len(protected))
            if more > 0:  # S∖C too small (over-commitment with S close to K): evict participants too
                removed = np.concatenate([removed, rng.choice(protected, size=more, replace=False)])
            keep = np.ones(self.num_clients, dtype=bool)
            keep[removed] = False
            grp = grp[keep[grp]]
            if len(grp) + len(promoted) > self.S:  # more fast completers than the group holds
                promoted = rng.choice(promoted, size=max(self.S - len(grp), 0), replace=False)
        self._set_group(np.concatenate([grp, promoted]))
