"""REFL's Intelligent Participant Selection (IPS) with the Adaptive Participant Target (APT).

REFL §4.1 and Algorithm 1 (REFL / "RELAY", Abdelmoniem et al., EuroSys 2023, as coded in
``ahmedcs/REFL``; notes: ``docs/algorithms/refl.md``). One round:

1. **Window.** ``w`` = the moving-average round duration μ_t, which the selector keeps from the
   round durations it observes: μ_t = (1 − α)·D_{t−1} + α·μ_{t−1} with α = 0.25 and μ = D_0 after
   the first round (REFL's ``update_moving_avg``); or ``window_s`` when set (the code uses the fixed
   deadline ``d`` in DL mode); ``initial_window_s`` before any round has closed (the code's
   ``initial_deadline``, 1000 s).
2. **APT** (REFL §4.1). ``B_t`` = late reports in flight that reach the server by ``t + w``
   (``ctx.pending_arrival_s``). ``paper``: ``N_t = max(1, N_0 − B_t)`` (the paper's rule);
   ``capped``: the code's ``adapt_selection = 1``, ``N_t = max(⌊cap·N_0⌋, N_0 − B_t)`` (cap 0.5);
   ``off`` (default): ``N_t = N_0``. Under over-commitment the launch count keeps its ratio to the target:
   ``launch_t = ⌈launch·N_t/N_0⌉`` (the code applies the rule to the over-committed count directly).
3. **Pool.** The available clients minus those with a pending late report (as in the code, always removed;
   the engine already drops busy clients from ``ctx.available``) minus those that ran within the
   last ``cooldown_rounds`` rounds (``prohibit_reselect = 5``).
4. **Least-available first** (REFL §4.1, Algorithm 1). Each pool client's probability of being
   available in ``[t + w, t + 2w]`` comes from the predictor (:mod:`.availability_predictor`):
   the oracle (REFL's code), the oracle seen through an error of the paper's reported Prophet accuracy
   (``forecast``), or the history forecaster (learnt from each client's observed history).
   Ascending sort, ties broken at random, first ``launch_t`` taken. With the oracle, REFL's
   noisy-oracle emulation (``avail_probability = 0.9``) hides a random ``1 − oracle_accuracy``
   share of the pool: the oracle has no answer for them and they are used only when the ranked
   clients do not fill the cohort.
5. **Fill.** When the pool is smaller than ``launch_t`` the rest is drawn at random from available
   clients still in cooldown (``cooldown_fill``; the code also replaces removed clients by random
   online ones) — so with fewer available than asked, every available client is launched; with
   nobody available the cohort is empty.

Deviations, each deliberate:

- The code's draw takes ``min(target, len − 1)`` clients ([QUIRK]); we take ``min(target, len)``.
- The code thins the priority and non-priority lists separately, keeping ``⌊0.9·len⌋`` of each, so a
  list of 1-10 clients always loses exactly one (a lone priority client is never kept). With a
  continuous probability there are no lists: turnout hides ``n − ⌊accuracy·n⌋`` clients of the whole
  pool at random, so a priority client is hidden with probability ≈ 1 − accuracy whatever their number.
- The code removes recently-run clients *after* sampling and replaces them with random online
  clients; we follow the paper ("participants hold from checking in"): they are not in the
  ranked pool, and random cooldown clients only fill a pool that is too small.
- Cooldown: the code's test ``epoch − last_run < 5`` blocks 4 rounds; ``cooldown_rounds = 5``
  here blocks the 5 rounds after a client ran (``round − last_run ≤ 5``). A client "ran" when its
  report was aggregated or kept as a late report (dropped and discarded clients may run again).
- APT's ``B_t`` counts every in-flight report due within the window; the code also requires the
  report to be within the staleness bound, which the selector cannot see (REFL has no bound).
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import numpy as np
from pydantic import Field

from ..config.base import Fraction, Seconds, StrictModel
from ..config.limits import MAX_CLIENTS, MAX_COUNT, MAX_ROUNDS
from ..core.capabilities import WorldNeed
from ..world.context import WorldContext
from .availability_predictor import PREDICTORS, AvailabilityPredictor
from .base import SELECTORS, Cohort, RoundFeedback, SelectionContext, Selector
from .oort import without

NEVER = -(2**62)


def smallest(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest ``values`` (any order), O(n)."""
    if k >= len(values):
        return np.arange(len(values))
    if k <= 0:
        return np.zeros(0, np.int64)
    return np.argpartition(values, k - 1)[:k]


@SELECTORS.register("refl_ips")
class REFLSelector(Selector):
    """REFL IPS: least-available clients first (oracle or forecast), 5-round cooldown, optional APT."""

    class Config(StrictModel):
        clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS, description="N_0: reports wanted per round")
        weighting: Literal["n_samples", "equal"] = Field(
            "n_samples", description="aggregation weight of a fresh report: n_samples (n_k / Σ n over the reports "
                                     "received) or equal (REFL's w_f = 1)")
        predictor: Literal["oracle", "forecast", "history"] = Field(
            "oracle", description="oracle: the availability model's own answer (REFL's code); forecast: the oracle's "
                                  "answer with a forecaster's error of the paper's reported Prophet accuracy (MAE "
                                  "0.028, MSE 0.01); history: a per-client frequency / time-of-day forecaster "
                                  "from the client's observed history")
        oracle_accuracy: float = Field(
            0.9, gt=0.0, le=1.0, description="noisy-oracle emulation (REFL avail_probability): the share of the pool "
                                             "the oracle answers for; the rest is used only as filler")
        oracle_rule: Literal["probability", "refl_code"] = Field(
            "probability", description="probability: P(available in [t+w, t+2w]) (paper); refl_code: binary priority, "
                                       "online through [t, t+w] and not through [t+w, t+2w] (REFL's code)")
        oracle_samples: int = Field(8, ge=1, le=MAX_COUNT,
                                    description="instants sampled in the window for availability models "
                                                "without an exact window answer")
        cooldown_rounds: int = Field(5, ge=0, le=MAX_ROUNDS,
                                     description="a client that ran is not re-selected for this many rounds "
                                                 "(REFL prohibit_reselect; 0: off)")
        cooldown_fill: bool = Field(True, description="fill a too-small pool with random available clients still in "
                                                      "cooldown (false: launch fewer)")
        apt: Literal["off", "paper", "capped"] = Field(
            "off", description="Adaptive Participant Target: paper N_t = max(1, N_0 − B_t); capped (code) "
                               "N_t = max(⌊cap·N_0⌋, N_0 − B_t); B_t = late reports due within the window")
        apt_cap: Fraction = Field(0.5, description="cap of apt: capped (REFL adapt_selection_cap)")
        window_s: Optional[Seconds] = Field(
            None,
            description="look-ahead window w in seconds (unset: the moving-average round duration μ_t; REFL's DL mode "
                        "uses the deadline)")
        initial_window_s: Seconds = Field(1000.0, description="w before any round has closed (REFL initial_deadline)")
        history_period_s: Optional[Seconds] = Field(
            86400.0, description="history predictor: period of the phase bins (a day); unset: plain frequency")
        history_bins: int = Field(24, ge=1, le=1024, description="history predictor: phase bins per period")
        history_prior: float = Field(2.0, ge=0.0, le=MAX_COUNT,
                                     description="history predictor: pseudo-observations shrinking a bin "
                                                 "towards the client's overall frequency")

    state_attrs = ("last_run", "mean_round_s", "predictor")
    scratch_attrs = ("last_ready", "last_target")

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self.last_run = np.full(self.num_clients, NEVER, np.int64)
        self.mean_round_s = 0.0  # μ_t; 0 before the first round closes
        self.predictor: AvailabilityPredictor = PREDICTORS[cfg.predictor](cfg, world)
        #: diagnostics of the last selection: B_t and N_t
        self.last_ready = 0
        self.last_target = cfg.clients_per_round

    fills_free_slots = True
    reads_client_data = ""  # availability predictions, participation history, round durations

    @classmethod
    def cannot_fill_slots(cls, cfg: Config) -> str:
        return "" if cfg.apt == "off" else (f"its adaptive participant target (apt: {cfg.apt}) resizes a whole "
                                            "cohort from the stragglers due; set selector.apt: off")

    @classmethod
    def needs_simulator(cls, cfg: Config) -> WorldNeed | None:
        if cfg.predictor in ("oracle", "forecast"):
            return WorldNeed("predictor", cfg.predictor,
                             "reads future availability from the simulated availability model",
                             "selector.predictor: history (forecasts from each client's observed history)")
        return None

    # ------------------------------------------------------------------------------------------
    def window(self, ctx: SelectionContext) -> float:
        if self.cfg.window_s is not None:
            return float(self.cfg.window_s)
        mu = float(self.mean_round_s)
        return mu if mu > 0 else float(self.cfg.initial_window_s)

    def ready_stragglers(self, ctx: SelectionContext, w: float) -> int:
        """B_t: late reports in flight that reach the server by the end of this round's window."""
        arr = np.asarray(ctx.pending_arrival_s, dtype=np.float64)
        return int(np.count_nonzero(arr <= ctx.time_s + w))

    def adapted_target(self, b: int) -> int:
        n0, mode = self.cfg.clients_per_round, self.cfg.apt
        if mode == "paper":
            return max(1, n0 - b)
        if mode == "capped":
            return max(1, int(math.floor(self.cfg.apt_cap * n0)), n0 - b)
        return n0

    def select(self, ctx: SelectionContext) -> Cohort:
        cfg, rng = self.cfg, ctx.rng
        self.predictor.observe(ctx)
        w = self.window(ctx)
        b = self.ready_stragglers(ctx, w) if cfg.apt != "off" else 0
        n0 = cfg.clients_per_round
        target = self.adapted_target(b)
        launch = ctx.launch if target == n0 else max(target, math.ceil(ctx.launch * target / n0 - 1e-9))
        self.last_ready, self.last_target = b, target

        available = without(np.asarray(ctx.available, dtype=np.int64), ctx.pending_clients, self.num_clients)
        cooling = (ctx.round - self.last_run[available]) <= cfg.cooldown_rounds if cfg.cooldown_rounds else \
            np.zeros(len(available), dtype=bool)
        pool, resting = available[~cooling], available[cooling]

        k = min(launch, len(pool))
        if k == 0:
            chosen = np.zeros(0, np.int64)
        elif k == len(pool):
            chosen = pool  # everyone in the pool goes: no prediction needed
        else:
            chosen = pool[self._first(ctx, pool, w, k)]
        short = min(launch, len(available)) - len(chosen)
        if short > 0 and cfg.cooldown_fill and len(resting):
            chosen = np.concatenate([chosen, rng.choice(resting, size=min(short, len(resting)), replace=False)])
        clients = np.sort(chosen.astype(np.int64))
        n = self.n_train[clients].astype(np.float64)
        weights = n if cfg.weighting == "n_samples" else np.ones(len(clients))
        return Cohort(clients, weights, normalize=True, target=min(target, len(clients)))

    def _first(self, ctx: SelectionContext, pool: np.ndarray, w: float, k: int) -> np.ndarray:
        """Positions in ``pool`` of the first ``k`` in IPS order, in O(len(pool)).

        The order: clients the oracle answers for before hidden ones; then predicted probability
        ascending; ties at random (hidden clients, when needed as filler, in random order).
        """
        rng = ctx.rng
        n = len(pool)
        p = np.asarray(self.predictor.predict(ctx, pool, ctx.time_s + w, ctx.time_s + 2.0 * w), dtype=np.float64)
        p = np.nan_to_num(p, nan=0.5)  # a predictor without an answer: neither rare nor common
        tie = rng.random(n)
        answered = np.ones(n, dtype=bool)
        if self.predictor.is_oracle and self.cfg.oracle_accuracy < 1.0:
            n_ans = int(n * self.cfg.oracle_accuracy)  # the code's int(len · avail_probability)
            answered[:] = False
            answered[smallest(rng.random(n), n_ans)] = True
        ans = np.flatnonzero(answered)
        if len(ans) <= k:
            rest = np.flatnonzero(~answered)
            return np.concatenate([ans, rest[smallest(tie[rest], k - len(ans))]])
        pa = p[ans]
        v = np.partition(pa, k - 1)[k - 1]  # the k-th smallest probability
        below = ans[pa < v]
        at = ans[pa == v]  # ties for the last places: broken at random
        return np.concatenate([below, at[smallest(tie[at], k - len(below))]])

    def observe(self, feedback: RoundFeedback) -> None:
        ran = np.asarray(feedback.aggregated, dtype=bool) | np.asarray(feedback.late, dtype=bool)
        self.last_run[np.asarray(feedback.clients, dtype=np.int64)[ran]] = feedback.round
        d = feedback.duration_s
        self.mean_round_s = d if feedback.round == 0 else 0.75 * d + 0.25 * self.mean_round_s
