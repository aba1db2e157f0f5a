"""Oort's training selector (Lai et al., OSDI 2021), as used by FedScale and REFL.

Notes: ``docs/algorithms/baselines.md#oort`` (``thirdparty/oort/oort.py`` in ``ahmedcs/REFL``). All state is
struct-of-arrays over the population; one selection is a few vector passes over the available set.

**Utility.** After a client runs, its statistical utility is ``reward_i = |B_i|·ℓ_i`` with
``|B_i| = min(|D_i|, samples trained)`` and its duration is its completion time (``finish_s``).
Clients that ran but were not aggregated (stragglers, drop-outs) get the mean utility reported in
their round (0 when nobody reported), as FedScale and REFL do. Unexplored clients carry their data
size as reward.

**Round counter.** As FedScale's client manager, the first round is a uniform draw and a round whose
available clients all fit in the cohort launches them all; neither calls Oort. Oort's ``T`` counts its
own calls from 1, so ε, the pacer and ``ln T`` follow the code (``first_round: oort`` runs Oort from
the first round instead).

**Score of an explored client** (at Oort's ``T``)::

    (min(reward, clip) − min)/range + sqrt(0.1·ln T / last_i)      clip = clip_bound percentile
    × (T_pref / duration)^round_penalty      if duration > T_pref

with ``last_i`` the (1-based) round of the client's last feedback (Oort's temporal-uncertainty
"staleness" bonus, exactly as coded: divided by the last round, not by the rounds since) and
``T_pref`` the ``round_threshold``-th percentile of the known client durations (∞ at 100).

**Exploration.** ε starts at ``exploration_factor``, is multiplied by ``exploration_decay`` at every
selection and floored at ``exploration_min``. ``⌊ε·n⌋`` slots are for exploration; the exploited
clients are ranked by score, cut at the first client scoring below ``cut_off_util`` × the
``exploitLen``-th score once ``10×exploitLen`` candidates are in, and drawn without replacement
∝ score. The unexplored available clients then fill the remaining slots: the top
``sample_window × exploreLen`` by (duration-penalised) data size, drawn ∝ that size. A cohort still
short is padded with random available clients (REFL's patch) — or, with ``unfilled: exploit``,
exploration slots the unexplored set cannot fill go to exploitation first.

**Pacer.** Each selection records the mean utility of the last round's exploited clients that
reported; every ``pacer_step`` rounds (from ``2·pacer_step`` on) the sums over the last two windows
are compared: a change ≤ 10 % relaxes ``round_threshold`` by ``pacer_delta`` (capped at 100), a
change ≥ 5× tightens it (floored at ``pacer_delta``).

Deviations, each deliberate:

- ``ℓ_i`` is the engine's mean local training loss of the round; Oort uses the square root of an
  exponential moving average (decay 0.2) of the mean *squared* per-sample loss over the first
  epoch. The engine reports no per-sample losses (an engine change could add the RMS loss).
- Durations of clients that never ran are unknown to the selector (FedScale reads them from the
  device profile at registration, which a selector here does not see): ``T_pref`` is taken over the
  known durations and unexplored clients are explored by data size alone.
- The code exploits at most ``len(explored) − 1`` clients (an off-by-one fix of an index error);
  we allow all explored clients and clamp the cut-off index instead.
- Reward normalisation (min, range, clip) uses the explored available clients; the code also
  mixes in the unexplored clients' data sizes.
- FedScale stamps a straggler with the round after the one it ran in (its counter has moved on by the
  time it registers them); turnout stamps the round it ran in (``straggler_round: next`` for the code's).
- Once every available client has been explored, FedScale's Oort still adds its last exploration list
  to each cohort (it is reset only when unexplored clients exist): stale picks, sometimes duplicates of
  exploited ones. That is an authors' bug; turnout launches the current picks only.
- Blacklisting is disabled, as in REFL (``blacklist_rounds = −1``).
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field

from ..config.base import Fraction, StrictModel
from ..config.limits import MAX_CLIENTS, MAX_ROUNDS, MAX_SAMPLES, MAX_SCALE
from ..world.context import WorldContext
from .base import SELECTORS, Cohort, RoundFeedback, SelectionContext, Selector


def weighted_sample(rng: np.random.Generator, items: np.ndarray, weights: np.ndarray, k: int) -> np.ndarray:
    """``k`` of ``items`` without replacement, successively ∝ ``weights`` (Efraimidis–Spirakis keys).

    Items of weight 0 come last, in random order (numpy's ``choice`` would refuse them).
    """
    k = min(int(k), len(items))
    if k <= 0:
        return np.zeros(0, dtype=np.asarray(items).dtype)
    items = np.asarray(items)
    w = np.asarray(weights, dtype=np.float64)
    u = rng.random(len(items))
    pos = np.flatnonzero(w > 0)
    if len(pos) < k:  # every positive weight, then zero weights in random order
        zero = np.flatnonzero(~(w > 0))
        return items[np.concatenate([pos, zero[np.argpartition(u[zero], k - len(pos) - 1)[:k - len(pos)]]])]
    keys = np.log(np.maximum(u[pos], 1e-300)) / w[pos]  # log of u^(1/w): the k largest are the sample
    return items[pos[_top(keys, k)]]


def _top(values: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` largest ``values`` (any order; ties at the boundary by position), O(n)."""
    if m >= len(values):
        return np.arange(len(values))
    if m <= 0:
        return np.zeros(0, np.int64)
    return np.argpartition(-values, m - 1)[:m]


def without(ids: np.ndarray, drop: np.ndarray, num_clients: int) -> np.ndarray:
    """``ids`` minus the clients in ``drop`` (order kept), O(len(ids) + len(drop))."""
    drop = np.asarray(drop, dtype=np.int64)
    if len(drop) == 0 or len(ids) == 0:
        return ids
    mask = np.zeros(num_clients, dtype=bool)
    mask[drop] = True
    return ids[~mask[ids]]


@SELECTORS.register("oort")
class OortSelector(Selector):
    """Oort: exploit clients of high statistical utility within a paced duration budget, explore the rest."""

    needs_training = "scores clients by their training loss (statistical utility)"
    fills_free_slots = True
    reads_client_data = "ranks clients by their training losses (statistical utility)"

    class Config(StrictModel):
        clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS, description="K: reports wanted per round")
        weighting: Literal["n_samples", "equal"] = Field(
            "n_samples", description="aggregation weight: n_k / Σ n over the reports received, or equal")
        exploration_factor: Fraction = Field(0.9, description="initial ε (share of explored slots)")
        exploration_decay: float = Field(0.98, gt=0.0, le=1.0, description="ε is multiplied by this every round")
        exploration_min: Fraction = Field(0.3, description="floor of ε")
        round_threshold: float = Field(30.0, ge=0.0, le=100.0,
                                       description="initial percentile of client durations giving T_pref (100: none)")
        round_penalty: float = Field(2.0, ge=0.0, le=MAX_SCALE,
                                     description="exponent of the (T_pref / duration) penalty")
        pacer_step: int = Field(20, ge=1, le=MAX_ROUNDS, description="rounds per pacer window")
        pacer_delta: float = Field(5.0, ge=0.0, le=100.0, description="pacer's change of round_threshold")
        clip_bound: Fraction = Field(
            0.95, description="rewards are clipped at this percentile (Oort: 95th; REFL's parser: 0.9)")
        cut_off_util: Fraction = Field(
            0.05, description="exploit candidates stop below this share of the exploitLen-th score")
        sample_window: float = Field(5.0, ge=1.0, le=MAX_CLIENTS,
                                     description="explore among the top sample_window × exploreLen")
        uncertainty: float = Field(0.1, ge=0.0, le=MAX_SCALE,
                                   description="c of the temporal-uncertainty bonus sqrt(c·ln T / last_i)")
        init_reward_cap: Optional[int] = Field(
            None, ge=1, le=MAX_SAMPLES,
            description="initial reward = min(data size, this) (FedScale: local_steps × batch_size); "
                        "unset: data size")
        unfilled: Literal["random", "exploit"] = Field(
            "random", description="random: pad a short cohort with random available clients (REFL); exploit: "
                                  "exploration slots without unexplored clients go to exploitation first")
        first_round: Literal["uniform", "oort"] = Field(
            "uniform", description="uniform: the first round is a uniform draw and Oort's counter starts at "
                                   "the second (FedScale's client manager); oort: Oort from the first round")
        straggler_round: Literal["this", "next"] = Field(
            "this", description="round stamped on a launched client that did not report (the bonus's last_i): "
                                "this round, or the next (FedScale's code)")

    state_attrs = ("reward", "duration", "last_round", "count", "explored", "successful", "last_exploit",
                   "util_history", "exploration", "threshold", "prefer_duration", "selections", "oort_calls")

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        n = self.num_clients
        size = np.asarray(self.n_train, dtype=np.float64)
        self.init_reward = np.minimum(size, cfg.init_reward_cap) if cfg.init_reward_cap else size.copy()
        self.reward = self.init_reward.copy()
        self.duration = np.full(n, np.nan)  # nan: unknown
        self.last_round = np.zeros(n, np.int64)  # 1-based round of the last feedback (0: never)
        self.count = np.zeros(n, np.int64)
        self.explored = np.zeros(n, dtype=bool)
        self.successful = np.zeros(n, dtype=bool)  # gave feedback since the last pacer step
        self.last_exploit = np.zeros(0, np.int64)
        self.util_history = np.zeros(0)
        self.exploration = np.float64(cfg.exploration_factor)
        self.threshold = np.float64(cfg.round_threshold)
        self.prefer_duration = np.float64(np.inf)
        self.selections = np.int64(0)  # select() calls (FedScale's client-manager count)
        self.oort_calls = np.int64(0)  # of which Oort ran: Oort's round counter T

    # ------------------------------------------------------------------------------------------
    def pacer(self, t: int) -> None:
        """Record last round's exploitation utility; every ``pacer_step`` rounds adapt the threshold."""
        cfg = self.cfg
        ex = self.last_exploit[self.successful[self.last_exploit]]
        util = float(self.reward[ex].sum()) / (1e-4 + len(ex))  # Oort's calculateSumUtil (a mean)
        self.util_history = np.append(self.util_history, util)
        self.successful[:] = False
        step = cfg.pacer_step
        if t >= 2 * step and t % step == 0:
            last = float(self.util_history[-2 * step:-step].sum())
            cur = float(self.util_history[-step:].sum())
            if abs(cur - last) <= last * 0.1:  # utility has flattened: relax the duration budget
                self.threshold = np.float64(min(100.0, self.threshold + cfg.pacer_delta))
            elif abs(cur - last) >= last * 5:  # changing sharply: tighten it
                self.threshold = np.float64(max(cfg.pacer_delta, self.threshold - cfg.pacer_delta))

    def preferred_duration(self) -> float:
        if self.threshold >= 100.0:
            return float("inf")
        known = self.duration[np.isfinite(self.duration)]
        if len(known) == 0:
            return float("inf")
        i = min(int(len(known) * self.threshold / 100.0), len(known) - 1)
        return float(np.partition(known, i)[i])  # the i-th smallest, O(N)

    def _penalty(self, durations: np.ndarray) -> np.ndarray:
        t_pref = float(self.prefer_duration)
        d = np.asarray(durations, dtype=np.float64)
        slow = np.isfinite(d) & (d > t_pref)
        out = np.ones(len(d))
        out[slow] = (t_pref / np.maximum(1e-4, d[slow])) ** self.cfg.round_penalty
        return out

    def scores(self, clients: np.ndarray, t: int) -> np.ndarray:
        """Oort's exploitation score of explored ``clients`` at (1-based) round ``t``."""
        r = self.reward[clients]
        pos = r[r > 0]
        if len(pos):
            i = min(int(len(pos) * self.cfg.clip_bound), len(pos) - 1)
            clip = np.partition(pos, i)[i]  # Oort's get_norm: sorted[int(len · clip_bound)], in O(n)
            lo = pos.min() * 0.999
            rng_ = max(pos.max() - lo, 1e-4)
        else:
            clip, lo, rng_ = np.inf, 0.0, 1.0
        bonus = np.sqrt(self.cfg.uncertainty * np.log(max(t, 1)) / np.maximum(self.last_round[clients], 1))
        sc = (np.minimum(r, clip) - lo) / rng_ + bonus
        return np.abs(sc * self._penalty(self.duration[clients]))

    def select(self, ctx: SelectionContext) -> Cohort:
        cfg, rng = self.cfg, ctx.rng
        feasible = without(np.asarray(ctx.available, dtype=np.int64), ctx.pending_clients, self.num_clients)
        n = min(int(ctx.launch), len(feasible))
        self.selections += 1
        if n == len(feasible) or (self.selections == 1 and cfg.first_round == "uniform"):
            # FedScale's client manager launches every available client when they all fit and draws its first
            # round uniformly; neither calls Oort, so Oort's round counter, ε and pacer stay where they are
            picked = feasible if n == len(feasible) else rng.choice(feasible, size=n, replace=False)
            return self._cohort(picked)
        self.oort_calls += 1
        t = int(self.oort_calls)  # Oort's T: its own calls, from 1
        self.pacer(t)
        self.prefer_duration = np.float64(self.preferred_duration())
        self.exploration = np.float64(max(self.exploration * cfg.exploration_decay, cfg.exploration_min))

        explored = feasible[self.explored[feasible]]
        unexplored = feasible[~self.explored[feasible]]

        explore_quota = int(n * self.exploration)
        if cfg.unfilled == "exploit":
            explore_quota = min(explore_quota, len(unexplored))
        exploit_len = max(0, min(n - explore_quota, len(explored)))

        exploit = np.zeros(0, np.int64)
        if exploit_len > 0:
            sc = self.scores(explored, t)
            # Oort walks the clients by descending score and stops at the first one scoring below
            # cut_off_util × the exploitLen-th score once more than 10·exploitLen are in. On a sorted
            # list that stop is at max(#{score ≥ cut}, 10·exploitLen + 1): the top-m, found in O(n).
            i = min(exploit_len, len(sc) - 1)
            cut = -np.partition(-sc, i)[i] * cfg.cut_off_util
            m = min(len(sc), max(int(np.count_nonzero(sc >= cut)), 10 * exploit_len + 1))
            top = _top(sc, m)
            exploit = weighted_sample(rng, explored[top], sc[top], exploit_len)

        explore = np.zeros(0, np.int64)
        explore_len = min(len(unexplored), n - len(exploit))
        if explore_len > 0:
            init = self.init_reward[unexplored] * self._penalty(self.duration[unexplored])
            top = _top(init, min(int(cfg.sample_window * explore_len), len(init)))
            explore = weighted_sample(rng, unexplored[top], init[top], explore_len)

        picked = np.concatenate([explore, exploit]).astype(np.int64)
        if len(picked) < n:  # REFL: pad with random available clients
            rest = without(feasible, picked, self.num_clients)
            picked = np.concatenate([picked, rng.choice(rest, size=n - len(picked), replace=False)])
        self.last_exploit = exploit
        return self._cohort(picked)

    def _cohort(self, picked: np.ndarray) -> Cohort:
        cfg = self.cfg
        clients = np.sort(np.asarray(picked, dtype=np.int64))
        w = self.n_train[clients].astype(np.float64) if cfg.weighting == "n_samples" else np.ones(len(clients))
        return Cohort(clients, w, normalize=True, target=min(self.target(), len(clients)))

    def observe(self, feedback: RoundFeedback) -> None:
        c = np.asarray(feedback.clients, dtype=np.int64)
        if len(c) == 0:
            return
        finish = np.asarray(feedback.finish_s, dtype=np.float64)
        ok = np.isfinite(finish)
        self.duration[c[ok]] = finish[ok]
        loss = np.asarray(feedback.train_loss, dtype=np.float64)
        measured = np.asarray(feedback.aggregated, dtype=bool) & np.isfinite(loss)
        size = np.minimum(np.asarray(self.n_train[c], dtype=np.float64),
                          np.asarray(feedback.n_samples, dtype=np.float64))
        self.reward[c[measured]] = size[measured] * np.abs(loss[measured])
        self.explored[c[measured]] = True
        others = c[~measured]
        if len(others):  # FedScale and REFL: the mean utility reported this round (0 when nobody reported)
            got = self.reward[c[measured]]
            self.reward[others] = float(got.mean()) if len(got) else 0.0
        self.explored[c] = True
        self.last_round[c] = feedback.round + 1
        if self.cfg.straggler_round == "next":  # FedScale stamps them after its round counter has moved on
            self.last_round[others] = feedback.round + 2
        self.count[c] += 1
        self.successful[c] = True
