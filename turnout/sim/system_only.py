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
are refused by :func:`turnout.sim.composition.system_only_components`. The loop is the engine's own
(:class:`turnout.sim.engine.Simulation`); :class:`SystemOnlyWork` is the part handed to it.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.records import CohortResult, Reports
from .phases import Opened, Settled, Trained
from .work import TrainOrder, Work, WorkDone

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


class SystemOnlyWork(Work):
    """The proxy above as the round loop's work: no client trains and the server rule does not run.

    ``Simulation(exp, ...)`` is handed one of these when ``exp.config.no_train`` is set.
    """

    trains_model = False

    def train(self, sim, opened: Opened, order: TrainOrder) -> WorkDone:
        k = opened.size
        samples = samples_processed(sim.population.n_train[opened.clients], sim.exp.train.batch_size, order.steps)
        up = (np.asarray(sim.compressor.dense_upload_bytes(k), dtype=np.int64)
              * sim.algorithm.traffic_for(sim.algorithm.cfg).up)
        nothing = torch.zeros((k, 0))
        result = CohortResult(updates=nothing, losses=np.full(k, np.nan), samples=samples, buffers=[{}] * k)
        return WorkDone(result=result, decoded=nothing, payload_up=up)

    def report_dim(self, dim: int) -> int:
        return 0  # proxy reports carry no update values

    def begin_round(self, sim, r: int, clients: np.ndarray, steps: np.ndarray, lr: float) -> None:
        """No client rule runs."""

    def evaluate(self, sim, r: int, row: dict) -> None:
        """Nothing is evaluated: no model was trained."""

    def component_columns(self, sim) -> dict[str, object]:
        """The selector's columns only: the algorithm's describe a server rule that did not run."""
        return sim.selector.round_metrics()

    def client_columns(self, sim) -> dict[str, np.ndarray]:
        return {}

    def summary(self, sim) -> dict[str, object]:
        return {"system_only": True}  # the run's summary.json spells out the proxy (PROXY_NOTE)

    def aggregate(self, sim, r: int, reports: Reports, trained: Trained, settled: Settled) -> int:
        """An aggregating round changes every coordinate: recorded in O(rounds), as a trained dense step is
        (:func:`~turnout.sim.work.record_step`), never as an index array of the model's size."""
        return sim.ledger.record_all(r) if len(reports.clients) else 0


__all__ = ["PROXY_NOTE", "SystemOnlyWork", "samples_processed"]
