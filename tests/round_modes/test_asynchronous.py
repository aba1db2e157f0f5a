"""Asynchronous rounds (FedAsync, FedBuff) in the one round loop: closed forms, a hand-made schedule, lost clients."""

from __future__ import annotations

import copy
import heapq

import numpy as np
import pytest
import torch

from turnout.availability.always import AlwaysAvailable
from turnout.devices.base import DeviceModel
from turnout.round_modes.asynchronous import Asynchronous, AsynchronousConfig
from turnout.world.population import DeviceProfiles

BASE = {"name": "async", "seeds": [0], "rounds": 5,
        "data": {"name": "synthetic", "num_clients": 12, "alpha": 0.5, "beta": 0.5},
        "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 3, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": 4},
        "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
        "eval": {"every": 1}, "output": {"progress": False, "plots": False}}


def config(**blocks) -> dict:
    raw = copy.deepcopy(BASE)
    for key, value in blocks.items():
        if key == "clients_per_round":
            raw["selector"]["clients_per_round"] = value
        else:
            raw[key] = value
    return raw


def rows_without(rows, *columns):
    return [{k: v for k, v in r.items() if k not in columns} for r in rows]


class SpeedDevices(DeviceModel):
    """Client i computes at ``per_sample[i]`` seconds a sample; links so fast that bytes cost next to nothing."""

    def __init__(self, per_sample):
        self.per_sample = np.asarray(per_sample, np.float64)

    def profiles(self, num_clients, seed):
        return DeviceProfiles(self.per_sample[:num_clients], np.full(num_clients, 1e15), np.full(num_clients, 1e15))


# ---- the round mode on its own ------------------------------------------------------------------------------
def test_the_round_closes_at_the_kth_arrival_of_old_and_new_reports():
    mode = Asynchronous(AsynchronousConfig(buffer=2))
    finish, dropped = np.array([3.0, 1.0, 5.0]), np.array([np.inf, np.inf, 2.0])  # the third goes offline at 2
    close = mode.close_in_flight(finish, dropped, 3, in_flight_s=np.array([2.5, 0.5]))
    assert close.duration_s == 1.0  # arrivals 0.5 (old), 1.0 (new): the second closes the round
    assert close.late.tolist() == [True, True, False] and not close.aggregated.any()
    assert close.busy_s.tolist() == [3.0, 1.0, 2.0]  # the lost client worked until it went offline
    assert mode.launch(4, in_flight=3) == 1 and mode.launch(4, in_flight=4) == 0
    # fewer than K can still arrive: the round waits for the last arrival or loss
    assert mode.close_in_flight(np.array([4.0]), np.array([1.5]), 1, np.zeros(0)).duration_s == 1.5
    assert Asynchronous(AsynchronousConfig(buffer=3)).close_in_flight(
        np.array([4.0]), np.array([np.inf]), 1, np.array([0.5])).duration_s == 4.0


# ---- closed forms ------------------------------------------------------------------------------------------------
def test_fedbuff_with_equal_durations_and_c_equal_to_k_is_synchronous_fedavg_bit_for_bit(simulate):
    sync_sim, sync = simulate(config(algorithm={"name": "fedavg", "server_momentum": 0.5}))
    async_sim, asyn = simulate(config(algorithm={"name": "fedbuff", "server_momentum": 0.5},
                                      round_mode={"name": "async", "buffer": 4}))
    assert torch.equal(sync_sim.params, async_sim.params)
    assert [r["staleness_max"] for r in asyn.rounds] == [0] * 5  # every report arrives in its own round
    assert [r["n_aggregated"] for r in asyn.rounds] == [4] * 5
    differ = ("train_loss", "n_late", "download_s", "compute_s", "upload_s")  # what an async row says otherwise
    async_only = {"n_arrived", "n_in_flight", "staleness_mean", "staleness_max", "staleness_weight_mean",
                  *(c for c in asyn.rounds[0] if c.startswith("staleness_"))}
    assert rows_without(sync.rounds, *differ) == rows_without(asyn.rounds, *differ, *async_only)
    assert [r["n_late"] for r in asyn.rounds] == [4] * 5  # launched clients go in flight, then arrive


def test_fedasync_with_alpha_one_and_one_client_in_flight_trains_the_clients_one_after_another(simulate):
    seq_sim, seq = simulate(config(clients_per_round=1, algorithm={"name": "fedavg"}))
    fa_sim, fa = simulate(config(clients_per_round=1, round_mode={"name": "async"},
                                 algorithm={"name": "fedasync", "alpha": 1.0, "staleness": {"rule": "constant"}}))
    assert torch.equal(seq_sim.params, fa_sim.params)  # x ← x_client, each client starting where the last ended
    assert [r["accuracy"] for r in seq.rounds] == [r["accuracy"] for r in fa.rounds]
    assert [r["sim_time_s"] for r in seq.rounds] == [r["sim_time_s"] for r in fa.rounds]


def test_fedasync_mixes_the_client_model_built_on_the_version_it_downloaded():
    from turnout.algorithms.base import AlgorithmContext, Reports
    from turnout.algorithms.fedasync import FedAsync, FedAsyncConfig

    algo = FedAsync(FedAsyncConfig(alpha=0.5, staleness={"rule": "polynomial", "a": 1.0}),
                    AlgorithmContext(2, 3, np.ones(2), 0, 9))
    x = torch.tensor([1.0, 1.0, 1.0])
    origin = torch.tensor([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0]])
    delta = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    reports = Reports(np.array([0, 1]), delta, np.ones(2), True, np.ones(2, np.int64), np.zeros(2), np.array([1, 0]),
                      origin_models=origin)
    # τ = 1: α = 0.5 / 2 = 0.25 → 0.75·1 + 0.25·(0 + Δ); then τ = 0: α = 0.5 → 0.5·x + 0.5·(2 + 1)
    first = 0.75 * x + 0.25 * torch.tensor([1.0, 2.0, 3.0])
    assert torch.allclose(algo.aggregate(3, x, reports), 0.5 * first + 0.5 * torch.tensor([3.0, 3.0, 3.0]))


def test_fedbuff_weights_stale_deltas_by_s_tau_without_renormalising():
    from turnout.algorithms.base import AlgorithmContext, Reports
    from turnout.algorithms.fedbuff import FedBuff, FedBuffConfig

    algo = FedBuff(FedBuffConfig(staleness={"rule": "polynomial", "a": 0.5}), AlgorithmContext(2, 2, np.ones(2), 0, 9))
    delta = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    reports = Reports(np.array([0, 1]), delta, np.ones(2), True, np.ones(2, np.int64), np.zeros(2), np.array([0, 3]))
    new = algo.aggregate(0, torch.zeros(2, dtype=torch.float64), reports)
    assert new.tolist() == pytest.approx([0.5, 0.5 / 2.0])  # (1/K)·(1·Δ_0 + (1+3)^−½·Δ_1)


# ---- a hand-made schedule ------------------------------------------------------------------------------------------
def reference_schedule(durations, concurrency, buffer, updates):
    """An independent event simulation of C slots and a buffer of K on an always-available population of C clients:
    (staleness of each update's reports, the update's time)."""
    heap, order = [], 0
    for c in range(concurrency):  # round 0 launches everyone at t = 0 from version 0
        heapq.heappush(heap, (durations[c], order, c, 0))
        order += 1
    out, t = [], 0.0
    for version in range(updates):
        taken = [heapq.heappop(heap) for _ in range(buffer)]
        t = taken[-1][0]
        out.append(([version - origin for _, _, _, origin in taken], t))
        for _, _, c, _ in sorted(taken, key=lambda e: e[2]):  # the free clients relaunch from the new version
            heapq.heappush(heap, (t + durations[c], order, c, version + 1))
            order += 1
    return out


@pytest.mark.parametrize("buffer", [1, 2])
def test_staleness_and_times_follow_a_hand_made_schedule(buffer, build_simulation):
    per_sample = np.array([0.010, 0.023, 0.037])  # 30 samples a client: 0.3, 0.69 and 1.11 s
    raw = config(clients_per_round=3, rounds=8, round_mode={"name": "async", "buffer": buffer},
                 algorithm={"name": "fedbuff"}, data={"name": "synthetic", "num_clients": 3})
    raw["rounds"] = 8
    sim = build_simulation(raw, components={"devices": SpeedDevices(per_sample),
                                            "availability": lambda ctx: AlwaysAvailable(None, ctx.world)})
    rows = sim.run().rounds
    durations = [float(sim.pricer.delivery_s(np.array([c]), np.array([0]), np.array([30]), np.array([0]))[0])
                 for c in range(3)]
    want = reference_schedule(durations, 3, buffer, 8)
    for row, (tau, t) in zip(rows, want):
        assert row["staleness_mean"] == pytest.approx(np.mean(tau)) and row["staleness_max"] == max(tau)
        assert row["sim_time_s"] == pytest.approx(t, rel=1e-9)
        assert row["n_aggregated"] == buffer and row["n_in_flight"] == 3 - buffer
    assert sum(r["staleness_1"] for r in rows) == sum(np.count_nonzero(np.array(tau) == 1) for tau, _ in want)


# ---- a client lost while it trains ---------------------------------------------------------------------------------
class LoseClientZeroOnce(AlwaysAvailable):
    """Everyone is always online, except that client 0 goes offline 0.1 s into its first launch (and then is back)."""

    state_attrs = ("lost",)

    def __init__(self, cfg, world):
        super().__init__(cfg, world)
        self.lost = False

    def online_until(self, clients, round, time_s):
        until = np.full(len(clients), np.inf)
        if not self.lost and 0 in clients.tolist():
            until[clients.tolist().index(0)] = time_s + 0.1
            self.lost = True
        return until


def test_a_client_lost_while_training_is_wasted_not_aggregated(build_simulation):
    raw = config(clients_per_round=3, round_mode={"name": "async"}, algorithm={"name": "fedasync"},
                 data={"name": "synthetic", "num_clients": 3})
    sim = build_simulation(raw, components={"devices": SpeedDevices(np.array([0.010, 0.023, 0.037])),
                                            "availability": lambda ctx: LoseClientZeroOnce(None, ctx.world)})
    rows = sim.advance()  # not finished: reports still in flight at the end would be wasted too
    pop = sim.population
    assert rows[0]["n_dropped"] == 1 and rows[0]["wasted_s"] == pytest.approx(0.1)
    assert pop.wasted_s[0] == pytest.approx(0.1)  # its seconds until it went offline, for nothing
    # its first launch never arrives: every later launch has arrived or is still in flight
    assert pop.times_aggregated[0] + int(0 in sim.late.clients) == pop.times_selected[0] - 1
    assert pop.resource_s.sum() == pytest.approx(sum(r["resource_s"] for r in rows))


# ---- bookkeeping that must not grow -------------------------------------------------------------------------------
def test_only_the_versions_in_flight_are_kept(build_simulation):
    sim = build_simulation(config(clients_per_round=4, rounds=8, round_mode={"name": "async"},
                                  algorithm={"name": "fedasync"}, devices={"name": "flash"}))
    held = []
    for r in range(8):
        sim.advance(until=r + 1)
        held.append(len(sim.late.models))
        assert set(sim.late.models) == set(sim.late.origin_round.tolist())
    assert max(held) <= 4 and max(held) >= 2  # heterogeneous devices: reports from several versions in flight
    sim.finish()
    assert len(sim.late.models) == 0


def test_parked_reports_of_one_round_share_one_copy_of_their_origin_model(build_simulation):
    sim = build_simulation(config(clients_per_round=4, rounds=8, round_mode={"name": "async"},
                                  algorithm={"name": "fedasync"}, devices={"name": "flash"}))
    sim.advance(until=3)
    origins = sim.late.origin_round.copy()
    before = sim.params.clone()
    left = sim.late.pop_all()
    assert len(left) == len(origins) >= 2
    for i in range(len(left)):
        for j in range(len(left)):
            same_round = left.origin_round[i] == left.origin_round[j]
            assert (left.origin_models[i] is left.origin_models[j]) == bool(same_round)
    assert torch.equal(sim.params, before) and sim.late.models == {}  # forgotten once no parked report holds them


def test_a_checkpoint_that_held_the_versions_apart_resumes_exactly(build_simulation):
    """Checkpoints written before parked reports carried their origin model held them in a top-level ``versions``."""
    raw = config(clients_per_round=4, rounds=8, round_mode={"name": "async"}, algorithm={"name": "fedasync"},
                 devices={"name": "flash"})
    whole = build_simulation(raw)
    rows = whole.advance()
    first = build_simulation(raw)
    first.advance(until=4)
    state = first.state_dict()
    assert state["late"]["models"]  # versions are held at the checkpoint
    late = {k: v for k, v in state["late"].items() if k != "models"}
    old = {**{k: v for k, v in state.items() if k != "late"}, "late": late,
           "versions": {"models": state["late"]["models"]}}
    resumed = build_simulation(raw)
    resumed.load_state_dict(old)
    assert set(resumed.late.models) == set(state["late"]["models"])
    assert repr(resumed.advance()) == repr(rows[4:])  # every float exactly (NaN columns included)
    assert torch.equal(resumed.params, whole.params)


def test_max_staleness_drops_older_reports_as_waste(simulate):
    raw = config(clients_per_round=4, rounds=8, round_mode={"name": "async"}, devices={"name": "flash"})
    _, kept = simulate({**raw, "algorithm": {"name": "fedbuff"}})
    _, bounded = simulate({**raw, "algorithm": {"name": "fedbuff", "max_staleness": 0}})
    assert sum(r["n_stale_dropped"] for r in bounded.rounds) > 0
    assert max(r["staleness_max"] for r in bounded.rounds) == 0
    assert sum(r["wasted_s"] for r in bounded.rounds) > sum(r["wasted_s"] for r in kept.rounds)


def test_executors_give_the_same_asynchronous_run(simulate):
    raw = config(clients_per_round=4, rounds=6, round_mode={"name": "async", "buffer": 2},
                 algorithm={"name": "fedbuff"}, devices={"name": "flash"})
    _, seq = simulate(raw)
    _, par = simulate({**raw, "executor": {"name": "parallel", "workers": 2}})
    assert repr(seq.rounds) == repr(par.rounds)  # the parallel executor is bitwise sequential
    _, vec = simulate({**raw, "executor": {"name": "vectorized"}})  # equal up to float tolerance
    for a, b in zip(seq.rounds, vec.rounds, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-5, nan_ok=True), k


def test_a_selector_learns_a_report_when_it_arrives_not_when_its_client_starts(build_simulation):
    sim = build_simulation(config(clients_per_round=4, rounds=6, round_mode={"name": "async"},
                                  algorithm={"name": "fedbuff"}, devices={"name": "flash"},
                                  selector={"name": "oort", "clients_per_round": 4}))
    sim.advance(until=2)
    oort, pop = sim.selector, sim.population
    arrived = pop.times_aggregated > 0
    assert arrived.any() and (oort.reward[arrived] > 0).all()  # utilities measured from delivered reports
    waiting = np.setdiff1d(sim.late.clients, np.flatnonzero(arrived))  # in flight, nothing delivered yet
    assert len(waiting) and not oort.explored[waiting].any()
