"""Availability predictors for REFL's Intelligent Participant Selection (REFL §4.1, Algorithm 1).

IPS ranks the online clients by a predicted probability of being available in the look-ahead
window ``[t + w, t + 2w]`` (``w`` = the moving-average round duration μ_t, i.e. "during the next
round"). A predictor answers that question for a set of clients; three are provided:

* :class:`OraclePredictor` — REFL's code: the server reads the future from the availability model
  itself (the noisy-oracle thinning is applied by the selector). It works against the generic
  :class:`~turnout.availability.base.Availability` interface: the model's exact
  ``window_fraction(clients, round + 1, t0, t1)`` where it has one (Bernoulli models answer with
  the next round's ``p_i``, traces with the share of the window their periodic intervals cover),
  otherwise ``available(round + 1, s)`` at ``samples`` evenly spread instants ``s`` of the window,
  averaged (round-indexed models answer for the next round, time-indexed ones for ``s``).

  ``rule: refl_code`` reproduces the code's binary priority instead
  (``docs/algorithms/refl.md#least-available-first``): a client is a
  priority client iff it is online for the whole ``[t, t + w]`` and *not* for the whole
  ``[t + w, t + 2w]``; priority clients get probability 0 and the rest 1, so the ascending sort of
  IPS takes every priority client first and fills the rest at random — exactly the code's
  selection list, answered by the model's side-effect-free ``online_throughout`` where it has one.
  [QUIRK] the code does not wrap windows at the end of the trace period; we do (the trace is
  periodic and ``online_until`` follows the wrap).

* :class:`ForecastPredictor` — the paper's on-device forecaster at the accuracy the paper reports for it
  (REFL §5.5: per-device Prophet on the Stunner plugged state, MAE 0.028, MSE 0.01, R² 0.93): the
  oracle's answer with an error drawn from a two-part model whose MAE and MSE on a 0/1 state equal the
  stated ones — a rare *miss* (the forecast is the complement of the truth, as when a transition is
  predicted at the wrong time) and, otherwise, a small one-sided Laplace error (a forecast clipped to
  [0, 1] can only err inwards). See :func:`miss_and_noise` for the calibration.

* :class:`HistoryPredictor` — the non-oracle default forecaster standing in for the paper's
  per-device Prophet model: each client's own history of being online at round starts, as a
  Laplace-smoothed frequency, refined by phase-of-period bins (diurnal by default) shrunk
  towards that frequency. State is two ``(bins, N)`` float32 arrays.

A predictor is pluggable: subclass :class:`AvailabilityPredictor` and add it to :data:`PREDICTORS`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ..core.state import Stateful


class AvailabilityPredictor(Stateful, ABC):
    """Predicts P(client online during ``[t0, t1]``) for a set of clients."""

    #: the selector applies REFL's noisy-oracle thinning only to predictors that read the future
    is_oracle: bool = False

    def observe(self, ctx: Any) -> None:
        """See one round's :class:`~turnout.selectors.base.SelectionContext` (who is online now)."""

    @abstractmethod
    def predict(self, ctx: Any, clients: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """Probability in [0, 1] for each of ``clients`` of being available in ``[t0, t1]``."""


# ------------------------------------------------------------------------------------------------
class OraclePredictor(AvailabilityPredictor):
    """REFL's oracle: the availability model's own answer for the look-ahead window."""

    is_oracle = True

    def __init__(self, rule: str = "probability", samples: int = 8):
        self.rule = rule
        self.samples = int(samples)

    def predict(self, ctx: Any, clients: np.ndarray, t0: float, t1: float) -> np.ndarray:
        clients = np.asarray(clients, dtype=np.int64)
        if len(clients) == 0:
            return np.zeros(0)
        if self.rule == "refl_code":
            return self._refl_code(ctx, clients, t0, t1)
        return self._fraction(ctx, clients, t0, t1)

    # -- P(available in [t0, t1]) ------------------------------------------------------------
    def _fraction(self, ctx: Any, clients: np.ndarray, t0: float, t1: float) -> np.ndarray:
        av = ctx.availability
        exact = av.window_fraction(clients, ctx.round + 1, t0, t1)
        if exact is not None:
            return np.asarray(exact, dtype=np.float64)
        m = max(1, self.samples)
        hits = np.zeros(len(clients))
        for j in range(m):
            s = t0 + (j + 0.5) * (t1 - t0) / m
            hits += np.asarray(av.available(ctx.round + 1, s))[clients]
        return hits / m

    # -- the code's binary priority --------------------------------------------------------
    def _refl_code(self, ctx: Any, clients: np.ndarray, t0: float, t1: float) -> np.ndarray:
        """0 for a priority client (online through ``[t, t0]``, not through ``[t0, t1]``), else 1."""
        av, t = ctx.availability, ctx.time_s
        # stateless where the model can answer so (a FedScale-pointer model's available() moves its pointer)
        now = av.online_throughout(clients, ctx.round, t, t0)
        later = av.online_throughout(clients, ctx.round + 1, t0, t1)
        if now is None or later is None:
            now = np.asarray(av.available(ctx.round, t))[clients] & (av.online_until(clients, ctx.round, t) >= t0)
            later = (np.asarray(av.available(ctx.round + 1, t0))[clients]
                     & (av.online_until(clients, ctx.round + 1, t0) >= t1))
        return np.where(now & ~later, 0.0, 1.0)


# ------------------------------------------------------------------------------------------------
#: the accuracy REFL §5.5 reports for its per-device Prophet forecaster (Stunner plugged state, averaged
#: over devices): the ``forecast`` predictor's error. Fixed rather than a selector option, so that adding
#: the predictor left every existing configuration (and page config hash) as it was.
PROPHET_MAE, PROPHET_MSE = 0.028, 0.01


def miss_and_noise(mae: float, mse: float) -> tuple[float, float]:
    """The miss rate ``q`` and Laplace scale ``b`` whose forecast error on a 0/1 truth has ``mae`` and ``mse``.

    The error is 1 with probability ``q`` (a miss) and otherwise ``|clip(y + ε, 0, 1) − y|`` with
    ``ε ~ Laplace(0, b)``: on a 0/1 truth only the inward half of ``ε`` counts, so that part has mean
    ``b/2`` and mean square ``b²``. Hence ``MAE = q + (1 − q)·b/2`` and ``MSE = q + (1 − q)·b²``;
    eliminating ``q = (MSE − b²)/(1 − b²)`` leaves ``(1 − MAE)·b² − (1 − MSE)/2·b + (MAE − MSE) = 0``,
    whose smaller root is ``b``. A solution exists for ``4·MAE² ≤ MSE ≤ MAE`` (pure noise to pure misses).
    """
    if not (4.0 * mae * mae - 1e-12 <= mse <= mae < 1.0 and mae >= 0.0):
        raise ValueError(f"forecast_mae = {mae} and forecast_mse = {mse}: no miss-plus-noise error has them; "
                         "need 4·mae² ≤ mse ≤ mae < 1")
    a, half = 1.0 - mae, (1.0 - mse) / 2.0
    b = (half - math.sqrt(max(0.0, half * half - 4.0 * a * (mae - mse)))) / (2.0 * a)
    q = max(0.0, (mse - b * b) / (1.0 - b * b))
    return q, b


class ForecastPredictor(AvailabilityPredictor):
    """The oracle's window answer seen through a forecaster's error of a stated MAE and MSE (REFL §5.5).

    Each query draws, per client, a miss with probability ``q`` (forecast ``1 − f`` for the oracle's
    ``f``) or else ``clip(f + ε, 0, 1)`` with ``ε ~ Laplace(0, b)``; ``q, b`` from :func:`miss_and_noise`.
    The error is independent across clients and queries: a forecaster's mistakes are not known to the
    server, so the selector's noisy-oracle thinning does not apply on top (``is_oracle`` is false).
    """

    def __init__(self, mae: float = 0.028, mse: float = 0.01, samples: int = 8):
        self.truth = OraclePredictor("probability", samples)
        self.miss, self.noise = miss_and_noise(mae, mse)

    def predict(self, ctx: Any, clients: np.ndarray, t0: float, t1: float) -> np.ndarray:
        f = self.truth.predict(ctx, clients, t0, t1)
        rng = ctx.rng
        missed = rng.random(len(f)) < self.miss
        noisy = np.clip(f + rng.laplace(0.0, self.noise, len(f)) if self.noise > 0 else f, 0.0, 1.0)
        return np.where(missed, 1.0 - f, noisy)


# ------------------------------------------------------------------------------------------------
class HistoryPredictor(AvailabilityPredictor):
    """Per-client frequency / periodicity forecaster from the client's own observed history.

    Every round each client that is not busy with a late report observes whether it is online
    (in ``ctx.available``) at the round's start time; the observation is counted in the bin of
    the phase ``(time_s mod period_s)``. The forecast for ``[t0, t1]`` is the mean over the bins
    the window covers (weighted by overlap) of ``(on_b + prior·f)/(obs_b + prior)``, where
    ``f = (on + 1)/(obs + 2)`` is the client's overall Laplace-smoothed frequency (0.5 before any
    observation). ``bins = 1`` or ``period_s = None`` gives the plain frequency.
    """

    state_attrs = ("on", "obs", "on_total", "obs_total")

    def __init__(self, num_clients: int, period_s: float | None = 86400.0, bins: int = 24,
                 prior: float = 2.0):
        self.period_s = period_s
        self.bins = int(bins) if period_s else 1
        self.prior = float(prior)
        self.on = np.zeros((self.bins, num_clients), np.float32)
        self.obs = np.zeros((self.bins, num_clients), np.float32)
        self.on_total = np.zeros(num_clients, np.float32)
        self.obs_total = np.zeros(num_clients, np.float32)

    def _bin(self, t: float) -> int:
        if self.bins == 1:
            return 0
        return int(np.floor((t % self.period_s) / self.period_s * self.bins)) % self.bins

    def observe(self, ctx: Any) -> None:
        b = self._bin(ctx.time_s)
        seen = np.ones(self.obs.shape[1], dtype=bool)
        seen[np.asarray(ctx.pending_clients, dtype=np.int64)] = False  # busy: online state unknown
        online = np.asarray(ctx.available, dtype=np.int64)
        self.obs[b] += seen
        self.on[b, online] += 1.0
        if self.bins > 1:
            self.obs_total += seen
            self.on_total[online] += 1.0

    def predict(self, ctx: Any, clients: np.ndarray, t0: float, t1: float) -> np.ndarray:
        c = np.asarray(clients, dtype=np.int64)
        if self.bins == 1:
            return (self.on[0, c].astype(np.float64) + 1.0) / (self.obs[0, c].astype(np.float64) + 2.0)
        freq = (self.on_total[c].astype(np.float64) + 1.0) / (self.obs_total[c].astype(np.float64) + 2.0)
        weights = self._window_weights(t0, t1)
        out = np.zeros(len(c))
        for b in np.flatnonzero(weights):  # only the bins the window covers (usually one or two)
            out += weights[b] * (self.on[b, c] + self.prior * freq) / (self.obs[b, c] + self.prior)
        return out

    def _window_weights(self, t0: float, t1: float) -> np.ndarray:
        """Share of ``[t0, t1]`` falling into each phase bin (one-hot on t0's bin for an empty window)."""
        w = np.zeros(self.bins)
        if t1 <= t0:
            w[self._bin(t0)] = 1.0
            return w
        if t1 - t0 >= self.period_s:
            return np.full(self.bins, 1.0 / self.bins)
        width = self.period_s / self.bins
        # walk the window bin by bin (at most bins + 1 steps)
        s = t0
        while s < t1:
            b = self._bin(s)
            phase = s % self.period_s
            end_of_bin = s + ((b + 1) * width - phase)
            e = min(t1, max(end_of_bin, s + 1e-12))
            w[b] += e - s
            s = e
        return w / w.sum()



#: name → factory(selector config, world) of the predictors a config can name
PREDICTORS = {
    "oracle": lambda cfg, world: OraclePredictor(cfg.oracle_rule, cfg.oracle_samples),
    "forecast": lambda cfg, world: ForecastPredictor(PROPHET_MAE, PROPHET_MSE, cfg.oracle_samples),
    "history": lambda cfg, world: HistoryPredictor(world.num_clients, cfg.history_period_s,
                                                   cfg.history_bins, cfg.history_prior),
}
