"""FedBuff's Algorithm 1 (``round_mode.refill: arrival``): the first K − 1 arrivals of a round refill the free slots, so
C clients are in flight after every event; against a schedule worked by hand, the concurrency, the byte and second
ledgers, K = 1, the refusals, the minibatch streams of a client launched twice in a round and exact resume."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_busy_devices import LOSE_ZERO, PER_SAMPLE, Seconds, Sessions, run_world, violations

from turnout.core import rng as rngmod
from turnout.core.errors import ConfigError
from turnout.core.records import ClientBatch
from turnout.sim.composition import expand

# Four clients always online whose tasks take 1, 2.4, 7 and 4 s (10 samples at 0.1, 0.24, 0.7, 0.4 s); FedBuff with
# K = 2 and C = 3; the lowest-numbered free clients are launched.
ALWAYS4 = [[(0.0, 1000.0)]] * 4
SPEEDS = [0.1, 0.24, 0.7, 0.4]


def fedbuff(refill: str, rounds: int = 3, **kw):
    sim, rows, tasks = run_world({"name": "async", "buffer": 2, "refill": refill}, kw.pop("sessions", ALWAYS4),
                                 kw.pop("per_sample", SPEEDS), c=kw.pop("c", 3), rounds=rounds, algorithm="fedbuff",
                                 lowest_first=kw.pop("lowest_first", True), **kw)
    return sim, rows, sorted((c, round(s, 9), round(e, 9)) for c, s, e in tasks)  # links cost ~1e-13 s


def test_refill_at_update_follows_the_documented_schedule():
    """refill: update (the default).
    t = 0: launch 0 (→ 1), 1 (→ 2.4), 2 (→ 7);  update 1 at 2.4 (0 and 1, τ 0). Client 0 idles from 1 to 2.4.
    t = 2.4: 2 in flight → launch 0 (→ 3.4), 1 (→ 4.8);  update 2 at 4.8 (0, 1, τ 0).
    t = 4.8: launch 0 (→ 5.8), 1 (→ 7.2);  update 3 at 7 (0 τ 0, then 2 from version 0: τ 2)."""
    sim, rows, tasks = fedbuff("update")
    assert [r["sim_time_s"] for r in rows] == pytest.approx([2.4, 4.8, 7.0])
    assert [r["staleness_max"] for r in rows] == [0, 0, 2]
    assert [r["n_selected"] for r in rows] == [3, 2, 2] and "n_refilled" not in rows[0]
    assert tasks == [(0, 0.0, 1.0), (0, 2.4, 3.4), (0, 4.8, 5.8), (1, 0.0, 2.4), (1, 2.4, 4.8), (1, 4.8, 7.2),
                     (2, 0.0, 7.0)]
    assert sim.population.resource_s.tolist() == pytest.approx([3.0, 7.2, 7.0, 0.0])


def test_refill_at_arrival_launches_at_each_arrival_from_the_same_version():
    """refill: arrival. Only the first arrival of a round (K − 1 = 1) refills; the K-th makes the update.
    t = 0: launch 0 (→ 1), 1 (→ 2.4), 2 (→ 7). At 1, 0 arrives: 1 and 2 are busy, one slot free → launch 0 again
      (→ 2), from version 0. The 2nd arrival is 0's second report, at 2: update 1 at 2 (0 twice, both τ 0).
    t = 2: 1 (→ 2.4) and 2 in flight → launch 0 (→ 3). At 2.4, 1 arrives (version 0): 0 and 2 busy → launch 1
      (→ 4.8). Update 2 at 3: 1 (τ 1) and 0 (τ 0).
    t = 3: 1 (→ 4.8) and 2 in flight → launch 0 (→ 4). At 4, 0 arrives: launch 0 (→ 5). Update 3 at 4.8: 0 (τ 0) and
      1 (launched in round 1: τ 1). In flight after it: 0 (→ 5) and 2 (→ 7).
    Updates come at 2, 3, 4.8 instead of 2.4, 4.8, 7: no slot idles."""
    sim, rows, tasks = fedbuff("arrival")
    assert [r["sim_time_s"] for r in rows] == pytest.approx([2.0, 3.0, 4.8])
    assert [r["staleness_max"] for r in rows] == [0, 1, 1] and [r["staleness_mean"] for r in rows] == [0, 0.5, 0.5]
    assert [r["n_selected"] for r in rows] == [4, 2, 2] and [r["n_refilled"] for r in rows] == [1, 1, 1]
    assert [r["n_in_flight"] for r in rows] == [2, 2, 2]
    assert tasks == [(0, 0.0, 1.0), (0, 1.0, 2.0), (0, 2.0, 3.0), (0, 3.0, 4.0), (0, 4.0, 5.0), (1, 0.0, 2.4),
                     (1, 2.4, 4.8), (2, 0.0, 7.0)]
    assert sim.population.times_selected.tolist() == [5, 2, 1, 0]
    assert sim.population.times_aggregated.tolist() == [4, 2, 0, 0]
    assert sim.population.resource_s.tolist() == pytest.approx([5.0, 4.8, 7.0, 0.0])
    assert [r["resource_s"] for r in rows] == pytest.approx([1 + 2.4 + 7 + 1, 1 + 2.4, 1 + 1])


def test_a_client_lost_mid_task_holds_its_slot_when_slots_are_refilled_at_arrivals():
    """Clients 0, 1, 2 take 5, 2, 3 s; 0 is offline from 3.5 to 100 s. K = 2, C = 2, lowest free first.
    t = 0: launch 0 (lost at 3.5) and 1 (→ 2). At 2, 1 arrives: 0 is still computing, one slot free → launch 1
      (→ 4). The 2nd usable arrival is 1's at 4: update 1 at 4 (1 twice, τ 0); 0 went offline at 3.5, its slot is free.
    t = 4: launch 1 (→ 6) and 2 (→ 7). At 6, 1 arrives → launch 1 (→ 8). Update 2 at 7 (1, 2: τ 0)."""
    sim, rows, tasks = fedbuff("arrival", rounds=2, sessions=LOSE_ZERO, per_sample=PER_SAMPLE, c=2)
    assert [r["sim_time_s"] for r in rows] == pytest.approx([4.0, 7.0])
    assert tasks == [(0, 0.0, 3.5), (1, 0.0, 2.0), (1, 2.0, 4.0), (1, 4.0, 6.0), (1, 6.0, 8.0), (2, 4.0, 7.0)]
    assert sim.population.wasted_s.tolist() == pytest.approx([3.5, 0.0, 0.0])
    assert violations(sim, tasks, LOSE_ZERO) == []


# ---- C in flight after every event -------------------------------------------------------------------------------
def in_flight_after_each_event(tasks, until):
    """Tasks running right after each launch or arrival before ``until``: started at or before it, not yet ended."""
    events = sorted({t for _, s, e in tasks for t in (s, e) if t < until})
    return [sum(1 for _, s, e in tasks if s <= t < e) for t in events]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_enough_clients_online_exactly_c_tasks_are_in_flight_after_every_event(seed):
    """Eight clients always online with random speeds, C = 4, K = 3, uniform selection, 12 updates."""
    speeds = np.random.default_rng(seed).uniform(0.05, 0.9, 8).tolist()
    always = [[(0.0, 1e6)]] * 8
    mode = {"name": "async", "buffer": 3}
    _, rows, tasks = run_world({**mode, "refill": "arrival"}, always, speeds, c=4, rounds=12, algorithm="fedbuff",
                               seed=seed)
    counts = in_flight_after_each_event(tasks, rows[-1]["sim_time_s"])
    assert len(counts) > 20 and set(counts) == {4}
    assert sum(r["n_refilled"] for r in rows) > 0
    _, rows, tasks = run_world(mode, always, speeds, c=4, rounds=12, algorithm="fedbuff", seed=seed)
    counts = in_flight_after_each_event(tasks, rows[-1]["sim_time_s"])
    assert min(counts) == 4 - 3 + 1 and max(counts) == 4  # refilled at updates: the concurrency dips to C − K + 1


# ---- K = 1 ---------------------------------------------------------------------------------------------------------
def test_with_a_buffer_of_one_refilling_at_arrivals_is_refilling_at_updates():
    """FedAsync: every arrival is an update, so both options give the same run, table for table."""
    runs = [run_world({"name": "async", "buffer": 1, "refill": refill}, LOSE_ZERO, PER_SAMPLE, c=2, rounds=6,
                      algorithm="fedasync") for refill in ("update", "arrival")]
    (a, a_rows, a_tasks), (b, b_rows, b_tasks) = runs
    assert repr(a_rows) == repr(b_rows) and a_tasks == b_tasks
    for col, values in a.population_columns().items():
        assert np.array_equal(values, b.population_columns()[col], equal_nan=True), col
    assert torch.equal(a.params, b.params)


# ---- the ledgers ---------------------------------------------------------------------------------------------------
def test_rows_and_clients_count_the_same_launches_bytes_and_seconds(simulate):
    """Clients going offline mid-task, clients launched twice in a round: the rows' sums are clients.csv's."""
    sessions = [[(0.0, 3.5), (9.0, 1e6)], [(0.0, 1e6)], [(1.0, 6.5), (8.0, 1e6)], [(0.0, 1e6)],
                [(0.0, 2.5), (4.0, 1e6)]]
    raw = {"name": "refill", "seeds": [0], "rounds": 10,
           "data": {"name": "synthetic", "num_clients": 5, "alpha": 0.5, "beta": 0.5}, "model": {"name": "logreg"},
           "train": {"batch_size": 10, "local_steps": 1, "lr": 0.05},
           "selector": {"name": "uniform", "clients_per_round": 3},
           "round_mode": {"name": "async", "buffer": 2, "refill": "arrival"}, "algorithm": {"name": "fedbuff"},
           "eval": {"every": 10}, "output": {"progress": False, "plots": False}}
    sim, result = simulate(raw, components={"devices": Seconds([0.5, 0.2, 0.3, 0.45, 0.15]),
                                            "availability": lambda ctx: Sessions(sessions, ctx.world)})
    rows, clients = result.rounds, result.clients
    assert sum(r["n_refilled"] for r in rows) >= 5 and sum(r["n_dropped"] for r in rows) >= 1
    assert sum(r["n_selected"] for r in rows) == int(clients["times_selected"].sum())
    assert sum(r["bytes_down"] for r in rows) == int(clients["bytes_down"].sum())
    assert sum(r["bytes_up"] for r in rows) == int(clients["bytes_up"].sum())
    assert sum(r["resource_s"] for r in rows) == pytest.approx(float(clients["resource_s"].sum()), rel=1e-12)
    wasted = sum(r["wasted_s"] for r in rows) + result.summary["late_unused_s"]  # still in flight at the end
    assert wasted == pytest.approx(float(clients["wasted_s"].sum()), rel=1e-12)


# ---- what cannot take several launches a round -------------------------------------------------------------------
BASE = {"name": "refill", "seeds": [0], "rounds": 4,
        "data": {"name": "synthetic", "num_clients": 12, "alpha": 0.5, "beta": 0.5},
        "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 3, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": 4}, "algorithm": {"name": "fedbuff"},
        "round_mode": {"name": "async", "buffer": 3, "refill": "arrival"},
        "devices": {"name": "flash"}, "eval": {"every": 1}, "output": {"progress": False, "plots": False}}


def config(**blocks) -> dict:
    raw = copy.deepcopy(BASE)
    raw.update(copy.deepcopy(blocks))
    return raw


def test_a_compressor_that_keeps_the_rounds_cohort_and_privacy_are_refused():
    with pytest.raises(ConfigError) as e:
        expand(config(compressor={"name": "topk"}))
    assert e.value.key == "compressor.name" and "round_mode.refill: update" in str(e.value)
    assert "quant8" in str(e.value)  # what works instead
    expand(config(compressor={"name": "topk"}, round_mode={"name": "async", "buffer": 3}))  # refill: update
    expand(config(compressor={"name": "topk"}, round_mode={"name": "async", "buffer": 1, "refill": "arrival"}))
    expand(config(compressor={"name": "quant8"}))
    with pytest.raises(ConfigError) as e:  # an accountant of one selection a round
        expand(config(algorithm={"name": "fedavg"}, privacy={"name": "gaussian"}))
    assert e.value.key == "privacy.name" and "round_mode.refill: update" in str(e.value)


# ---- streams, executors, resume --------------------------------------------------------------------------------
def test_a_client_launched_again_in_its_round_draws_other_minibatches(build_simulation):
    sim = build_simulation(config())
    clients = np.array([0, 1])
    steps = np.array([3, 3])

    def run(**launch):
        batch = ClientBatch(0, clients, steps, 0.05, sim.params, sim.buffers, sim.seed, **launch)
        return sim.executor.run(batch, sim.algorithm, sim.trainer, sim.data).updates

    first, again, default = run(launch=0), run(launch=1), run()
    assert torch.equal(first, default)  # the round's own launch keeps the streams it always had
    assert not torch.equal(first[0], again[0]) and not torch.equal(first[1], again[1])
    assert rngmod.launch_round(7, 0) == 7 and rngmod.launch_round(7, 1) != rngmod.launch_round(8, 0)


def test_executors_give_the_same_run_when_slots_are_refilled_at_arrivals(simulate):
    _, seq = simulate(config(rounds=6))
    assert sum(r["n_refilled"] for r in seq.rounds) > 0
    _, par = simulate({**config(rounds=6), "executor": {"name": "parallel", "workers": 2}})
    assert repr(seq.rounds) == repr(par.rounds)


def test_a_run_refilled_at_arrivals_resumes_bit_for_bit(build_simulation):
    raw = config(rounds=8)
    whole = build_simulation(raw)
    rows = whole.advance()
    assert sum(r["n_refilled"] for r in rows) > 0
    first = build_simulation(raw)
    first.advance(until=4)
    state = first.state_dict()
    resumed = build_simulation(raw)
    resumed.load_state_dict(state)
    assert repr(resumed.advance()) == repr(rows[4:])  # every float exactly (NaN columns included)
    assert torch.equal(resumed.params, whole.params)
