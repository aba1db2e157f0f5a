"""The round loop: exact bytes and simulated seconds, FedAvg's server rule, per-client counters."""

import numpy as np
import pytest
import torch

from turnout.algorithms.fedavg import FedAvg, FedAvgConfig
from turnout.availability.always import AlwaysAvailable
from turnout.core.records import Reports, RoundClose
from turnout.devices.base import DeviceModel
from turnout.round_modes.base import RoundMode
from turnout.world.population import DeviceProfiles

TINY = {
    "name": "tiny", "seeds": [0], "rounds": 3,
    "data": {"name": "synthetic", "num_clients": 12, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 4, "lr": 0.05},
    "selector": {"name": "uniform", "clients_per_round": 4},
    "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
    "eval": {"every": 1},
    "output": {"progress": False},
}


class StepDevices(DeviceModel):
    """Client i computes at 1 ms × (1 + i) per sample: one client per cohort is the slowest."""

    def __init__(self):
        pass

    def profiles(self, num_clients, seed):
        return DeviceProfiles(0.001 * (1 + np.arange(num_clients)), np.full(num_clients, 100e3),
                              np.full(num_clients, 50e3))


def test_bytes_and_seconds_are_exact_for_dense_fedavg(simulate):
    sim, res = simulate(TINY)
    dim = 60 * 10 + 10
    for row in res.rounds:
        # dense FedAvg changes every coordinate, so every selected client downloads and uploads the full model
        assert row["bytes_down"] == 4 * dim * 4 and row["bytes_up"] == 4 * dim * 4
        assert row["coords_changed"] == dim
        # every client runs 4 steps of 10 samples (all synthetic clients hold ≥ 45 training rows)
        per_client = 4 * dim / 100e3 + 40 * 0.01 + 4 * dim / 50e3
        assert row["round_duration_s"] == pytest.approx(per_client)
        assert row["resource_s"] == pytest.approx(4 * per_client)
        assert row["wasted_s"] == 0.0 and row["n_aggregated"] == 4 == row["n_selected"]
    assert res.rounds[-1]["sim_time_s"] == pytest.approx(3 * per_client)
    pop = sim.population
    assert pop.times_selected.sum() == 12 and pop.times_aggregated.sum() == 12
    assert pop.bytes_down.sum() == sum(r["bytes_down"] for r in res.rounds)
    picked = np.flatnonzero(pop.times_selected)
    assert (pop.last_round[picked] >= 0).all() and (pop.last_round[pop.times_selected == 0] == -1).all()


def test_full_participation_fedavg_equals_manual_weighted_average(simulate):
    raw = {**TINY, "rounds": 1, "selector": {"name": "uniform", "clients_per_round": 12}}
    sim, res = simulate(raw)
    exp = sim.exp
    # redo round 0 by hand: every client trains from the initial model, average weighted by n_k
    from turnout.core import rng
    from turnout.sim.engine import build_model
    from turnout.training.local_sgd import LocalTrainer

    fm = build_model(exp, sim.data, 0)
    start = fm.flat_params()
    trainer = LocalTrainer(fm, exp.train)
    deltas, weights = [], []
    for c in range(12):
        x, y = sim.data.client_train(c)
        out = trainer.train(start, {}, x, y, 4, 0.05, rng.stream(0, "batches", 0, c))
        deltas.append(out.params - start)
        weights.append(len(y))
    w = torch.tensor(weights, dtype=torch.float32) / sum(weights)
    torch.testing.assert_close(sim.params, start + w @ torch.stack(deltas), rtol=1e-5, atol=1e-6)


def test_reports_weighting_and_server_momentum():
    ups = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    rel = Reports(np.array([3, 5]), ups, np.array([1.0, 3.0]), True, np.array([1, 3]), np.zeros(2), np.zeros(2, int))
    torch.testing.assert_close(rel.weighted_mean(), torch.tensor([0.25, 1.5]))
    absolute = Reports(np.array([3, 5]), ups, np.array([2.0, 0.5]), False, np.array([1, 3]), np.zeros(2),
                       np.zeros(2, int))
    torch.testing.assert_close(absolute.weighted_mean(), torch.tensor([2.0, 1.0]))
    empty = Reports(np.zeros(0, int), torch.zeros((0, 2)), np.zeros(0), True, np.zeros(0), np.zeros(0), np.zeros(0))
    assert empty.weighted_mean().tolist() == [0.0, 0.0]

    algo = FedAvg(FedAvgConfig(server_lr=0.5, server_momentum=0.9), ctx=None)
    x = torch.zeros(2)
    x = algo.aggregate(0, x, rel)  # m = u
    x = algo.aggregate(1, x, rel)  # m = 0.9 u + u
    torch.testing.assert_close(x, 0.5 * (1 + 1.9) * torch.tensor([0.25, 1.5]))


def test_unbiased_weighting_is_not_renormalised(simulate):
    raw = {**TINY, "rounds": 1, "selector": {"name": "uniform", "clients_per_round": 4, "weighting": "unbiased"}}
    sim, _ = simulate(raw)
    from turnout.core import rng
    from turnout.core.records import SelectionContext

    cohort = sim.selector.select(SelectionContext(0, 0.0, np.arange(12), 4, rng.stream(0, "selection", 0), sim.world,
                                                  sim.availability, probe_loss=None))
    assert not cohort.normalize
    p = sim.data.n_train[cohort.clients] / sim.data.n_train.sum()
    np.testing.assert_allclose(cohort.weights, p * 12 / 4)


def test_full_participation_has_zero_delay_and_partial_participation_does_not(simulate):
    raw = {**TINY, "rounds": 4, "selector": {"name": "uniform", "clients_per_round": 12}}
    _, res = simulate(raw)
    assert [r["tau"] for r in res.rounds] == [0, 0, 0, 0]
    assert res.summary["tau_max"] == 0 and res.summary["selection_count_var"] == 0.0
    _, res = simulate({**TINY, "rounds": 4})
    taus = [r["tau"] for r in res.rounds]
    # with 4 of 12 per round, somebody has not participated yet after round 0: τ(0) = 0 − (−1) = 1
    assert taus[0] == 1 and all(t >= 1 for t in taus)
    assert res.summary["tau_max"] == max(taus) and res.summary["tau_avg"] == pytest.approx(np.mean(taus))


class CutSlowest(RoundMode):
    """Cuts the slowest client of every round: its report arrives late."""

    def __init__(self):
        pass

    def close(self, finish, dropped, target):
        late = np.zeros(len(finish), bool)
        late[np.argmax(finish)] = True
        return RoundClose(aggregated=~late, late=late, duration_s=float(np.sort(finish)[-2]), busy_s=finish)


class StaleFedAvg(FedAvg):
    """FedAvg that aggregates late reports up to 5 rounds old."""

    max_staleness = 5  # a shipped rule's config says this (LateReportsOption)


def test_late_reports_are_parked_then_aggregated_or_wasted(build_simulation):
    """A client cut by the round mode keeps computing; on arrival its work is used or wasted."""
    for uses_stale in (False, True):
        algo = StaleFedAvg if uses_stale else FedAvg
        sim = build_simulation({**TINY, "rounds": 3}, components={
            "round_mode": CutSlowest(), "devices": StepDevices(),  # one client per round is the slowest
            "algorithm": lambda ctx, algo=algo: algo(FedAvgConfig(), ctx.algorithm_context)})
        res = sim.run()
        rows = res.rounds
        assert [r["n_late"] for r in rows] == [1, 1, 1]
        # a late report needs more than the round's duration, so it arrives in a later round
        assert rows[0]["n_stale"] + rows[0]["n_stale_dropped"] == 0
        used = sum(r["n_stale"] for r in rows)
        dropped = sum(r["n_stale_dropped"] for r in rows)
        if uses_stale:
            assert used >= 1 and dropped == 0
            assert res.summary["late_unused_s"] > 0  # the last round's late report never arrives
        else:
            assert used == 0 and dropped >= 1
        total_wasted = sim.population.wasted_s.sum()
        assert total_wasted == pytest.approx(sum(r["wasted_s"] for r in rows) + res.summary["late_unused_s"])


def test_cyclic_availability_through_the_engine_gives_closed_form_delay(simulate):
    """FedSUM Case 3: blocks of m = 3 of n = 12 in turn, everyone available selected ⇒ τ_max = n/m − 1."""
    raw = {**TINY, "rounds": 10, "availability": {"name": "cyclic", "m": 3},
           "selector": {"name": "uniform", "clients_per_round": 3}}
    sim, res = simulate(raw)
    assert [r["n_available"] for r in res.rounds] == [3] * 10
    assert [r["tau"] for r in res.rounds] == [1, 2, 3, 3, 3, 3, 3, 3, 3, 3]
    assert res.summary["tau_max"] == 12 / 3 - 1
    # each client is selected every 4 rounds exactly
    cols = res.clients
    assert set(cols["reselect_gap_mean"][cols["times_selected"] > 1].tolist()) == {4.0}


class NobodyInRoundOne(AlwaysAvailable):
    def available(self, r, t):
        return np.zeros(12, bool) if r == 1 else np.ones(12, bool)


def test_round_with_nobody_available_is_empty_and_advances_the_clock(build_simulation):
    sim = build_simulation({**TINY, "rounds": 3},
                           components={"availability": lambda ctx: NobodyInRoundOne(None, ctx.world)})
    res = sim.run()
    empty = res.rounds[1]
    assert empty["n_available"] == 0 and empty["n_selected"] == 0 and empty["n_aggregated"] == 0
    assert empty["round_duration_s"] == sim.round_mode.empty_round_s and empty["bytes_down"] == 0
    assert empty["coords_changed"] == 0  # FedAvg with no reports leaves the model where it was
    assert res.rounds[2]["n_selected"] == 4 and np.isfinite(res.rounds[2]["loss"])


class PoisonedFedAvg(FedAvg):
    """The first report is NaN, the second has the wrong shape, the rest are honest."""

    calls = 0

    def client_update(self, client, start, end, **kw):
        self.calls += 1
        if self.calls == 1:
            return torch.full_like(start, float("nan"))
        if self.calls == 2:
            return (end - start)[:-3]  # wrong shape
        return super().client_update(client, start, end, **kw)


def test_non_finite_or_misshapen_reports_are_rejected_and_model_stays_finite(build_simulation):
    sim = build_simulation({**TINY, "rounds": 2},
                           components={"algorithm": lambda ctx: PoisonedFedAvg(FedAvgConfig(), ctx.algorithm_context)})
    res = sim.run()
    assert res.rounds[0]["n_rejected"] == 2 and res.rounds[0]["n_aggregated"] == 2
    assert res.rounds[1]["n_rejected"] == 0
    assert torch.isfinite(sim.params).all() and np.isfinite(res.rounds[-1]["loss"])
    assert res.rounds[0]["wasted_s"] > 0  # the rejected clients' work never reached the model


def test_download_time_is_the_critical_clients_download(simulate):
    """GlueFL's DT: per round, the download seconds of the last on-time report; summed to the target."""
    from turnout.core.metrics import cumulate, summarize
    sim, res = simulate(TINY)
    cumulate(res.rounds)  # what the experiment runner does before writing rounds.csv
    dim = 60 * 10 + 10
    for row in res.rounds:  # homogeneous devices, dense model: every client downloads 4·dim bytes at 100 kB/s
        assert row["download_s"] == pytest.approx(4 * dim / 100e3)
        assert row["cum_download_s"] == pytest.approx((row["round"] + 1) * 4 * dim / 100e3)
    s = summarize(res.variant, res.seed, res.rounds, res.summary, target=0.0)
    assert s["download_time_to_target_s"] == pytest.approx(4 * dim / 100e3)
    assert s["download_time_s"] == pytest.approx(3 * 4 * dim / 100e3)


def test_critical_path_splits_into_download_compute_and_upload(simulate):
    """GlueFL Fig. 9: the critical client's download + compute + upload seconds make up the wait_all round."""
    from turnout.core.metrics import cumulate, summarize
    sim, res = simulate(TINY)
    cumulate(res.rounds)
    dim = 60 * 10 + 10
    for row in res.rounds:  # homogeneous devices: 40 samples at 10 ms, 4·dim bytes up at 50 kB/s
        assert row["compute_s"] == pytest.approx(4 * 10 * 0.01)
        assert row["upload_s"] == pytest.approx(4 * dim / 50e3)
        assert row["download_s"] + row["compute_s"] + row["upload_s"] == pytest.approx(row["round_duration_s"])
        assert row["cum_upload_s"] == pytest.approx((row["round"] + 1) * 4 * dim / 50e3)
    s = summarize(res.variant, res.seed, res.rounds, res.summary, target=None)
    total = s["download_time_s"] + s["compute_time_s"] + s["upload_time_s"]
    assert s["compute_time_s"] == pytest.approx(3 * 0.4)
    assert s["download_share"] == pytest.approx(s["download_time_s"] / total)
    assert s["download_share"] + s["compute_share"] + s["upload_share"] == pytest.approx(1.0)
    assert s["upload_share"] == pytest.approx(2 * s["download_share"])  # same bytes, half the bandwidth


def test_critical_path_is_empty_when_nothing_is_aggregated():
    from turnout.core.metrics import critical_path_s, time_shares
    none = np.zeros(3, dtype=bool)
    assert critical_path_s(np.ones(3), np.ones(3), np.ones(3), np.arange(3.0), none) == (0.0, 0.0, 0.0)
    assert all(np.isnan(time_shares(0.0, 0.0, 0.0)))
    agg = np.array([True, True, False])  # the last on-time report is client 1, not the slower straggler 2
    assert critical_path_s(np.array([1., 2, 3]), np.array([4., 5, 6]), np.array([7., 8, 9]),
                           np.array([12., 15, 18]), agg) == (2.0, 5.0, 8.0)


def test_finite_rows_agrees_with_isfinite_including_sums_that_overflow():
    """The fast per-row finiteness check gives isfinite(x).all(1) exactly, also where a finite row's sum overflows."""
    import numpy as np
    import torch

    from turnout.sim.engine import finite_rows

    big = torch.finfo(torch.float32).max
    x = torch.tensor([[1.0, 2.0, 3.0],
                      [float("nan"), 0.0, 0.0],
                      [float("inf"), 1.0, 0.0],
                      [float("-inf"), float("inf"), 0.0],
                      [big, big, 0.0],  # finite, but the sum overflows to inf
                      [-big, -big, big],
                      [0.0, -0.0, 1e-45]])
    assert x[4].sum().isinf()
    want = torch.isfinite(x).all(dim=1).numpy()
    assert finite_rows(x).tolist() == want.tolist() == [True, False, False, False, True, True, True]
    rng = np.random.default_rng(0)
    y = torch.from_numpy(rng.standard_normal((50, 1000)).astype(np.float32))
    y[rng.integers(0, 50, 7), rng.integers(0, 1000, 7)] = float("nan")
    assert np.array_equal(finite_rows(y), torch.isfinite(y).all(dim=1).numpy())
    assert finite_rows(torch.empty(3, 0)).tolist() == [True] * 3
