"""Round modes inside the real engine: over-commitment and deadline rounds on heterogeneous clients."""

import numpy as np
import pytest

from turnout.algorithms.fedavg import FedAvg, FedAvgConfig
from turnout.selectors.uniform import UniformSelector

N, K, STEPS, BATCH = 20, 10, 2, 10
DOWN_BPS, UP_BPS = 100e3, 50e3
DIM = 60 * 10 + 10  # logreg on synthetic data: 60 features, 10 classes
MODEL_BYTES = 4 * DIM  # dense float32 model, no buffers

BASE = {
    "name": "round-modes", "seeds": [0], "rounds": 4,
    "data": {"name": "synthetic", "num_clients": N, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": BATCH, "local_steps": STEPS, "lr": 0.05},
    "selector": {"name": "uniform", "clients_per_round": K},
    "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01,
                "down_kBps": DOWN_BPS / 1e3, "up_kBps": UP_BPS / 1e3},
    "eval": {"every": 100},
    "output": {"progress": False},
}

#: client i costs 0.001·(i+1) seconds per sample, so every client finishes at a different time
COST = 0.001 * (np.arange(N) + 1)
COMM_S = MODEL_BYTES / DOWN_BPS + MODEL_BYTES / UP_BPS
FINISH = COMM_S + STEPS * BATCH * COST  # every client downloads and uploads the full dense model


class RecordingUniform(UniformSelector):
    """Uniform selection that records each round's cohort."""

    def __init__(self, cfg, world):
        super().__init__(cfg, world)
        self.cohorts = []

    def select(self, ctx):
        cohort = super().select(ctx)
        self.cohorts.append(cohort.clients.copy())
        return cohort


class StaleFedAvg(FedAvg):
    """FedAvg that aggregates reports up to 10 rounds late, recording every report's staleness."""

    max_staleness = 10  # a shipped rule's config says this (LateReportsOption)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.seen = []

    def aggregate(self, round, params, reports):
        self.seen.append(reports.staleness.copy())
        return super().aggregate(round, params, reports)


@pytest.fixture
def run(build_simulation, compute_speeds):
    def run(round_mode, rounds=4, algorithm=None):
        components = {"devices": compute_speeds(lambda default: COST.copy()),
                      "selector": lambda ctx: RecordingUniform(ctx.exp["selector"].cfg, ctx.world)}
        if algorithm is not None:
            components["algorithm"] = algorithm
        sim = build_simulation({**BASE, "rounds": rounds, "round_mode": round_mode}, components=components)
        assert (sim.data.n_train >= BATCH).all()  # every local step sees a full batch: FINISH is exact
        return sim, sim.run(), sim.selector.cohorts

    return run


def test_over_commit_launches_13_aggregates_10_and_wastes_the_discarded_work(run):
    sim, res, cohorts = run({"name": "over_commit", "oc": 1.3})
    pop = sim.population
    clock, expected_wasted = 0.0, np.zeros(N)
    for row, cohort in zip(res.rounds, cohorts):
        assert row["n_selected"] == 13 == len(cohort)
        assert row["n_aggregated"] == 10 and row["n_dropped"] == 0 and row["n_stale"] == 0
        f = np.sort(FINISH[cohort])
        duration = f[K - 1]  # the 10th fastest delivery closes the round
        assert row["round_duration_s"] == pytest.approx(duration)
        discarded = cohort[FINISH[cohort] > duration]
        assert len(discarded) == 3
        wasted = np.minimum(FINISH[discarded], duration)  # cut when the server stops waiting
        assert row["wasted_s"] > 0
        assert row["wasted_s"] == pytest.approx(wasted.sum())
        assert row["wasted_s"] == pytest.approx(3 * duration)
        assert row["resource_s"] == pytest.approx(f[:K].sum() + wasted.sum())
        assert row["bytes_down"] == 13 * MODEL_BYTES and row["bytes_up"] == 10 * MODEL_BYTES
        expected_wasted[discarded] += wasted
        clock += duration
        assert row["sim_time_s"] == pytest.approx(clock)
    np.testing.assert_allclose(pop.wasted_s, expected_wasted)
    assert pop.times_selected.sum() == 13 * len(res.rounds) and pop.times_aggregated.sum() == 10 * len(res.rounds)
    assert np.isfinite(res.rounds[-1]["loss"])


def test_deadline_never_aggregates_clients_that_cannot_make_it(run):
    d = 0.25  # FINISH = 0.0732 + 0.02·(i+1): clients 0..7 make it, 8..19 never do
    hopeless = np.flatnonzero(FINISH > d)
    assert len(hopeless) == 12
    sim, res, cohorts = run({"name": "deadline", "deadline_s": d, "keep_late": False}, rounds=6)
    pop = sim.population
    assert pop.times_selected[hopeless].sum() > 0
    assert (pop.times_aggregated[hopeless] == 0).all()
    on_time = np.setdiff1d(np.arange(N), hopeless)
    np.testing.assert_array_equal(pop.times_aggregated[on_time], pop.times_selected[on_time])
    # without keep_late, the server cuts the slow clients at the deadline: d seconds wasted each time
    np.testing.assert_allclose(pop.wasted_s[hopeless], d * pop.times_selected[hopeless])
    assert (pop.wasted_s[on_time] == 0).all()
    for row, cohort in zip(res.rounds, cohorts):
        assert row["n_selected"] == K and row["round_duration_s"] == d
        assert row["n_aggregated"] == int((FINISH[cohort] <= d).sum())
    assert res.rounds[-1]["sim_time_s"] == pytest.approx(6 * d)


def test_deadline_last_arrival_and_min_reports_in_the_engine(run):
    d = 10.0  # everyone makes it: last_arrival closes at the slowest selected client
    sim, res, cohorts = run({"name": "deadline", "deadline_s": d, "advance": "last_arrival"})
    for row, cohort in zip(res.rounds, cohorts):
        assert row["round_duration_s"] == pytest.approx(FINISH[cohort].max())
        assert row["n_aggregated"] == K and row["wasted_s"] == 0.0
    # a failure rule nobody can meet: nothing is ever aggregated, the model never moves, all work is wasted
    sim, res, cohorts = run({"name": "deadline", "deadline_s": d, "min_reports": K + 1})
    assert all(row["n_aggregated"] == 0 for row in res.rounds)
    assert all(row["coords_changed"] == 0 for row in res.rounds)
    assert all(row["wasted_s"] == pytest.approx(row["resource_s"]) for row in res.rounds)
    assert sim.population.times_aggregated.sum() == 0


def test_deadline_late_reports_are_used_by_stale_aware_algorithms_and_wasted_otherwise(run):
    d = 0.25
    # FedAvg does not use stale updates: late reports are dropped on arrival and their work is waste.
    sim, res, _ = run({"name": "deadline", "deadline_s": d, "keep_late": True}, rounds=6)
    assert sum(row["n_late"] for row in res.rounds) > 0
    assert sum(row["n_stale"] for row in res.rounds) == 0
    dropped = sum(row["n_stale_dropped"] for row in res.rounds)
    assert dropped > 0
    assert sim.population.wasted_s.sum() == pytest.approx(
        sum(row["wasted_s"] for row in res.rounds) + res.summary["late_unused_s"])

    # An algorithm that accepts stale updates aggregates them in a later round, with staleness ≥ 1.
    sim, res, _ = run({"name": "deadline", "deadline_s": d, "keep_late": True}, rounds=6,
                      algorithm=lambda ctx: StaleFedAvg(FedAvgConfig(), ctx.algorithm_context))
    assert sum(row["n_stale"] for row in res.rounds) > 0
    stale = np.concatenate(sim.algorithm.seen)
    assert (stale[stale > 0] >= 1).all() and (stale > 0).sum() == sum(row["n_stale"] for row in res.rounds)
