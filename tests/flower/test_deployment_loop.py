"""The deployment's server loop (FlowerRun) against the simulator, with devices run in-process.

With the ``modelled`` clock a deployment must decide and compute exactly what the simulation of
the same experiment and seed does: same cohorts, same bytes, same model, bit for bit — for plain
FedAvg, GlueFL's sticky sampling with mask shifting (shipped shared mask, residuals kept on the
devices), REFL with late reports, SCAFFOLD (a correction vector shipped down) and FedSUM (an
upload the server derives from the device's trained parameters). With the ``measured`` clock the
round mode judges wall-clock seconds, and late replies are completed when they come.
"""

import copy

import numpy as np
import pytest
import torch

from turnout.flower.run import FlowerRun, ServerData
from turnout.runs.experiment import prepare
from turnout.sim.composition import expand
from turnout.sim.engine import Simulation

VARIANTS = {
    "fedavg": {},
    "gluefl": {"selector": {"name": "sticky", "clients_per_round": 4, "sticky_size": 6, "sticky_per_round": 3},
               "compressor": {"name": "gluefl", "ratio": 0.3, "shared_ratio": 0.2, "regenerate_every": 3}},
    "refl": {"selector": {"name": "refl_ips", "clients_per_round": 4, "predictor": "history"},
             "algorithm": {"name": "stale_aware"}, "devices": {"name": "flash"},
             "round_mode": {"name": "deadline", "deadline_s": 2.5}},
    "scaffold": {"algorithm": {"name": "scaffold"}},
    "fedsum": {"algorithm": {"name": "fedsum"}},
    "topk_fedprox": {"algorithm": {"name": "fedprox", "mu": 0.1},
                     "compressor": {"name": "topk", "ratio": 0.2, "side": "both"}},
}
COLUMNS = ("n_selected", "n_aggregated", "n_late", "n_stale", "bytes_up", "bytes_down", "coords_changed",
           "round_duration_s", "sim_time_s", "resource_s", "wasted_s", "accuracy", "loss", "train_loss", "tau")


_DATA: dict = {}


def dataset_for(exp, seed):
    key = (str(exp["data"].as_dict()), seed)
    if key not in _DATA:
        _DATA[key] = prepare([exp]).dataset_for(exp, seed)
    return _DATA[key]


def server_data(data) -> ServerData:
    return ServerData(tuple(data.input_shape), data.num_classes, data.x_server_test, data.y_server_test,
                      n_train=data.n_train)


def run_both(raw, local_link, spy, clock="modelled", **link_kw):
    exp = expand(copy.deepcopy(raw))[0]
    data = dataset_for(exp, 0)
    sim = Simulation(exp, data, 0, components={"selector": spy("selector", "select",
                                                                lambda obj, cohort, ctx: cohort.clients.copy())})
    simulated = sim.run()
    link = local_link(exp, data, **link_kw)
    run = FlowerRun(exp, server_data(data), 0, link, clock=clock, poll_s=0.002)
    return sim, simulated, run, run.run(), link


def same(a, b) -> bool:
    return a == b or (a != a and b != b)  # NaN (no evaluation) on both sides counts as equal


@pytest.mark.parametrize("name", list(VARIANTS))
def test_modelled_deployment_is_the_simulation_bit_for_bit(name, digits, local_link, spy):
    digits.update(copy.deepcopy(VARIANTS[name]))
    sim, simulated, run, deployed, _ = run_both(digits, local_link, spy)
    for r, (a, b) in enumerate(zip(simulated.rounds, deployed.rounds)):
        for k in COLUMNS:
            assert same(a[k], b[k]), (name, r, k, a[k], b[k])
    assert torch.equal(simulated.final_params, deployed.final_params)
    cohorts = [np.sort(c) for c in sim.selector.calls]
    launched = [np.array(sorted(e["client"] for e in run.cohort_log if e["round"] == r)) for r in range(len(cohorts))]
    assert all(np.array_equal(a, b) for a, b in zip(cohorts, launched))
    for col in ("times_selected", "times_aggregated", "bytes_up", "bytes_down", "resource_s", "wasted_s"):
        assert np.array_equal(simulated.clients[col], deployed.clients[col]), col
    if name == "refl":  # the deadline made reports late, and REFL's stale-aware rule used them later
        assert sum(r["n_late"] for r in deployed.rounds) > 0
        assert sum(r["n_stale"] for r in deployed.rounds) > 0


@pytest.mark.parametrize("name", ["fedavg", "gluefl", "refl"])
def test_model_sync_payload_weighs_what_the_ledger_charges(name, digits, local_link, spy):
    """The arrays sent down (model sync, GlueFL's shared mask) are exactly the priced download bytes."""
    digits.update(copy.deepcopy(VARIANTS[name]))
    _, _, _, deployed, link = run_both(digits, local_link, spy)
    assert [r["payload_bytes_down"] for r in deployed.rounds] == [r["bytes_down"] for r in deployed.rounds]
    first = [ins for ins in link.sent_instructions if ins.round == 0]
    assert all(ins.sync_form == "dense" for ins in first)  # nobody holds a copy yet
    later = [ins.sync_form for ins in link.sent_instructions if ins.round > 0]
    if name == "gluefl":  # sparse server updates: returning clients download only what changed
        assert {"indices", "bitmap"} & set(later)
        assert any(ins.compressor_state for ins in link.sent_instructions)  # the shared mask went down


def test_gluefl_residuals_live_on_the_devices(digits, local_link, spy):
    digits.update(copy.deepcopy(VARIANTS["gluefl"]))
    _, _, run, _, link = run_both(digits, local_link, spy)
    assert run.store.stats()["state_rows"] == 0  # the server stores no residual
    holders = [c for c, s in link.state.items() if "gluefl/residual" in s.rows]
    assert holders and all(np.isfinite(link.state[c].rows["gluefl/residual"]).all() for c in holders)


def test_measured_clock_late_replies_are_completed_in_a_later_round(digits, local_link):
    digits.update(rounds=6, selector={"name": "uniform", "clients_per_round": 5},
                  algorithm={"name": "stale_aware"}, round_mode={"name": "deadline", "deadline_s": 0.25})
    exp = expand(digits)[0]
    data = dataset_for(exp, 0)
    slow = {c: 0.4 for c in range(0, 10, 2)}  # even clients answer after 0.4 s, past the 0.25 s deadline
    run = FlowerRun(exp, server_data(data), 0, local_link(exp, data, delay_s=slow), clock="measured", poll_s=0.002)
    rows = run.run().rounds
    late = [e for e in run.cohort_log if e["late"]]
    assert late and all(e["client"] % 2 == 0 and e["finish_s"] == np.inf for e in late)
    fresh = [e for e in run.cohort_log if e["aggregated"]]
    assert fresh and all(e["client"] % 2 == 1 and e["finish_s"] < 0.25 for e in fresh)
    assert sum(r["n_stale"] for r in rows) > 0  # late replies reached the model in a later round
    assert all(r["round_duration_s"] == pytest.approx(0.25) for r in rows if r["n_selected"])
    res = run.result(rows)
    cols = res.clients
    assert sum(r["bytes_up"] for r in rows) == cols["bytes_up"].sum() >= 2600 * sum(r["n_aggregated"] for r in rows)
    assert np.isfinite(cols["resource_s"]).all() and np.isfinite(cols["wasted_s"]).all()
    launches = cols["times_selected"][0::2].sum()
    # each late launch counts 0.25 s at the close, and the rest of its ~0.4 s once its reply came
    assert 0.25 * launches < cols["resource_s"][0::2].sum() < 0.6 * launches


def test_a_failed_device_is_a_dropout_and_gets_a_full_sync_next_time(digits, local_link):
    digits.update(rounds=6, selector={"name": "uniform", "clients_per_round": 10})
    exp = expand(digits)[0]
    data = dataset_for(exp, 0)
    link = local_link(exp, data, fail={3})
    run = FlowerRun(exp, server_data(data), 0, link, clock="modelled", poll_s=0.002)
    rows = run.run().rounds
    assert all(r["n_failed"] == 1 and r["n_aggregated"] == 9 and r["n_dropped"] == 1 for r in rows)
    assert all(ins.base_round == -2 for ins in link.sent_instructions if ins.client == 3)
    assert run.population.times_aggregated[3] == 0 and run.population.bytes_up[3] == 0


def test_a_lost_copy_after_a_sync_is_refused_then_repaired(digits, local_link):
    digits.update(rounds=4, selector={"name": "uniform", "clients_per_round": 10})
    exp = expand(digits)[0]
    data = dataset_for(exp, 0)
    link = local_link(exp, data)
    run = FlowerRun(exp, server_data(data), 0, link, clock="modelled", poll_s=0.002)
    run.advance(until=2)
    link.forget.add(5)  # device 5 restarts and loses its copy
    rows = run.advance()
    assert rows[0]["n_failed"] == 1 and rows[1]["n_failed"] == 0
    sync = [(ins.round, ins.base_round, ins.sync_form) for ins in link.sent_instructions if ins.client == 5]
    assert sync[2][:2] == (2, 0) and sync[3] == (3, -2, "dense")  # refused at round 2, fully resynced at round 3
