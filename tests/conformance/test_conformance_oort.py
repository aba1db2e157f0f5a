"""Oort (turnout.selectors.oort) against FedScale's Oort, client manager and aggregator bookkeeping.

The record (scripts/conformance/oort.py) drove FedScale's code for 14 rounds on 12 clients: round 0 is the client
manager's uniform draw, rounds 1-13 Oort's ``getTopK``; stragglers get ``round_completion_handler``'s mean utility.
Here turnout's selector replays the same rounds in the engine's order (select, then observe the round's
feedback). Oort's draws use numpy's global generator and turnout's its own, so each of turnout's weighted draws
is checked against the code's ``numpy.random.choice`` call (same candidates, same count, and — once every client
has run, see below — the same probabilities) and then answered with the code's picks, which carries the same
state into the next round.

Tolerances: both sides compute in float64 on the same inputs; sums run in a different order (Python's left fold
against numpy's), so floats agree to rtol 1e-12, far below any difference a changed rule would make.

Probabilities are compared from the first round in which every client has run: before that FedScale normalises
rewards over the available clients' data sizes too and takes T_pref over the durations every client registered
from its device profile, which a turnout selector does not see (docs/conformance.md#oort lists both).
"""

import numpy as np
import pytest
import torch

import turnout.selectors.oort as oort_module
from turnout.core import rng as rngmod
from turnout.selectors.base import RoundFeedback, SelectionContext
from turnout.selectors.oort import OortSelector
from turnout.world.context import WorldContext

RTOL = 1e-12


def _selector(case) -> tuple[OortSelector, WorldContext]:
    sizes = np.asarray(case["inputs"]["sizes"])
    a = case["oort_args"]
    w = WorldContext(num_clients=len(sizes), n_train=sizes, label_hist=np.zeros((len(sizes), 2)), seed=0,
                     rounds=100)
    cfg = OortSelector.Config(
        clients_per_round=case["K"], exploration_factor=a["exploration_factor"],
        exploration_decay=a["exploration_decay"], exploration_min=a["exploration_min"],
        round_threshold=a["round_threshold"], round_penalty=a["round_penalty"], pacer_step=a["pacer_step"],
        pacer_delta=a["pacer_delta"], clip_bound=a["clip_bound"], cut_off_util=a["cut_off_util"],
        sample_window=a["sample_window"], init_reward_cap=case["init_reward_cap"], straggler_round="next")
    return OortSelector(cfg, w), w


def _assert_state_matches(sel: OortSelector, arms: dict, where: str) -> None:
    ids = np.array(sorted(int(c) for c in arms))
    ran = np.array([arms[str(c)]["count"] > 0 for c in ids])
    np.testing.assert_array_equal(sel.explored[ids], ran, err_msg=f"{where}: explored clients")
    np.testing.assert_allclose(sel.reward[ids], [arms[str(c)]["reward"] for c in ids], rtol=RTOL,
                               err_msg=f"{where}: rewards")
    np.testing.assert_array_equal(sel.last_round[ids[ran]], [arms[str(c)]["time_stamp"] for c in ids[ran]],
                                  err_msg=f"{where}: time stamps")
    np.testing.assert_array_equal(sel.duration[ids[ran]], [arms[str(c)]["duration"] for c in ids[ran]],
                                  err_msg=f"{where}: durations")


def _replay(calls: list, compare_p: bool, where: str):
    """A stand-in for turnout's weighted draw that checks it against the code's next draw and returns its picks."""
    pending = [c for c in calls if c["k"] > 0]  # the code also calls choice(·, 0): turnout draws nothing then

    def draw(rng, items, weights, k):
        assert pending, f"{where}: turnout drew more often than the code"
        call = pending.pop(0)
        assert sorted(int(i) for i in items) == sorted(call["candidates"]), f"{where}: candidates"
        assert int(k) == call["k"], f"{where}: sample size"
        if compare_p:
            p = dict(zip((int(i) for i in items), np.asarray(weights) / np.sum(weights)))
            np.testing.assert_allclose([p[c] for c in call["candidates"]], call["p"], rtol=1e-9,
                                       err_msg=f"{where}: probabilities")
        return np.asarray(call["picked"], dtype=np.int64)

    return draw, pending


def test_oort_replays_fedscale_round_by_round(load_record, monkeypatch):
    rec = load_record("oort")
    case = rec["cases"][0]
    sel, w = _selector(case)
    launch = int(case["K"] * case["overcommitment"])
    sizes = np.asarray(case["inputs"]["sizes"])
    durations = np.asarray(case["inputs"]["durations"])
    compared_p = 0
    for rd in case["rounds"]:
        r, where = rd["round"], f"round {rd['round']}"
        _assert_state_matches(sel, rd["arms_at_selection"], where)
        everyone_ran = all(a["count"] > 0 for a in rd["arms_at_selection"].values())
        draw, pending = _replay(rd["choice_calls"], everyone_ran, where)
        monkeypatch.setattr(oort_module, "weighted_sample", draw)
        ctx = SelectionContext(round=r, time_s=0.0, available=np.asarray(rd["available"]), launch=launch,
                               rng=rngmod.stream(0, "selection", r), world=w, availability=None, probe_loss=None)
        cohort = sel.select(ctx)
        assert not pending, f"{where}: the code drew more often than turnout"
        compared_p += everyone_ran and len(rd["choice_calls"]) > 0
        # the counter: round 0 is not Oort's; from round 1 on Oort's T (ε, pacer, ln T) counts its calls
        assert int(sel.oort_calls) == rd["training_round"] == r, where
        assert float(sel.exploration) == pytest.approx(rd["exploration"], rel=RTOL), f"{where}: ε"
        assert float(sel.threshold) == rd["round_threshold"], f"{where}: pacer threshold"
        np.testing.assert_allclose(sel.util_history, rd["exploit_util_history"], rtol=RTOL,
                                   err_msg=f"{where}: pacer utility history")
        if everyone_ran:
            assert float(sel.prefer_duration) == rd["prefer_duration"], f"{where}: T_pref"
        if r == 0:
            assert len(cohort.clients) == len(rd["launched"]) and len(sel.util_history) == 0
        else:  # turnout launches the code's exploit and explore picks (FedScale adds its stale explore list)
            picked = set(rd["exploit_clients"]) | (set(rd["explore_clients"]) if len(rd["choice_calls"]) > 1 else set())
            assert picked <= set(cohort.clients.tolist()), where
        # the round as FedScale ran it: the fastest K of its cohort report, the rest straggle
        clients = np.asarray(rd["launched"], dtype=np.int64)
        reported = np.isin(clients, rd["reporters"])
        loss = np.where(reported, [case["inputs"]["losses"][r][c] for c in clients], np.nan)
        k = len(clients)
        sel.observe(RoundFeedback(r, clients, reported, np.zeros(k, bool), loss, sizes[clients], durations[clients],
                                  durations[clients], torch.zeros(k, 1), float(durations[clients].max())))
    _assert_state_matches(sel, case["final_arms"], "after the last round")
    assert compared_p >= 10  # the probabilities were compared in most rounds, not skipped

