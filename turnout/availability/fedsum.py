"""FedSUM's participation patterns (You & Pu) and the FedAWE/FedAU code's schedules.

Sources: the FedSUM paper (§2.1 Cases 1–4, §2.2 delay metrics, §5 and App. H.2 P1–P3, App. H.8
biased sampling) and, for the constants it lost, the FedAWE/FedAU code it builds on
(``mingxiang12/FedAWE``: label-mix ``p_i`` and the ``fluctuate`` schedules). Notes:
``docs/algorithms/world.md#fedsum-participation-patterns``.

* ``p1_uniform`` — P1 / Case 1: exactly ``m`` of ``n`` clients, uniformly, every round.
* ``p2_bernoulli`` — P2: independent Bernoulli(p_i), p_i from the label-mix rule.
* ``p3_sine`` — P3: p_i·(a·sin(2πt/period) + b), clipped to [0, 1].
* ``fedawe`` — the FedAWE code's ``fluctuate`` schedules 1–6 over the label-mix p_i.
* ``uniform_bernoulli`` — Case 2: independent Bernoulli with a given probability (one ``p`` for
  everyone, or a per-client list).
* ``cyclic`` — Case 3: fixed order, consecutive blocks of ``m``.
* ``reshuffled_cyclic`` — Case 4: the order is reshuffled every epoch, then blocks of ``m``.
* ``biased`` — H.8: probability 0.5 for clients 1–11, 0.45 for 12–22, … (by index).

All Bernoulli patterns threshold the shared per-round uniforms of :mod:`.fedgs`
(``stream(seed, "availability", round)``), so for instance ``fedawe`` with ``fluctuate: 6`` and
``p2_bernoulli`` give identical masks, and every algorithm compared on one pattern sees the same
participation. Unlike FedGS, nothing here redraws an empty round: the FedAWE code lets ``S_t`` be
empty (the model is then left unchanged).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Literal, Optional

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from ..config.base import Fraction, StrictModel
from ..config.limits import MAX_CLIENTS, MAX_ROUNDS
from ..core import numerics
from ..core import rng as rngmod
from ..core.errors import ConfigError
from ..world.context import WorldContext
from .base import AVAILABILITY, Availability
from .fedgs import BernoulliAvailability

#: Purpose of the class weights u_c of the label-mix rule (drawn once per seed).
LABEL_MIX_PURPOSE = "availability/label_mix"
P1_PURPOSE = "availability/p1_uniform"
CYCLIC_ORDER_PURPOSE = "availability/cyclic_order"
RESHUFFLE_PURPOSE = "availability/reshuffle"


def label_mix_probabilities(label_hist: np.ndarray, seed: int, first_half_max: float = 1.0,
                            second_half_max: float = 0.5) -> np.ndarray:
    """The FedAU/FedAWE code's ``p_i = Σ_c q_{i,c} u_c`` (FedSUM's P2 probabilities, reconstructed).

    ``u_c ~ U(0, first_half_max)`` for the first half of the classes and ``U(0, second_half_max)``
    for the second half; ``q_{i,c}`` is client ``i``'s training-label proportion. With an odd
    number of classes C the first half has ⌈C/2⌉ classes (the FedAWE code only handles even C).
    A client holding no labels gets the mean of the ``u_c`` (a uniform label mix), our choice.
    The ``u_c`` come from ``stream(seed, "availability/label_mix")``, so P2, P3 and ``fedawe``
    share one ``p_i`` per seed.
    """
    hist = np.asarray(label_hist, dtype=np.float64)
    if hist.ndim != 2:
        raise ValueError(f"label_hist must be 2-D (clients × classes), got shape {hist.shape}")
    num_classes = hist.shape[1]
    first = num_classes - num_classes // 2
    g = rngmod.stream(seed, LABEL_MIX_PURPOSE)
    u = np.concatenate((g.uniform(0.0, first_half_max, first),
                        g.uniform(0.0, second_half_max, num_classes - first)))
    totals = hist.sum(axis=1)
    mix = numerics.ordered_matmul(hist, u)  # decides availability: the same bits on every BLAS kernel
    uniform_mix = float(u.mean()) if num_classes else 0.0
    p = np.divide(mix, totals, out=np.full(len(totals), uniform_mix), where=totals > 0)
    return np.clip(p, 0.0, 1.0)


def _check_m(m: int, world: WorldContext) -> None:
    if m > world.num_clients:
        raise ConfigError("availability.m", m, f"must be <= the number of clients (N = {world.num_clients})")


class _LabelMixOptions(StrictModel):
    first_half_max: Fraction = Field(1.0, description="u_c ~ U(0, this) for the first half of the classes (code: 1.0)")
    second_half_max: Fraction = Field(0.5,
                                      description="u_c ~ U(0, this) for the second half of the classes (code: 0.5)")


class _LabelMixBernoulli(BernoulliAvailability):
    def __init__(self, cfg: _LabelMixOptions, world: WorldContext):
        super().__init__(cfg, world)
        self.base_p = label_mix_probabilities(world.label_hist, self.seed, cfg.first_half_max,
                                              cfg.second_half_max)
        if len(self.base_p) != self.num_clients:
            raise ValueError("label_hist has a different number of rows than num_clients")


# ------------------------------------------------------------------------------------------------
@AVAILABILITY.register("p1_uniform")
class P1Uniform(Availability):
    """FedSUM P1 / Case 1: exactly m of the n clients, uniformly at random, each round (server-controlled)."""

    class Config(StrictModel):
        m: int = Field(10, ge=1, le=MAX_CLIENTS,
                       description="clients available per round (FedSUM's value was lost; suggested 10)")

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        _check_m(cfg.m, world)

    def available(self, round: int, time_s: float) -> np.ndarray:
        mask = np.zeros(self.num_clients, dtype=bool)
        mask[rngmod.stream(self.seed, P1_PURPOSE, round).choice(self.num_clients, self.cfg.m, replace=False)] = True
        return mask


@AVAILABILITY.register("p2_bernoulli")
class P2Bernoulli(_LabelMixBernoulli):
    """FedSUM P2: each client online independently with a fixed p_i = Σ_c q_ic·u_c (label-mix rule)."""

    class Config(_LabelMixOptions):
        pass

    def probabilities(self, round: int) -> np.ndarray:
        return self.base_p


@AVAILABILITY.register("p3_sine")
class P3Sine(_LabelMixBernoulli):
    """FedSUM P3: p_i^t = clip(p_i·(a·sin(2πt/period) + b), 0, 1) over the label-mix p_i.

    The seed's constants were lost; the defaults a = 0.3, b = 0.7, period = 20 are the FedAWE code's
    ``fluctuate = 1`` (our reconstruction), so ``p3_sine`` with defaults equals ``fedawe`` with ``fluctuate: 1``.
    """

    class Config(_LabelMixOptions):
        a: Fraction = Field(0.3, description="sine amplitude")
        b: Fraction = Field(0.7, description="sine offset")
        period: int = Field(20, ge=1, le=MAX_ROUNDS, description="period of the sine, in rounds")

    def probabilities(self, round: int) -> np.ndarray:
        c = self.cfg
        factor = c.a * np.sin(2 * np.pi / c.period * round) + c.b
        return np.clip(factor * self.base_p, 0.0, 1.0)


@AVAILABILITY.register("fedawe")
class FedAWESchedule(_LabelMixBernoulli):
    """FedAWE code's participation schedules (fluctuate 1–6) over the label-mix p_i.

    | fluctuate | p_i(t) (then clipped to [0, 1])                                |
    | 1         | p_i·(0.3 sin(2πt/20) + 0.7)                                    |
    | 2         | p_i·(0.2 sin(2πt/20) + 0.8)                                    |
    | 3         | p_i·(0.1 sin(2πt/20) + 0.9)                                    |
    | 4         | interleaved: the fluctuate-1 value, set to 0 where it is < 0.1 |
    | 5         | staircase: 0.4·p_i when ⌊t/10⌋ is odd, else p_i                |
    | 6         | stationary p_i (identical to p2_bernoulli)                     |

    As in ``util.data_participation_each_node_per_round`` of ``mingxiang12/FedAWE``, with ``t``
    the 0-based round.
    """

    class Config(_LabelMixOptions):
        fluctuate: Literal[1, 2, 3, 4, 5, 6] = Field(1, description="schedule number of the FedAWE code (1–6)")

    _SINE = {1: (0.3, 0.7), 2: (0.2, 0.8), 3: (0.1, 0.9), 4: (0.3, 0.7)}

    def probabilities(self, round: int) -> np.ndarray:
        f, p = self.cfg.fluctuate, self.base_p
        if f in self._SINE:
            a, b = self._SINE[f]
            values = (a * np.sin(2 * np.pi / 20 * round) + b) * p
            if f == 4:
                values = np.where(values < 0.1, 0.0, values)
        elif f == 5:
            values = 0.4 * p if (round // 10) % 2 == 1 else p
        else:
            values = p
        return np.clip(values, 0.0, 1.0)


@AVAILABILITY.register("uniform_bernoulli")
class UniformBernoulli(BernoulliAvailability):
    """FedSUM Case 2: each client online independently with a given probability (one p for all, or per client).

    The seed's Case 2 is "each client participates in round t with probability p_i"; its H.4
    experiment varies one common p. ``p`` sets that common value; ``probs`` gives one value per
    client instead (its length must equal N). Case 1 of the seed is ``p1_uniform``.
    """

    class Config(StrictModel):
        p: Optional[float] = Field(None, gt=0.0, le=1.0,
                                   description="common probability (default 0.1 when neither is set)")
        probs: Optional[list[float]] = Field(None,
                                             description="per-client probabilities, one per client, each in [0, 1]")

        @field_validator("probs")
        @classmethod
        def _one_source(cls, v: Optional[list[float]], info: ValidationInfo) -> Optional[list[float]]:
            if v is None:
                return v
            if info.data.get("p") is not None:
                raise ValueError("set either p (one probability for all) or probs (one per client), not both")
            for i, x in enumerate(v):
                if not (0.0 <= x <= 1.0):
                    raise ValueError(f"probs[{i}] = {x} must be in [0, 1]")
            return v

    DEFAULT_P = 0.1

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        if cfg.probs is not None:
            if len(cfg.probs) != self.num_clients:
                raise ConfigError("availability.probs", f"{len(cfg.probs)} values",
                                  f"must give exactly one probability per client (N = {self.num_clients})")
            self._p = np.asarray(cfg.probs, dtype=np.float64)
        else:
            self._p = np.full(self.num_clients, self.DEFAULT_P if cfg.p is None else cfg.p)

    def probabilities(self, round: int) -> np.ndarray:
        return self._p


class _BlockOptions(StrictModel):
    m: int = Field(10, ge=1, le=MAX_CLIENTS, description="block size: clients available per round")


class _Blocks(Availability):
    """Block participation (Cases 3 and 4): the clients of the round's :meth:`block` are available, no one else."""

    @abstractmethod
    def block(self, round: int) -> np.ndarray:
        """The clients available in ``round``."""

    def available(self, round: int, time_s: float) -> np.ndarray:
        mask = np.zeros(self.num_clients, dtype=bool)
        mask[self.block(round)] = True
        return mask


@AVAILABILITY.register("cyclic")
class Cyclic(_Blocks):
    """FedSUM Case 3: deterministic cyclic participation, round t makes block (t mod ⌈n/m⌉) of a fixed order available.

    Blocks are consecutive runs of ``m`` clients of the order; when ``m`` does not divide ``n`` the
    last block of each cycle holds the remaining ``n − (⌈n/m⌉ − 1)·m`` clients, so every client is
    available exactly once per cycle of ``⌈n/m⌉`` rounds and τ_max = ⌈n/m⌉ − 1 (FedSUM Eq. (4), our convention).
    ``order: index`` uses client ids 0..n−1; ``order: random`` one permutation drawn once per seed.
    """

    class Config(_BlockOptions):
        order: Literal["index", "random"] = Field(
            "index", description="index: clients 0..n−1 in order; random: one fixed random permutation per seed")

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        _check_m(cfg.m, world)
        n = self.num_clients
        self.cycle_length = math.ceil(n / cfg.m)
        self.order = (np.arange(n) if cfg.order == "index"
                      else rngmod.stream(self.seed, CYCLIC_ORDER_PURPOSE).permutation(n))

    def block(self, round: int) -> np.ndarray:
        """Client ids available at ``round``."""
        b = round % self.cycle_length
        return self.order[b * self.cfg.m:(b + 1) * self.cfg.m]


@AVAILABILITY.register("reshuffled_cyclic")
class ReshuffledCyclic(_Blocks):
    """FedSUM Case 4: the client order is reshuffled every epoch of ⌈n/m⌉ rounds, then blocks of m in turn.

    Epoch ``e = ⌊t / ⌈n/m⌉⌋`` uses the permutation ``stream(seed, "availability/reshuffle", e)``;
    round ``t`` makes its block ``t mod ⌈n/m⌉`` available (the last block is short when ``m`` does
    not divide ``n``). Every client is available exactly once per epoch, so two consecutive
    availabilities are at most ``2⌈n/m⌉ − 1`` rounds apart and τ_max ≤ 2⌈n/m⌉ − 2
    (``docs/algorithms/fedsum.md#delay-metrics``).
    """

    class Config(_BlockOptions):
        pass

    scratch_attrs = ("_cached",)  # the latest epoch's permutation, a pure function of (seed, epoch)

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        _check_m(cfg.m, world)
        self.epoch_length = math.ceil(self.num_clients / cfg.m)
        self._cached: tuple[int, np.ndarray] | None = None

    def permutation(self, epoch: int) -> np.ndarray:
        """The client order of ``epoch`` (a pure function of (seed, epoch); the latest is cached)."""
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, rngmod.stream(self.seed, RESHUFFLE_PURPOSE, epoch).permutation(self.num_clients))
        return self._cached[1]

    def block(self, round: int) -> np.ndarray:
        epoch, b = divmod(round, self.epoch_length)
        return self.permutation(epoch)[b * self.cfg.m:(b + 1) * self.cfg.m]


@AVAILABILITY.register("biased")
class BiasedByIndex(BernoulliAvailability):
    """FedSUM H.8 biased sampling by client index: p = 0.5 for clients 1–11, 0.45 for 12–22, … (−0.05 per block).

    ``p_i = max(start − step·⌊i / block⌋, min_prob)`` for 0-based client id ``i``. With the paper's
    100 clients and ``block = 11`` this gives ten levels 0.5, 0.45, …, 0.05 (the last block holds
    client 100 alone). The seed only describes 100 clients, so by default (``block`` unset) the
    block scales with the population, ``block = ⌈11·N/100⌉`` (11 at N = 100), keeping the same ten
    levels at any N; set ``block: 11`` for the literal pattern. Where ``start − step·k`` would fall
    below ``min_prob`` (default 0: never available) clients get ``min_prob``.
    """

    class Config(StrictModel):
        start: float = Field(0.5, gt=0.0, le=1.0, description="probability of the first block (clients 1–11)")
        step: Fraction = Field(0.05, description="decrease per block")
        block: Optional[int] = Field(None, ge=1, le=MAX_CLIENTS,
                                     description="clients per block (default ⌈11·N/100⌉: 11 for the paper's 100 "
                                                 "clients)")
        min_prob: Fraction = Field(0.0, description="floor for blocks where start − step·k would fall below it")

        @field_validator("min_prob")
        @classmethod
        def _floor_below_start(cls, v: float, info: ValidationInfo) -> float:
            start = info.data.get("start")
            if start is not None and v > start:
                raise ValueError(f"must be <= start ({start})")
            return v

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self.block = cfg.block if cfg.block is not None else max(1, math.ceil(11 * self.num_clients / 100))
        level = np.arange(self.num_clients) // self.block
        self._p = np.maximum(cfg.start - cfg.step * level, cfg.min_prob)

    def probabilities(self, round: int) -> np.ndarray:
        return self._p
