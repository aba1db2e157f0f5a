"""Byte accounting through the real engine: downloads are exactly what a stale client lacks."""

import numpy as np
import torch

from turnout.algorithms.base import Algorithm
from turnout.compressors.base import sparse_bytes
from turnout.compressors.none import NoCompression
from turnout.core.records import Cohort, SentStep
from turnout.selectors.base import Selector

RAW = {"name": "bytes", "rounds": 6, "data": {"name": "synthetic", "num_clients": 8}, "model": {"name": "logreg"},
       "train": {"batch_size": 10, "local_steps": 1}, "selector": {"name": "uniform", "clients_per_round": 2},
       "output": {"progress": False}}
DIM = 610

# Coordinates the server changes in each round (hand-built sparse updates).
SUPPORTS = {0: np.arange(0, 50), 1: np.arange(40, 60), 2: np.arange(100, 105), 3: np.arange(0, 3),
            4: np.arange(300, 400), 5: np.arange(600, 610)}


class HandUpdates(Algorithm):
    """Server rule that changes exactly SUPPORTS[round] (ignores the clients' reports)."""

    Config = None

    def aggregate(self, round, global_params, reports):
        out = global_params.clone()
        out[torch.from_numpy(SUPPORTS[round])] += 1.0
        return out


class Schedule(Selector):
    """Client 0 every round it is scheduled; client 1 only in rounds 0 and 5."""

    Config = None
    plan = {0: [0, 1], 1: [0, 2], 2: [2, 3], 3: [3, 4], 4: [4, 5], 5: [0, 1]}

    def target(self):
        return 2

    def select(self, ctx):
        c = np.array(self.plan[ctx.round])
        return Cohort(c, np.ones(2))


class PricingSpy(NoCompression):
    """No compression, recording what each priced download lacked (one entry per round)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.downloads = {}

    def download_bytes(self, lacking):
        self.downloads.setdefault(len(self.downloads), lacking.copy())
        return super().download_bytes(lacking)


class SparseSpy(PricingSpy):
    """A downlink that sends only the coordinates the step moves: its support comes back with the step."""

    def server_update(self, round, update):
        return SentStep(update, update != 0)


def run(build_simulation):
    sim = build_simulation(RAW, components={
        "algorithm": lambda ctx: HandUpdates(None, ctx.algorithm_context),
        "selector": lambda ctx: Schedule(None, ctx.world),
        "compressor": lambda ctx: SparseSpy(ctx.exp["compressor"].cfg, ctx.dim, 0, ctx.store)})
    res = sim.run()
    return sim, res, sim.compressor.downloads


def test_stale_client_downloads_union_of_missed_supports(build_simulation):
    sim, res, lacking = run(build_simulation)
    # Round 0: both clients download the full initial model.
    assert lacking[0].tolist() == [DIM, DIM]
    assert res.rounds[0]["bytes_down"] == 2 * DIM * 4
    # Round 1: client 0 synced through round −1 lacks round 0's support; client 2 lacks everything.
    assert lacking[1].tolist() == [50, DIM]
    # Round 5: client 0 last synced at round 1 (so through round 0): it lacks rounds 1–4.
    union_0 = np.unique(np.concatenate([SUPPORTS[r] for r in (1, 2, 3, 4)]))
    # client 1 last synced at round 0 (through round −1): it lacks rounds 0–4.
    union_1 = np.unique(np.concatenate([SUPPORTS[r] for r in (0, 1, 2, 3, 4)]))
    assert lacking[5].tolist() == [len(union_0), len(union_1)]
    assert res.rounds[5]["bytes_down"] == int(sparse_bytes(len(union_0), DIM) + sparse_bytes(len(union_1), DIM))
    # per-client totals add up to the per-round totals
    assert sim.population.bytes_down.sum() == sum(r["bytes_down"] for r in res.rounds)
    # the ledger's change count per round is the hand-built support size
    assert [r["coords_changed"] for r in res.rounds] == [len(SUPPORTS[r]) for r in range(6)]


def test_a_dense_downlink_changes_every_coordinate_in_a_round_that_moves(build_simulation):
    """A trained step's zeros hinge on last digits (a ReLU, a sum rounding back), so they are not counted on;
    every coordinate changes in a round that moves the model (docs/determinism.md)."""
    sim = build_simulation(RAW, components={
        "algorithm": lambda ctx: HandUpdates(None, ctx.algorithm_context),
        "selector": lambda ctx: Schedule(None, ctx.world),
        "compressor": lambda ctx: PricingSpy(ctx.exp["compressor"].cfg, ctx.dim, 0, ctx.store)})
    res = sim.run()
    assert [r["coords_changed"] for r in res.rounds] == [DIM] * 6
    assert sim.compressor.downloads[1].tolist() == [DIM, DIM]  # client 0 missed round 0's step: the whole model
