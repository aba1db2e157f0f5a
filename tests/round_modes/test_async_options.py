"""Asynchronous rounds: FedScale's max_staleness (a stale report does not count towards K), unbiased weights refused
under FedBuff, FedAsync's regularised client objective — each against a schedule or closed form worked by hand."""

from __future__ import annotations

import copy

import pytest
import torch
from test_busy_devices import run_world

from turnout.core.errors import ConfigError
from turnout.sim.composition import expand

# Two clients always online, tasks of 1 s (client 0) and 3 s (client 1), both in flight (C = 2), FedBuff with K = 1.
ALWAYS = [[(0.0, 1000.0)], [(0.0, 1000.0)]]


def test_a_report_too_stale_is_dropped_and_the_round_waits_for_k_usable_ones():
    """max_staleness 0, lowest-numbered free clients first.
    t = 0: launch 0 (→ 1) and 1 (→ 3), version 0;  update 1 at t = 1 (client 0, τ 0).
    t = 1: launch 0 (→ 2);  update 2 at t = 2 (client 0, τ 0).
    t = 2: launch 0 (→ 3). At t = 3 two reports arrive: client 1's (version 0, τ 2, launched first) and client 0's
    (version 2, τ 0). Client 1's is too stale: dropped on arrival, its 3 s wasted, and it does not count — update 3
    at t = 3 takes client 0's.  (Counting it would spend update 3 on nothing and leave client 0's report, then
    τ 1, to be dropped at update 4.)
    t = 3: both free: launch 0 (→ 4) and 1 (→ 6);  update 4 at t = 4 (client 0, τ 0)."""
    sim, rows, _ = run_world({"name": "async", "buffer": 1}, ALWAYS, [0.1, 0.3], c=2, rounds=4,
                             algorithm={"name": "fedbuff", "max_staleness": 0}, lowest_first=True)
    assert [r["sim_time_s"] for r in rows] == pytest.approx([1.0, 2.0, 3.0, 4.0])
    assert [r["n_aggregated"] for r in rows] == [1, 1, 1, 1]
    assert [r["n_stale_dropped"] for r in rows] == [0, 0, 1, 0]
    assert [r["n_arrived"] for r in rows] == [1, 1, 2, 1]
    assert [r["staleness_max"] for r in rows] == [0, 0, 0, 0]
    assert sim.population.wasted_s.tolist() == pytest.approx([0.0, 3.0])
    assert sim.population.times_aggregated.tolist() == [4, 0]


def test_without_a_bound_the_same_schedule_aggregates_the_stale_report():
    """No max_staleness: update 3 at t = 3 takes client 1's report (τ 2, launched first); client 0's (τ 0) closes
    update 4 at t = 3 too."""
    _, rows, _ = run_world({"name": "async", "buffer": 1}, ALWAYS, [0.1, 0.3], c=2, rounds=4,
                           algorithm="fedbuff", lowest_first=True)
    assert [r["sim_time_s"] for r in rows] == pytest.approx([1.0, 2.0, 3.0, 3.0])
    assert [r["staleness_max"] for r in rows] == [0, 0, 2, 1]  # client 0's report waited one update
    assert [r["n_stale_dropped"] for r in rows] == [0, 0, 0, 0]


# ---- unbiased weights under FedBuff ---------------------------------------------------------------------------
BASE = {"name": "async", "seeds": [0], "rounds": 4,
        "data": {"name": "synthetic", "num_clients": 12, "alpha": 0.5, "beta": 0.5},
        "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 3, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": 4},
        "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
        "eval": {"every": 1}, "output": {"progress": False, "plots": False}}


def config(**blocks) -> dict:
    raw = copy.deepcopy(BASE)
    raw.update(copy.deepcopy(blocks))
    return raw


def test_unbiased_weights_are_refused_when_an_update_averages_fewer_reports_than_are_in_flight():
    """uniform/unbiased gives each report N·p_i/C = 12·p_i/4: a buffer of K = 2 would step by 2/4 of FedAvg's."""
    raw = config(selector={"name": "uniform", "clients_per_round": 4, "weighting": "unbiased"},
                 algorithm={"name": "fedbuff"}, round_mode={"name": "async", "buffer": 2})
    with pytest.raises(ConfigError) as e:
        expand(raw)
    assert e.value.key == "selector.weighting" and "N·p_i/4" in str(e.value) and "buffer = 2" in str(e.value)
    expand(config(selector={"name": "uniform", "clients_per_round": 4, "weighting": "n_samples"},
                  algorithm={"name": "fedbuff"}, round_mode={"name": "async", "buffer": 2}))  # relative: accepted


def test_unbiased_weights_with_k_equal_to_c_and_equal_durations_are_fedavg_bit_for_bit(simulate):
    """K = C = 4, every client equally fast: each update averages one whole cohort, Σ N·p_i/4 · Δ_i as FedAvg's."""
    sel = {"name": "uniform", "clients_per_round": 4, "weighting": "unbiased"}
    sync_sim, _ = simulate(config(selector=sel, algorithm={"name": "fedavg"}))
    async_sim, _ = simulate(config(selector=sel, algorithm={"name": "fedbuff"}, round_mode={"name": "async",
                                                                                             "buffer": 4}))
    assert torch.equal(sync_sim.params, async_sim.params)


# ---- FedAsync's regularised client objective -------------------------------------------------------------------
def test_fedasync_rho_is_fedprox_mu_when_the_server_takes_each_client_model_in_turn(simulate):
    """α = 1, C = 1, constant s: the server's model becomes each client's, trained on f_i(x) + (ρ/2)‖x − x_τ‖²
    from the model it downloaded — FedProx with μ = ρ and one client a round, bit for bit."""
    one = {"name": "uniform", "clients_per_round": 1}
    prox_sim, _ = simulate(config(selector=one, algorithm={"name": "fedprox", "mu": 0.5}))
    fa = {"name": "fedasync", "alpha": 1.0, "staleness": {"rule": "constant"}}
    rho_sim, _ = simulate(config(selector=one, algorithm={**fa, "rho": 0.5}, round_mode={"name": "async"}))
    plain_sim, _ = simulate(config(selector=one, algorithm=fa, round_mode={"name": "async"}))
    assert torch.equal(prox_sim.params, rho_sim.params)
    assert not torch.equal(rho_sim.params, plain_sim.params)  # the term changes local training

