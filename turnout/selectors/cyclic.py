"""Cyclic selectors: blocks of K clients in turn (FedSUM Case 3) or reshuffled every epoch (Case 4).

FedSUM §2.1 ("Cases 1–4"; §2.1's labels, not Appendix F's swapped ones; notes:
``docs/algorithms/baselines.md#cyclic-participation``): Case 3 walks a fixed order of the clients
in consecutive blocks of ``m``; Case 4 reshuffles the order every epoch and then walks it in
blocks. Here they are *selectors* choosing from the available set (``turnout.availability`` has
the same patterns as availability models).

Block schedule, a pure function of the round (so resuming needs no state):

- an epoch is ``B = ⌈N/K⌉`` rounds; round ``t`` is block ``b = t mod B`` of epoch ``e = ⌊t/B⌋``;
- block ``b`` is ``order[b·K:(b+1)·K]`` — when K does not divide N the last block of every epoch
  holds the remaining ``N − (B−1)·K`` clients (the same convention as the availability patterns);
- ``cyclic``: one order for the whole run (``order: index`` = client ids, ``random`` = one
  permutation per seed); ``reshuffled_cyclic``: a fresh permutation per epoch, drawn from
  ``stream(seed, "selector/reshuffle", e)``.

With everyone available, every client runs exactly once per epoch, so τ_max = ⌈N/K⌉ − 1 for
``cyclic`` and ≤ 2⌈N/K⌉ − 2 for ``reshuffled_cyclic`` (``docs/algorithms/fedsum.md#delay-metrics``).

Availability and over-commitment (our choices; the seed assumes full availability): the block's
available members are launched. With ``fill: true`` (default) the cohort is topped up with
available clients outside the block, uniformly at random, to the block size plus the round
mode's over-commitment extras (``launch − K``) — so with fewer available clients than asked
every available one is launched, and over-commitment's extras come from outside the block. A
short last block is not topped up (it wants, and waits for, its own members only).
``fill: false`` launches only the block's available members (no over-commitment extras).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Literal

import numpy as np
from pydantic import Field

from ..config.base import StrictModel
from ..config.limits import MAX_CLIENTS
from ..core import rng as rngmod
from ..world.context import WorldContext
from .base import SELECTORS, Cohort, SelectionContext, Selector

ORDER_PURPOSE = "selector/cyclic-order"
RESHUFFLE_PURPOSE = "selector/reshuffle"


class _CyclicConfig(StrictModel):
    clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS, description="K: block size, reports wanted per round")
    weighting: Literal["n_samples", "equal"] = Field(
        "n_samples", description="n_samples: n_k / Σ n over the reports received; equal: 1/K over the reports "
                                 "received")
    fill: bool = Field(
        True, description="top the cohort up to the launch count with random available clients outside the "
                          "block (unavailable block members, over-commitment extras); false: block members only")


class _BlockSelector(Selector):
    Config = _CyclicConfig

    def __init__(self, cfg: _CyclicConfig, world: WorldContext):
        super().__init__(cfg, world)
        self.epoch_length = math.ceil(self.num_clients / cfg.clients_per_round)

    @abstractmethod
    def order(self, epoch: int) -> np.ndarray:
        """The population's order in ``epoch``; consecutive blocks of ``clients_per_round`` are the rounds."""

    def block(self, round: int) -> np.ndarray:
        """Clients of round ``round``'s block (before availability)."""
        epoch, b = divmod(int(round), self.epoch_length)
        k = self.cfg.clients_per_round
        return self.order(epoch)[b * k:(b + 1) * k]

    def select(self, ctx: SelectionContext) -> Cohort:
        avail = np.asarray(ctx.available, dtype=np.int64)
        block = self.block(ctx.round)
        online = np.zeros(self.num_clients, dtype=bool)
        online[avail] = True
        chosen = block[online[block]]
        # The round wants the block (a short last block wants fewer); over-commitment adds launch − K.
        want = max(0, int(ctx.launch) - (self.cfg.clients_per_round - len(block)))
        if self.cfg.fill and len(chosen) < want:
            online[block] = False  # the block's members are taken (or offline)
            rest = avail[online[avail]]
            extra = min(want - len(chosen), len(rest))
            if extra > 0:
                chosen = np.concatenate([chosen, ctx.rng.choice(rest, size=extra, replace=False)])
        clients = np.sort(chosen).astype(np.int64)
        k = len(clients)
        w = self.n_train[clients].astype(np.float64) if self.cfg.weighting == "n_samples" else np.ones(k)
        return Cohort(clients, w, normalize=True, target=min(len(block), k))


@SELECTORS.register("cyclic")
class CyclicSelector(_BlockSelector):
    """FedSUM Case 3 as a selector: consecutive blocks of K clients of a fixed order, in turn."""

    class Config(_CyclicConfig):
        order: Literal["index", "random"] = Field(
            "index", description="index: clients 0..N−1 in order; random: one fixed random permutation per seed")

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        n = self.num_clients
        self._order = (np.arange(n, dtype=np.int64) if cfg.order == "index"
                       else rngmod.stream(self.seed, ORDER_PURPOSE).permutation(n).astype(np.int64))

    def order(self, epoch: int) -> np.ndarray:
        return self._order


@SELECTORS.register("reshuffled_cyclic")
class ReshuffledCyclicSelector(_BlockSelector):
    """FedSUM Case 4 as a selector: the order is reshuffled every epoch of ⌈N/K⌉ rounds, then blocks of K."""

    class Config(_CyclicConfig):
        pass

    scratch_attrs = ("_cached",)  # the latest epoch's order, a pure function of (seed, epoch)

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self._cached: tuple[int, np.ndarray] | None = None

    def order(self, epoch: int) -> np.ndarray:
        """The order of ``epoch``: a pure function of (seed, epoch); the latest one is cached."""
        if self._cached is None or self._cached[0] != epoch:
            perm = rngmod.stream(self.seed, RESHUFFLE_PURPOSE, epoch).permutation(self.num_clients)
            self._cached = (epoch, perm.astype(np.int64))
        return self._cached[1]
