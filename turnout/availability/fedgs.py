"""FedGS's seven availability modes (Wang et al., AAAI 2023), as coded in ``WwZzz/FedGS``.

Every mode gives each client an activity probability ``p_{i,t}``; each round every client is
online with an independent Bernoulli draw (FedGS Table 1, as coded in
``utils/systemic_simulator.py``; notes: ``docs/algorithms/world.md#fedgs-availability-modes``). The
FedGS code redraws the whole round when nobody came online; we reproduce that distribution exactly
(see :meth:`BernoulliAvailability._nonempty`).

Conventions shared by every mode here (our choices where paper and code leave room):

* ``n_i`` is ``world.n_train[i]`` (FedGS's ``local_data_vols`` is the training size too).
* ``Y_i`` is the set of labels with a non-zero count in ``world.label_hist[i]``. FedGS also
  includes the client's validation labels; the world context only carries training labels.
* ``L`` is ``world.label_hist.shape[1]`` (the number of classes). FedGS counts the distinct
  labels of the server's test set, which is the same number whenever every class is tested.
* The round index ``t`` is the engine's round (0-based); FedGS's ``current_round`` also starts
  at 0 (``for round in range(num_rounds + 1)``), so the phases of YC and SLN match the code.
* Every Bernoulli mode in turnout (these and FedSUM's) draws its uniforms from the same stream
  ``stream(seed, "availability", round)``, so two probability models are compared on common
  random numbers and a round's draw does not depend on call order.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from ..config.base import StrictModel
from ..core import rng as rngmod
from ..world.context import WorldContext
from .always import AlwaysAvailable
from .base import AVAILABILITY, Availability

#: Purpose of the per-round uniforms every Bernoulli availability model thresholds.
UNIFORM_PURPOSE = "availability"
#: Purpose of the extra draws used when a round came up empty and must be redrawn (FedGS only).
NONEMPTY_PURPOSE = "availability/nonempty"
#: Purpose of the log-normal client rates shared by LN and SLN (drawn once, not per round).
LOGNORMAL_PURPOSE = "availability/lognormal"
#: FedGS's ε in σ = −ln(1 − β − ε).
LN_EPSILON = 1e-6


class BernoulliAvailability(Availability):
    """Base for models where client ``i`` is online at round ``t`` with probability ``p_{i,t}``.

    Subclasses implement :meth:`probabilities`; :meth:`available` thresholds one vector of
    uniforms per round (O(N), no per-client Python). With ``resample_empty`` (FedGS's loop "draw
    again until someone is active"; set by the FedGS modes from their config) an empty draw is
    replaced by a draw conditioned on someone being online.
    """

    resample_empty: bool = False

    @abstractmethod
    def probabilities(self, round: int) -> np.ndarray:
        """``p_{i,round}`` for every client, float64 of shape (N,), each in [0, 1]."""

    def available(self, round: int, time_s: float) -> np.ndarray:
        p = self.probabilities(round)
        u = rngmod.stream(self.seed, UNIFORM_PURPOSE, round).random(self.num_clients)
        mask = u < p
        if self.resample_empty and not mask.any():
            mask = self._nonempty(p, round)
        return mask

    def window_fraction(self, clients: np.ndarray, round: int, t0: float, t1: float) -> np.ndarray:
        """A round-indexed Bernoulli model: ``p_{i,round}`` is the chance of being online in that round."""
        return np.asarray(self.probabilities(round), dtype=np.float64)[clients]

    def _nonempty(self, p: np.ndarray, round: int) -> np.ndarray:
        """A draw of independent Bernoulli(p) conditioned on at least one success.

        FedGS redraws until some client is active, which samples exactly this conditional
        distribution but may loop for a long time (forever if every ``p_i = 0``). We sample it
        directly: the first active client ``J`` has ``P(J = j) ∝ p_j Π_{k<j} (1 − p_k)``; clients
        before ``J`` are offline and clients after it are independent Bernoulli(p) again. If every
        ``p_i`` is 0 nobody can be online and the mask stays empty (FedGS would hang).
        """
        n = self.num_clients
        mask = np.zeros(n, dtype=bool)
        if n == 0 or not (p > 0).any():
            return mask
        # Here every p_i < 1 (a client with p = 1 is always drawn, since uniforms are < 1).
        log_off = np.log1p(-p)
        prefix = np.concatenate(([0.0], np.cumsum(log_off)[:-1]))
        cw = np.cumsum(p * np.exp(prefix))
        g = rngmod.stream(self.seed, NONEMPTY_PURPOSE, round)
        # First index whose cumulative weight exceeds the uniform point: always one with w_j > 0.
        j = min(int(np.searchsorted(cw, g.random() * cw[-1], side="right")), n - 1)
        mask[j] = True
        mask[j + 1:] = g.random(n - j - 1) < p[j + 1:]
        return mask


class _StaticBernoulli(BernoulliAvailability):
    """A Bernoulli model whose probabilities do not change over rounds (set ``self._p``)."""

    _p: np.ndarray

    def probabilities(self, round: int) -> np.ndarray:
        return self._p


def _data_sizes(world: WorldContext) -> np.ndarray:
    # A client with no training samples counts as having one, so LDF's n^-β stays finite
    # (our choice; FedGS never builds empty clients).
    return np.maximum(np.asarray(world.n_train, dtype=np.float64), 1.0)


class _DataSizeBias(_StaticBernoulli):
    """p_i = n_i^(±β) / max_j n_j^(±β): online more often the more (``sign`` +1, MDF) or the less (−1, LDF) data."""

    sign: ClassVar[float]

    def __init__(self, cfg, world: WorldContext):
        super().__init__(cfg, world)
        self.resample_empty = cfg.resample_empty
        x = _data_sizes(world) ** (self.sign * cfg.beta)  # ±1·β is β or −β exactly: the same bits as before
        self._p = x / x.max() if len(x) else x


def _label_presence(world: WorldContext) -> np.ndarray:
    """(N, L) bool: does client i hold label y in its training data."""
    hist = np.asarray(world.label_hist)
    if hist.ndim != 2 or hist.shape[0] != world.num_clients:
        raise ValueError(f"label_hist must have shape (num_clients, num_classes), got {hist.shape}")
    return hist > 0


def _min_max_label(present: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """min(Y_i), max(Y_i) per client and whether Y_i is non-empty (min = max = 0 when empty)."""
    has_any = present.any(axis=1)
    lo = np.where(has_any, present.argmax(axis=1), 0)
    hi = np.where(has_any, present.shape[1] - 1 - present[:, ::-1].argmax(axis=1), 0)
    return lo, hi, has_any


def _check_ln_beta(v: float) -> float:
    if 1.0 - v - LN_EPSILON <= 0.0:
        raise ValueError(f"must be < {1.0 - LN_EPSILON} so that σ = −ln(1 − β − 1e−6) is finite")
    return v


def lognormal_rates(seed: int, num_clients: int, beta: float) -> np.ndarray:
    """LN's ``c_i / max_j c_j`` with ``c_i ~ LogNormal(0, σ = −ln(1 − β − 1e−6))``, drawn once."""
    sigma = -np.log(1.0 - beta - LN_EPSILON)
    c = rngmod.stream(seed, LOGNORMAL_PURPOSE).lognormal(0.0, sigma, num_clients)
    return c / c.max() if num_clients else c


_RESAMPLE_DOC = ("FedGS code: when no client came online, redraw the round until one does "
                 "(sampled exactly as the conditional distribution; an all-zero p stays empty)")


def _beta_field(default: float, le: float | None = 1.0, doc: str = "") -> object:
    if le is None:
        return Field(default, ge=0.0, description=doc)
    return Field(default, ge=0.0, le=le, description=doc)


#: Largest exponent on data sizes: n^β must stay finite in float64 for n up to 10^8 clients' rows.
MAX_EXPONENT = 30.0


# ------------------------------------------------------------------------------------------------
@AVAILABILITY.register("idl")
class Ideal(AlwaysAvailable):
    """FedGS IDL: every client is online in every round (p = 1); the same world as ``always``."""


@AVAILABILITY.register("mdf")
class MoreDataFirst(_DataSizeBias):
    """FedGS MDF-β: p_i = n_i^β / max_j n_j^β (clients with more data are online more often)."""

    class Config(StrictModel):
        # The formula is defined for every β ≥ 0 (β = 0 is IDL); the paper uses 0.7.
        beta: float = _beta_field(0.7, le=MAX_EXPONENT, doc="0 ≤ β ≤ 30: exponent on the local data size")
        resample_empty: bool = Field(True, description=_RESAMPLE_DOC)

    sign = 1.0


@AVAILABILITY.register("ldf")
class LessDataFirst(_DataSizeBias):
    """FedGS LDF-β: p_i = n_i^−β / max_j n_j^−β (clients with less data are online more often)."""

    class Config(StrictModel):
        beta: float = _beta_field(0.7, le=MAX_EXPONENT, doc="0 ≤ β ≤ 30: exponent on the inverse local data size")
        resample_empty: bool = Field(True, description=_RESAMPLE_DOC)

    sign = -1.0


@AVAILABILITY.register("ymf")
class YMaxFirst(_StaticBernoulli):
    """FedGS YMF-β: p_i = β·min(Y_i)/max(1, L−1) + 1 − β (clients whose smallest label is larger are online more).

    Code vs paper: the paper's Table 1 divides by max_k y (the largest label); the FedGS code
    divides by max(1, L − 1). With labels 0..L−1 both are the same; we follow the code. A client
    holding no labels is treated as min(Y_i) = 0, i.e. p = 1 − β.
    """

    class Config(StrictModel):
        beta: float = _beta_field(0.9, doc="0 ≤ β ≤ 1: weight of the label term (p ∈ [1−β, 1])")
        resample_empty: bool = Field(True, description=_RESAMPLE_DOC)

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self.resample_empty = cfg.resample_empty
        present = _label_presence(world)
        lo, _, _ = _min_max_label(present)
        num_labels = present.shape[1]
        self._p = cfg.beta * lo / max(1, num_labels - 1) + (1.0 - cfg.beta)


@AVAILABILITY.register("yc")
class YCycle(BernoulliAvailability):
    """FedGS YC-β: a label window sweeps over the classes; clients holding the current label get p = 1, others 1 − β.

    ``variant: fedgs`` (default, the FedGS repo): ``T = 10L``,
    ``r_t = (1 + t mod T)/T`` and ``I_i(t) = 1[∃ y ∈ Y_i: y/L < r_t ≤ (y+1)/L]``. The label whose
    interval holds ``r_t`` is exactly ``y*(t) = ⌊(t mod 10L)/10⌋`` (integer arithmetic, identical to
    the code's float test because IEEE division is correctly rounded), so a round costs one column
    look-up. ``variant: flgo`` (FLGo/easyFL): ``T = 24`` and
    ``I_i(t) = 1[min Y_i / y_max ≤ r_t ≤ max Y_i / y_max]`` with ``y_max = max(1, L − 1)``.
    ``p_{i,t} = β·I_i(t) + 1 − β``. Clients with no labels have ``I = 0``.
    """

    class Config(StrictModel):
        beta: float = _beta_field(0.9, doc="0 ≤ β ≤ 1: p = β·I_i(t) + 1 − β")
        variant: Literal["fedgs", "flgo"] = Field(
            "fedgs", description="fedgs: T = 10L, per-label windows (FedGS repo); flgo: T = 24, [min Y, max Y] window")
        resample_empty: bool = Field(True, description=_RESAMPLE_DOC)

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self.resample_empty = cfg.resample_empty
        present = _label_presence(world)
        self.num_labels = present.shape[1]
        if cfg.variant == "fedgs":
            self.period = 10 * self.num_labels
            self._present_t = np.ascontiguousarray(present.T)  # (L, N): one contiguous row per label
        else:
            self.period = 24
            lo, hi, has_any = _min_max_label(present)
            ymax = float(max(1, self.num_labels - 1))
            self._lo_r = np.where(has_any, 1.0 * lo / ymax, np.inf)
            self._hi_r = np.where(has_any, 1.0 * hi / ymax, -np.inf)

    def indicator(self, round: int) -> np.ndarray:
        """``I_i(round)`` for every client (bool, shape (N,))."""
        if self.cfg.variant == "fedgs":
            if self.num_labels == 0:
                return np.zeros(self.num_clients, dtype=bool)
            return self._present_t[(round % self.period) // 10]
        r = 1.0 * (1 + round % self.period) / self.period
        return (self._lo_r <= r) & (r <= self._hi_r)

    def probabilities(self, round: int) -> np.ndarray:
        b = self.cfg.beta
        # The code's β·I + (1 − β), evaluated for I ∈ {0, 1} (so rounding matches it exactly).
        return np.where(self.indicator(round), b * 1 + (1.0 - b), b * 0 + (1.0 - b))


@AVAILABILITY.register("ln")
class LogNormal(_StaticBernoulli):
    """FedGS LN-β: p_i = c_i / max_j c_j with c_i ~ LogNormal(0, σ = −ln(1 − β − 1e−6)), drawn once."""

    class Config(StrictModel):
        beta: float = Field(0.5, ge=0.0, lt=1.0,
                            description="0 ≤ β < 1 − 1e−6: σ = −ln(1 − β − 1e−6) of the log-normal rates")
        resample_empty: bool = Field(True, description=_RESAMPLE_DOC)

        @field_validator("beta")
        @classmethod
        def _sigma_defined(cls, v: float) -> float:
            return _check_ln_beta(v)

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self.resample_empty = cfg.resample_empty
        self._p = lognormal_rates(self.seed, self.num_clients, cfg.beta)


@AVAILABILITY.register("sln")
class SinLogNormal(BernoulliAvailability):
    """FedGS SLN-β: LN's rates q_i modulated by a sine of period 24 rounds, p = (0.4 sin θ_t + 0.5)·q_i.

    ``variant: fedgs`` (default, the FedGS code):
    ``θ_t = linspace(0, 2π, 24)[t mod 24] = 2π (t mod 24)/23``. ``variant: paper`` (Table 1's
    ``(1 + t mod T)/T · 2π`` with ``T = 24``, the constant the code's docstring names).
    ``q_i`` is exactly LN-β's ``p_i`` for the same seed and β.
    """

    class Config(StrictModel):
        beta: float = Field(0.5, ge=0.0, lt=1.0,
                            description="0 ≤ β < 1 − 1e−6: σ = −ln(1 − β − 1e−6) of the log-normal rates")
        variant: Literal["fedgs", "paper"] = Field(
            "fedgs", description="fedgs: θ = linspace(0, 2π, 24)[t mod 24]; paper: θ = 2π(1 + t mod 24)/24")
        resample_empty: bool = Field(True, description=_RESAMPLE_DOC)

        @field_validator("beta")
        @classmethod
        def _sigma_defined(cls, v: float) -> float:
            return _check_ln_beta(v)

    PERIOD = 24

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self.resample_empty = cfg.resample_empty
        self.q = lognormal_rates(self.seed, self.num_clients, cfg.beta)
        if cfg.variant == "fedgs":
            theta = np.linspace(0.0, 2.0 * np.pi, self.PERIOD)
        else:
            theta = (1.0 + np.arange(self.PERIOD)) / self.PERIOD * 2.0 * np.pi
        self.factors = 0.4 * np.sin(theta) + 0.5

    def probabilities(self, round: int) -> np.ndarray:
        return self.factors[round % self.PERIOD] * self.q
