"""REFL (turnout.selectors.refl, turnout.algorithms.stale_aware) against the authors' client manager and aggregator.

The record (scripts/conformance/refl.py) holds two cases:

* ``ips``: REFL's ``clientManager.resampleClients`` for 14 rounds (40 clients, N_t = 6, window = the 100 s
  deadline), with the noisy oracle off and on. Per round turnout's oracle (``oracle_rule: refl_code``) must put
  exactly the code's priority clients first (probability 0), and the counts of the code's lists and draws are
  checked against what turnout does (docs/conformance.md#refl: the draw of K − 1, the per-list thinning).
* ``saa``: REFL's ``Aggregator`` for 16 rounds (30 clients, N_t = 6, deadline 100 s, SAA rule −4, β = 0.35,
  c = 1, full models exchanged). Its stragglers are parked in turnout's ``LateBuffer`` at their physical
  arrival times, and the reports the engine would hand over each round are fed to ``stale_aware`` in the
  engine's order (fresh reports of the round + late reports that arrived by its close).

Tolerances: the code keeps the model and its deviation norms in float32 (sums of at most a dozen 8-number
tensors, values of order 1) and turnout computes in float64 from the same float32 numbers, so the stale
weights and the aggregate agree to a few float32 ulps times the operation count: rtol 1e-5 (atol 1e-6 for
entries near 0). Everything else (client sets, counts, staleness) is compared exactly.
"""

import math

import numpy as np
import pytest
import torch

import turnout.selectors.refl as refl_module
from turnout.algorithms.base import AlgorithmContext
from turnout.algorithms.stale_aware import StaleAware, StaleAwareConfig
from turnout.availability.trace import TraceAvailability
from turnout.core import rng as rngmod
from turnout.core.records import Reports, SelectionContext
from turnout.selectors.availability_predictor import OraclePredictor
from turnout.selectors.refl import REFLSelector
from turnout.traces.format import AvailabilityTrace, save_trace
from turnout.world.context import WorldContext
from turnout.world.late import LateBuffer

RTOL, ATOL = 1e-5, 1e-6


def _world(case, tmp_path) -> tuple[WorldContext, TraceAvailability]:
    """The recorded FedScale-format traces as turnout's trace model (client i uses trace (i+1) % N, as the code)."""
    n = case["num_clients"]
    intervals = [list(zip(t["active"], t["inactive"])) for t in case["traces"]]
    path = save_trace(tmp_path / "refl_traces.npz", AvailabilityTrace.from_intervals(intervals, case["period"]))
    world = WorldContext(num_clients=n, n_train=np.full(n, 100), label_hist=np.zeros((n, 2)), seed=0, rounds=100)
    return world, TraceAvailability(TraceAvailability.Config(path=str(path), mapping="modulo"), world)


def _ids(code_ids) -> np.ndarray:
    """The code numbers clients from 1, turnout from 0."""
    return np.sort(np.asarray(code_ids, dtype=np.int64) - 1)


def _context(r: int, clock: float, online: np.ndarray, launch: int, world, av) -> SelectionContext:
    return SelectionContext(round=r, time_s=clock, available=online, launch=launch,
                            rng=rngmod.stream(0, "selection", r), world=world, availability=av, probe_loss=None)


def _assert_priority(ctx: SelectionContext, window: float, code_priority, where: str) -> set:
    """turnout's oracle (rule refl_code) ranks exactly the code's priority clients first."""
    p = OraclePredictor("refl_code").predict(ctx, ctx.available, ctx.time_s + window, ctx.time_s + 2 * window)
    ours = set(ctx.available[p == 0].tolist())
    assert ours == set(_ids(code_priority).tolist()), f"{where}: priority list"
    assert set(np.unique(p).tolist()) <= {0.0, 1.0}, where
    return ours


# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("accuracy", ["0.0", "0.9"])
def test_refl_ips_priority_lists_and_draws(load_record, tmp_path, monkeypatch, accuracy):
    case = load_record("refl")["cases"][0]
    assert case["name"] == "ips"
    world, av = _world(case, tmp_path)
    k, w, noisy = case["K"], case["window"], accuracy != "0.0"
    sel = REFLSelector(REFLSelector.Config(clients_per_round=k, predictor="oracle", oracle_rule="refl_code",
                                           oracle_accuracy=1.0 if not noisy else 0.9, cooldown_rounds=0, window_s=w,
                                           weighting="equal"), world)
    thinned = []  # (pool size, answered) of turnout's noisy-oracle thinning
    real_smallest = refl_module.smallest

    def spy(values, kk):
        if len(values) == len(pool):
            thinned.append((len(values), int(kk)))
        return real_smallest(values, kk)

    monkeypatch.setattr(refl_module, "smallest", spy)
    seen = {"below": 0, "equal": 0, "above": 0, "uneven": 0}
    for rd in case["runs"][accuracy]:
        r, where = rd["round"], f"p={accuracy} round {rd['round']}"
        pool = _ids(rd["online"])
        assert len(pool) > k, where  # the code's early return (everyone online goes) is not exercised
        ctx = _context(r, rd["clock"], pool, k, world, av)
        prio = _assert_priority(ctx, w, [c for c in rd["priority_all"] if c in rd["online"]], where)
        thinned.clear()
        chosen = set(sel.select(ctx).clients.tolist())
        picked = set(_ids(rd["picked"]).tolist())
        calls = rd["calls"]
        assert len(chosen) == k, where  # turnout: min(target, len(pool)) = K
        if not noisy:
            assert set(_ids(rd["priority_kept"]).tolist()) == prio, where
            # the code's selection list: the priority clients, filled at random up to K
            assert calls[-1]["op"] == "shuffle" and len(calls[-1]["result"]) == max(len(prio), k), where
            if len(prio) > k:  # more priority clients than K: both draw K of them
                assert len(picked) == k and picked <= prio and chosen <= prio, where
                seen["above"] += 1
            else:  # [QUIRK] the code's draw takes min(K, len − 1): K − 1 of the K listed
                assert len(picked) == k - 1, where
                assert (chosen <= prio) if len(prio) >= k else (prio <= chosen), where
                assert len(picked & prio) >= min(len(prio), k) - 1, where
                seen["equal" if len(prio) == k else "below"] += 1
            continue
        # noisy oracle: the code keeps ⌊0.9·|list|⌋ of the priority list and of the rest, separately
        rest = set(pool.tolist()) - prio
        kp, kr = math.floor(0.9 * len(prio)), math.floor(0.9 * len(rest))
        assert set(_ids(calls[0]["population"]).tolist()) == prio and calls[0]["k"] == kp, where
        assert set(_ids(calls[1]["population"]).tolist()) == rest and calls[1]["k"] == kr, where
        assert len(rd["priority_kept"]) == kp, where
        if len(prio) <= 10:  # a list of 1-10 clients always loses exactly one (one priority client: none kept)
            assert kp == len(prio) - 1, where
        # turnout thins the whole pool once: int(0.9·|pool|) answered, hidden ones are filler
        assert thinned == [(len(pool), int(len(pool) * 0.9))], where
        seen["uneven"] += kp + kr != int(len(pool) * 0.9)
        listed = max(kp, k)  # the code's list: the kept priority clients, filled from the kept rest up to K
        if kp < k:
            assert calls[2]["op"] == "sample" and calls[2]["k"] == k - kp, where
        assert len(picked) == (k if listed > k else k - 1), where  # the draw of min(K, len − 1)
        if kp > k:
            assert picked <= prio, where
    if noisy:
        assert seen["uneven"] >= 3  # the per-list floors lose more clients than turnout's single one
    else:
        assert min(seen["below"], seen["equal"], seen["above"]) >= 1  # lists shorter than, equal to, longer than K


# ------------------------------------------------------------------------------------------------------------
def _reports(clients, updates, staleness) -> Reports:
    n = len(clients)
    return Reports(clients=np.asarray(clients, np.int64), updates=torch.as_tensor(np.asarray(updates, np.float64)
                                                                                  ).reshape(n, -1),
                   weights=np.ones(n), normalize=True, n_samples=np.full(n, 100), losses=np.ones(n),
                   staleness=np.asarray(staleness, np.int64))


def _spy_factors(alg: StaleAware) -> list:
    """Record (clients, staleness, factors) of each call of the algorithm's staleness weights."""
    calls = []
    real = alg.factors

    def factors(reports, u):
        f = real(reports, u)
        calls.append((reports.clients.copy(), np.asarray(reports.staleness).copy(), f.copy()))
        return f

    alg.factors = factors
    return calls


def test_refl_stale_weights_and_aggregate_replay(load_record, tmp_path):
    case = load_record("refl")["cases"][1]
    assert case["name"] == "saa"
    world, av = _world(case, tmp_path)
    n, rounds, d = case["num_clients"], case["rounds"], case["deadline"]
    ctx = AlgorithmContext(n, 8, np.full(n, 100), 0, len(rounds))
    code_reading = StaleAware(StaleAwareConfig(rule="refl", beta=case["beta"], scale_coff=case["scale_coff"],
                                               timing="refl_code", combine="models"), ctx)
    paper = StaleAware(StaleAwareConfig(rule="refl", beta=case["beta"], scale_coff=case["scale_coff"]), ctx)
    code_calls, paper_calls = _spy_factors(code_reading), _spy_factors(paper)
    late = LateBuffer(8)
    durations = {int(c): v for c, v in case["durations"].items()}
    arrived_before: dict[int, int] = {}
    compared = multi = 0
    for r, rd in enumerate(rounds):
        where = f"epoch {rd['epoch']}"
        assert rd["epoch"] == r + 1 and rd["clock"] == d * (r + 1), where
        t0 = rd["clock"]
        # IPS: the code's priority list (before its noisy oracle thins it) is turnout's
        sel_ctx = _context(r, t0, _ids(rd["online"]), case["K"], world, av)
        if rd["selection_calls"] and rd["selection_calls"][0]["op"] == "sample":
            _assert_priority(sel_ctx, rd["time_window"], rd["selection_calls"][0]["population"], where)
        assert len(rd["sampled"]) == case["K"] - 1, where  # the draw of min(K, len − 1) (its list has K)

        # the engine's view of the round: stragglers park with their physical arrival time; arrivals by the close
        x = torch.tensor(rd["broadcast"], dtype=torch.float64)
        results = {int(c): np.asarray(v, np.float64) for c, v in rd["results"].items()}
        new = rd["new_stragglers"]
        late.add(r, np.asarray(new, np.int64) - 1, t0 + np.array([durations[c] for c in new]),
                 torch.as_tensor(np.array([results[c] for c in new]).reshape(len(new), 8)) - x,
                 np.ones(len(new)), np.full(len(new), 100), np.ones(len(new)), np.zeros(len(new)))
        arrived = late.pop_arrived(t0 + d)
        age = r - arrived.origin_round
        # FedScale/REFL applies a straggler one round after it arrives, with its arrival staleness (≥ 1 here)
        assert {c + 1: a for c, a in arrived_before.items()} == {int(c): t for c, t in rd["stale_applied"].items()}, \
            f"{where}: stale updates applied (client → rounds late)"
        assert rd["stale_expired"] == [], where  # REFL: no staleness bound

        fresh = rd["fresh_added"]
        fresh_u = torch.as_tensor(np.array([results[c] for c in fresh]).reshape(len(fresh), 8)) - x
        reports = _reports(np.concatenate([np.asarray(fresh, np.int64) - 1, arrived.clients]),
                           torch.cat([fresh_u, arrived.updates.double()]),
                           np.concatenate([np.zeros(len(fresh), np.int64), age]))
        out = code_reading.aggregate(r, x, reports)
        paper.aggregate(r, x, reports)

        # the paper's timing applies what arrived now; the code's reading holds it one round, like the code
        applied_paper = set(paper_calls[-1][0][paper_calls[-1][1] > 0].tolist()) if paper_calls else set()
        assert applied_paper == set(arrived.clients.tolist()), where
        cl, st, f = code_calls[-1]
        held = st > 0
        assert set((cl[held] + 1).tolist()) == {int(c) for c in rd["stale_applied"]}, where
        # the stale weights: REFL's rule −4 in the code, Eq. (2) with c = 1 in turnout
        for c, fc in zip(cl[held] + 1, f[held]):
            np.testing.assert_allclose(fc, rd["importance"][str(c)], rtol=RTOL, err_msg=f"{where}: w_s of {c}")
        if held.sum() >= 2:
            top = max(rd["client_ratio"].values())
            np.testing.assert_allclose(code_reading.last_deviation, [rd["client_ratio"][str(c)] / top
                                                                     for c in cl[held] + 1], rtol=RTOL,
                                       err_msg=f"{where}: Λ_s/Λ_max")
            multi += 1
        # the aggregate: the code leaves the stale models out of the sum but keeps their weights in the normaliser
        code_out = torch.tensor(rd["model_after"], dtype=torch.float64)
        w_stale = f[held]
        stale_models = torch.tensor([rd["stale_models"][str(c)] for c in cl[held] + 1], dtype=torch.float64
                                    ).reshape(-1, 8)
        missing = (torch.as_tensor(w_stale) @ stale_models) / (len(fresh) + w_stale.sum())
        torch.testing.assert_close(out, code_out + missing, rtol=RTOL, atol=ATOL, msg=f"{where}: aggregate")
        if held.any():
            assert not torch.allclose(out, code_out, rtol=1e-3, atol=1e-3), f"{where}: the bug's effect"
            compared += 1
        arrived_before = {int(c): int(a) for c, a in zip(arrived.clients, age)}
    assert compared >= 10 and multi >= 6  # stale weights were compared in most rounds, Λ with several stale
