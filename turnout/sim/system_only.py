"""System-only what-if mode (``--no-train``): the simulated world without training a model.

Who is reachable, whom a selector launches, what each client downloads and uploads, how long it
computes, when a round closes and what work is wasted depend on the model only through its size —
for every component that decides without looking at losses or update values. This mode runs the
real round's open, close and account phases (availability, selector, devices, round mode, the
wire pricer, late reports, participation) and replaces training and aggregation with a stated
proxy, so a million clients over hundreds of rounds take seconds to a minute:

* no client trains: each processes the samples its local steps would (the count local SGD
  processes: reshuffled epochs, short last batch), with an unknown (NaN) loss;
* uploads cost what the compressor charges for a dense update (:meth:`Compressor.dense_upload_bytes`);
* a round that aggregates at least one report changes every coordinate of the model — what a
  dense SGD update does — so a client that missed an aggregation downloads the dense model;
* nothing is evaluated (no accuracy or loss) and the algorithm's own row columns are left out.

Components whose decisions depend on losses or update values say why in ``needs_training`` and
are refused by :func:`turnout.sim.composition.system_only_components`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.records import CohortResult, Reports
from ..world.late import LateBuffer
from .engine import Simulation
from .phases import Aggregated, Closed, Opened, Trained

#: What the run's summary says about the proxy.
PROXY_NOTE = ("system-only run (no_train): no model was trained or evaluated; each client processed the samples "
              "its local steps would; uploads are priced as dense updates by the compressor; every round that "
              "aggregated a report is taken to change every coordinate, so a client that missed one downloads "
              "the dense model")


def samples_processed(n: np.ndarray, batch_size: int, steps: np.ndarray) -> np.ndarray:
    """Samples ``steps`` minibatches over ``n`` rows process: whole reshuffled epochs, then full batches.

    Local SGD walks a fresh permutation per epoch in ``ceil(n / batch)`` batches, the last one short,
    so ``steps = e·ceil(n/b) + r`` (``r`` < batches per epoch) processes ``e·n + r·b`` samples.
    """
    n = np.asarray(n, dtype=np.int64)
    steps = np.asarray(steps, dtype=np.int64)
    per_epoch = np.maximum(1, -(-n // batch_size))
    epochs, rest = np.divmod(steps, per_epoch)
    return np.where(n > 0, epochs * n + rest * batch_size, 0).astype(np.int64)


class SystemOnlySimulation(Simulation):
    """:class:`~turnout.sim.engine.Simulation` whose train and aggregate phases are the proxy above.

    ``Simulation(exp, ...)`` returns one of these when ``exp.config.no_train`` is set.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.late = LateBuffer(0)  # late reports carry no update values
        self._every = np.arange(self.model.dim, dtype=np.int64)
        self._none = np.zeros(0, dtype=np.int64)

    def _train(self, opened: Opened) -> Trained:
        r, clients = opened.round, opened.clients
        train = self.exp.train
        down = self.pricer.download(clients, r)
        lr = train.lr_schedule.lr(train.lr, r, self.exp.config.rounds)
        n = self.population.n_train[clients]
        self.compressor.begin_round(r, opened.cohort)
        k = len(clients)
        samples = samples_processed(n, train.batch_size, train.steps_for(n))
        up = np.asarray(self.compressor.dense_upload_bytes(k), dtype=np.int64) * self.algorithm.uplink_vectors
        up = up + self.model.buffer_bytes() * (len(self.buffers) > 0)
        nothing = torch.zeros((k, 0))
        result = CohortResult(updates=nothing, losses=np.full(k, np.nan), samples=samples, buffers=[{}] * k)
        return Trained(lr, down, result, nothing, up, np.zeros(k, dtype=bool))

    def _aggregate(self, opened: Opened, trained: Trained, closed: Closed) -> Aggregated:
        r, agg, arrived, ok = opened.round, closed.aggregated, closed.arrived, closed.stale_ok
        fresh = opened.clients[agg]
        clients = np.concatenate([fresh, arrived.clients[ok]])
        reports = Reports(clients=clients, updates=torch.zeros((len(clients), 0)),
                          weights=np.concatenate([closed.weights[agg], arrived.weights[ok]]),
                          normalize=opened.cohort.normalize,
                          n_samples=np.concatenate([self.population.n_train[fresh], arrived.n_samples[ok]]),
                          losses=np.concatenate([trained.result.losses[agg], arrived.losses[ok]]),
                          staleness=np.concatenate([np.zeros(len(fresh), np.int64), r - arrived.origin_round[ok]]))
        changed = self.ledger.record(r, self._every if len(clients) else self._none)
        self.selector.observe(closed.feedback)
        return Aggregated(reports, changed)

    def _evaluate(self, r: int, row: dict) -> None:
        """Nothing to evaluate: no model was trained."""

    def _component_metrics(self) -> dict[str, object]:
        return self.selector.round_metrics()  # the algorithm's columns describe a server rule that did not run

    def _client_columns(self) -> dict[str, np.ndarray]:
        return self._population_columns()

    def result(self, rows: list[dict], wall_s: float = 0.0):
        out = super().result(rows, wall_s)
        out.summary["system_only"] = True  # the run's summary.json spells out the proxy (PROXY_NOTE)
        return out


__all__ = ["PROXY_NOTE", "SystemOnlySimulation", "samples_processed"]
