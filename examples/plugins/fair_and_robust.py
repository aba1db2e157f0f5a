"""An example plugin: a fair selector and a robust server rule, registered from outside turnout.

Use it from an experiment file (``plugins: [plugins/fair_and_robust.py]``, relative to that file)
or the command line (``turnout run EXP.yaml --plugin examples/plugins/fair_and_robust.py``); then
``selector: {name: round_robin}`` and ``algorithm: {name: trimmed_mean}`` work like built-ins, and
``turnout list --plugin examples/plugins/fair_and_robust.py selector.round_robin`` shows the options.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from turnout.algorithms.base import ALGORITHMS, Algorithm
from turnout.config.base import StrictModel
from turnout.config.limits import MAX_CLIENTS, MAX_SERVER_LR
from turnout.records import Cohort, Reports, SelectionContext
from turnout.selectors.base import SELECTORS, Selector
from turnout.world.context import WorldContext


@SELECTORS.register("round_robin")
class RoundRobinByAvailability(Selector):
    """Round-robin over whoever is online: launch the available clients that have waited longest for a turn.

    Uniform sampling lets an unlucky client wait many rounds while others are drawn again; here a
    client's turn comes as soon as it is online and everyone online has had a more recent turn,
    so selection counts stay balanced under any availability pattern. Ties (clients last launched
    in the same round, or never) are broken at random from the round's stream.
    """

    class Config(StrictModel):
        clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS, description="K: reports wanted per round")
        weighting: Literal["n_samples", "equal"] = Field(
            "n_samples", description="aggregation weight of a report: n_k (relative) or equal")

    # Declared run state: a checkpoint carries it, so a resumed run selects exactly as an uninterrupted one.
    state_attrs = ("last_turn",)

    def __init__(self, cfg: Config, world: WorldContext):
        super().__init__(cfg, world)
        self.last_turn = np.full(world.num_clients, -1, dtype=np.int64)  # round of each client's last launch

    def target(self) -> int:
        return self.cfg.clients_per_round

    def select(self, ctx: SelectionContext) -> Cohort:
        available = np.asarray(ctx.available, dtype=np.int64)
        m = min(int(ctx.launch), len(available))
        if m == 0:
            return Cohort(np.zeros(0, np.int64), np.zeros(0), target=0)
        # longest wait first: the oldest last turn, a uniform draw in [0, 1) breaking ties; O(N) partition
        key = self.last_turn[available] + ctx.rng.random(len(available))
        clients = np.sort(available[np.argpartition(key, m - 1)[:m]])
        self.last_turn[clients] = ctx.round
        w = self.n_train[clients].astype(np.float64) if self.cfg.weighting == "n_samples" else np.ones(m)
        return Cohort(clients, w, normalize=True, target=min(self.target(), m))


@ALGORITHMS.register("trimmed_mean")
class TrimmedMean(Algorithm):
    """Coordinate-wise trimmed mean of the reports (Yin et al., ICML 2018): a few wild updates cannot drag the model.

    Per coordinate, the ``⌊trim·k⌋`` largest and smallest of the ``k`` reported values are dropped
    and the rest averaged (unweighted, as in the paper); the global model moves by ``server_lr``
    times that. With ``trim: 0`` it is the plain mean of the updates. Clients run FedAvg's rule.
    """

    class Config(StrictModel):
        trim: float = Field(0.1, ge=0.0, lt=0.5, description="share of reports dropped at each end, per coordinate")
        server_lr: float = Field(1.0, gt=0.0, le=MAX_SERVER_LR, description="step size of the server update")

    def aggregate(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor:
        k = len(reports)
        if k == 0:
            return global_params
        cut = int(math.floor(self.cfg.trim * k))
        values = reports.updates.to(torch.float64)
        if cut:
            values = torch.sort(values, dim=0).values[cut:k - cut]
        return global_params + self.cfg.server_lr * values.mean(dim=0).to(global_params.dtype)
