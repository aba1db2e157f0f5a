"""Your components: a selector and an aggregation rule, registered under names the experiment file uses.

``experiment.yaml`` names this file under ``plugins:``, so ``selector: {name: my_selector}`` and
``algorithm: {name: my_rule}`` work like built-ins: validated before any work, shown by
``turnout list --plugin components.py selector.my_selector``, imported again in every worker process.
Both are working skeletons — a fair selector and a norm-clipped mean — to edit into your own idea.

The rule says where the model should move (``server_direction``); how far, with which optimiser, is the
shared server step the config chooses: ``algorithm: {name: my_rule, server_step: {name: yogi, lr: 0.05}}``
runs the same rule under FedYogi's step (sgd with momentum / Nesterov, adam and adagrad too) without a line
of step code here.

Two rules keep a run exact and resumable: whatever changes while a run goes on is listed in
``state_attrs`` (a checkpoint carries it), and randomness comes from the round's stream ``ctx.rng``,
never from a global generator.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from turnout.algorithms.base import ALGORITHMS, Algorithm
from turnout.algorithms.server_step import ServerLRConfig
from turnout.config.base import StrictModel
from turnout.config.limits import MAX_CLIENTS
from turnout.core.records import Cohort, Reports, SelectionContext
from turnout.selectors.base import SELECTORS, Selector


@SELECTORS.register("my_selector")
class FewestTurnsFirst(Selector):
    """Launch the available clients with the fewest turns so far (ties broken at random).

    The first line of the docstring is what ``turnout list`` prints. ``select`` gets who is online
    (``ctx.available``), how many to launch (``ctx.launch``: K, or more when the round mode
    over-commits), the round and its random stream; it returns the cohort and each member's
    aggregation weight. K (``target()``) is ``clients_per_round`` unless the selector overrides it.
    """

    class Config(StrictModel):  # the options of `selector: {name: my_selector, ...}`, checked before any work
        clients_per_round: int = Field(10, ge=1, le=MAX_CLIENTS, description="K: reports wanted per round")
        weighting: Literal["n_samples", "equal"] = Field(
            "n_samples", description="aggregation weight of a report: the client's sample count, or equal")

    state_attrs = ("turns",)  # changes during a run: checkpointed, so a resumed run selects the same clients

    def __init__(self, cfg: Config, world):
        super().__init__(cfg, world)
        self.turns = np.zeros(world.num_clients, dtype=np.int64)  # launches per client (numpy, not objects)

    def select(self, ctx: SelectionContext) -> Cohort:
        available = np.asarray(ctx.available, dtype=np.int64)
        m = min(int(ctx.launch), len(available))
        if m == 0:
            return Cohort(np.zeros(0, np.int64), np.zeros(0), target=0)
        key = self.turns[available] + ctx.rng.random(len(available))  # fewest turns first; random ties
        clients = np.sort(available[np.argsort(key, kind="stable")[:m]])
        self.turns[clients] += 1
        weights = self.n_train[clients].astype(np.float64) if self.cfg.weighting == "n_samples" else np.ones(m)
        return Cohort(clients, weights, normalize=True, target=min(self.target(), m))


@ALGORITHMS.register("my_rule")
class ClippedMean(Algorithm):
    """Weighted mean of the updates, each first scaled down to an L2 norm of at most ``clip_norm``.

    The server rule is ``server_direction``: the reports arrive as one batch (``reports.updates`` is a
    clients × parameters tensor, ``reports.weights`` the selector's weights) and it returns the direction
    to move in; the server step (``server_lr``, or a ``server_step`` block: SGD, momentum, Adam, Yogi,
    Adagrad) applies it. The clients run FedAvg's local SGD (the client hooks' defaults).

    What it declares are the defaults (docs/components.md): one model delta each way (``traffic``); reports of
    earlier cohorts are welcome (``cohort_bound`` empty); it reads each report (``reads_each_report``'s default
    reason), so client-level DP and secure aggregation are refused; late reports are dropped, as its Config has no
    ``max_staleness`` option (``turnout.algorithms.late_reports.MaxStaleness``).
    """

    class Config(ServerLRConfig):  # server_lr and the server_step block come with it
        clip_norm: float = Field(10.0, gt=0.0, description="largest L2 norm of an update that counts in full")

    def server_direction(self, round: int, global_params: torch.Tensor, reports: Reports) -> torch.Tensor | None:
        if len(reports) == 0:
            return None  # nobody reported: neither the model nor the server step moves
        norms = torch.linalg.vector_norm(reports.updates, dim=1, keepdim=True)
        scale = torch.clamp(self.cfg.clip_norm / torch.clamp(norms, min=1e-12), max=1.0)
        weights = torch.as_tensor(reports.weights, dtype=reports.updates.dtype)
        if reports.normalize:  # relative weights: divide by the sum over the reports that arrived
            weights = weights / weights.sum()
        return weights @ (reports.updates * scale)
