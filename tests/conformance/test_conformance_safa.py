"""SAFA as REFL emulates it (turnout's ``safa`` selector, ``deadline`` round mode, late-report buffer, ``safa`` and
``stale_aware`` server rules) against REFL's own emulation (``wandb_tags = safa`` in ``ahmedcs/REFL``).

The record (scripts/conformance/refl.py, case ``safa``) drove REFL's ``Aggregator`` for 12 rounds: 30 clients with
trace availability, every online client launched, the round waiting for ``int(0.3·|launched|)`` reports within a
100 s deadline, stragglers cached and applied up to 5 rounds late (``stale_update = 5``), stale weight 1
(``stale_factor = 1``). Here turnout's components replay the rounds in the engine's order: the code's online
clients minus those turnout's late buffer still holds are offered to the selector; the round mode closes on the
clients' fixed durations (the code's drop-outs never deliver); late reports park in the buffer and come back when
they arrive; the server rule aggregates.

Tolerances: the code's model is float32 (sums of ≤ 12 tensors of 8 numbers of order 1); turnout computes in
float64 from the same numbers: rtol 1e-5, atol 1e-6. Client sets, counts and staleness are compared exactly.
"""

import math

import numpy as np
import torch

from turnout.algorithms.base import AlgorithmContext
from turnout.algorithms.safa import SAFA, SAFAConfig
from turnout.algorithms.stale_aware import StaleAware, StaleAwareConfig
from turnout.core import rng as rngmod
from turnout.core.records import Reports, SelectionContext
from turnout.round_modes.deadline import Deadline, DeadlineConfig
from turnout.selectors.safa import SAFASelector
from turnout.world.context import WorldContext
from turnout.world.late import LateBuffer

RTOL, ATOL = 1e-5, 1e-6


def _reports(clients, updates, staleness) -> Reports:
    n = len(clients)
    return Reports(clients=np.asarray(clients, np.int64), updates=updates.reshape(n, -1), weights=np.ones(n),
                   normalize=True, n_samples=np.full(n, 100), losses=np.ones(n),
                   staleness=np.asarray(staleness, np.int64))


def test_safa_emulation_replay(load_record):
    case = load_record("safa")["cases"][0]
    n, rounds, d, ratio = case["num_clients"], case["rounds"], case["deadline"], case["target_ratio"]
    world = WorldContext(num_clients=n, n_train=np.full(n, 100), label_hist=np.zeros((n, 2)), seed=0, rounds=100)
    selector = SAFASelector(SAFASelector.Config(target_ratio=ratio, weighting="equal"), world)
    mode = Deadline(DeadlineConfig(deadline_s=d, max_reports="target"))
    ctx = AlgorithmContext(n, 8, np.full(n, 100), 0, len(rounds))
    safa = SAFA(SAFAConfig(aggregation="fedavg", max_staleness=case["max_staleness"]), ctx)
    code_reading = StaleAware(StaleAwareConfig(rule="equal", max_staleness=case["max_staleness"], timing="refl_code",
                                               combine="models"), ctx)
    late = LateBuffer(8)
    durations = np.array([case["durations"][str(c + 1)] for c in range(n)])
    applied_next: dict[int, int] = {}
    expired_next: list[int] = []
    quota_overridden = pending_counted = compared = expired = 0
    for r, rd in enumerate(rounds):
        where = f"epoch {rd['epoch']}"
        t0 = rd["clock"]
        assert t0 == d * (r + 1), where
        # the code applies (or expires) a cached update in the round after it arrived, with its arrival staleness
        assert applied_next == {int(c): t for c, t in rd["stale_applied"].items()}, f"{where}: stale applied"
        assert expired_next == rd["stale_expired"], f"{where}: stale expired (over the bound of 5)"

        # open: the code launches every online client, also those still computing a cached update; the engine
        # does not offer a busy device (docs/algorithms/world.md#late-reports)
        online = np.asarray(rd["online"], np.int64) - 1
        busy = set(late.busy_clients().tolist())
        available = np.array(sorted(set(online.tolist()) - busy), np.int64)
        cohort = selector.select(SelectionContext(round=r, time_s=t0, available=available, launch=n,
                                                  rng=rngmod.stream(0, "selection", r), world=world, availability=None,
                                                  probe_loss=None))
        launched = cohort.clients
        np.testing.assert_array_equal(launched, available, err_msg=where)
        assert sorted(online.tolist()) == sorted(np.asarray(rd["sampled"]) - 1), where
        # the quota: ⌊ratio·|launched|⌋ in both; the code's launched set counts the busy clients too
        assert rd["total_worker"] == int(len(online) * ratio), where
        assert cohort.target == max(1, math.floor(len(launched) * ratio)), where
        pending_counted += cohort.target != rd["total_worker"]

        # settle: the fixed durations; the code's drop-outs (offline at their finish) never deliver
        tick = rd["tictak"]
        dropped = np.isin(launched + 1, tick["dropouts"])
        finish = durations[launched]
        close = mode.close(finish, np.where(dropped, 0.0, np.inf), cohort.target)
        x = torch.tensor(rd["broadcast"], dtype=torch.float64)
        results = {int(c): np.asarray(v, np.float64) for c, v in rd["results"].items()}
        for c in launched[close.late]:  # every late client of turnout's cohort trained in the code's round too
            assert c + 1 in results, f"{where}: {c + 1} was not run by the code"
        late_ids = launched[close.late]
        late.add(r, late_ids, t0 + finish[close.late],
                 torch.as_tensor(np.array([results[c + 1] for c in late_ids]).reshape(len(late_ids), 8)) - x,
                 np.ones(len(late_ids)), np.full(len(late_ids), 100), np.ones(len(late_ids)), finish[close.late])
        arrived = late.pop_arrived(t0 + d)
        age = r - arrived.origin_round
        # on time: turnout aggregates the first ⌊ratio·|launched|⌋, the rest arrive before the close (staleness 0)
        # and are aggregated too; the code's deadline cut replaces its quota by the number of on-time clients
        fresh = set(launched[close.aggregated].tolist()) | set(arrived.clients[age == 0].tolist())
        assert fresh == set((np.asarray(tick["fresh"]) - 1).tolist()), f"{where}: fresh reports"
        assert fresh == set((np.asarray(rd["fresh_added"]) - 1).tolist()), where
        quota_overridden += len(tick["fresh"]) > rd["total_worker"]
        # the stragglers the code caches are turnout's reports still in flight at the close
        assert set((np.asarray(rd["new_stragglers"]) - 1).tolist()) == set(late_ids[
            t0 + finish[close.late] > t0 + d].tolist()), f"{where}: new stragglers"

        stale = age > 0
        ok = stale & (age <= safa.max_staleness)  # the engine's bound; the rest is dropped on arrival (wasted)
        applied_next = {int(c) + 1: int(a) for c, a in zip(arrived.clients[ok], age[ok])}
        expired_next = sorted(int(c) + 1 for c in arrived.clients[stale & ~ok])
        expired += len(expired_next)

        # aggregate: the round's fresh reports and the stale ones the engine hands over
        fresh_ids = np.asarray(rd["fresh_added"], np.int64)
        fresh_u = torch.as_tensor(np.array([results[c] for c in fresh_ids]).reshape(len(fresh_ids), 8)) - x
        reports = _reports(np.concatenate([fresh_ids - 1, arrived.clients[ok]]),
                           torch.cat([fresh_u, arrived.updates[torch.from_numpy(ok)].double()]),
                           np.concatenate([np.zeros(len(fresh_ids), np.int64), age[ok]]))
        # turnout's safa (fedavg): x + the mean of this round's fresh and newly arrived stale deltas
        torch.testing.assert_close(safa.aggregate(r, x, reports), x + reports.updates.mean(0), rtol=1e-12, atol=0,
                                   msg=where)
        # the code's reading (stale_aware: equal weights, bound 5, one round late, full models) is the code's model
        # once the code's bug is undone: its stale models are left out of the sum but counted in the normaliser
        out = code_reading.aggregate(r, x, reports)
        code_out = torch.tensor(rd["model_after"], dtype=torch.float64)
        stale_models = torch.tensor([rd["stale_models"][c] for c in rd["stale_applied"]], dtype=torch.float64
                                    ).reshape(-1, 8)
        missing = stale_models.sum(0) / (len(fresh_ids) + len(stale_models))
        torch.testing.assert_close(out, code_out + missing, rtol=RTOL, atol=ATOL, msg=f"{where}: aggregate")
        compared += len(stale_models) > 0
    assert quota_overridden == len(rounds) and pending_counted >= 3 and expired >= 3 and compared >= 8


def test_safa_quota_when_every_client_is_on_time(load_record):
    """Only when nobody misses the deadline does the code's quota bind: the rest are cached and applied two rounds
    later with staleness 1. turnout's deadline mode aggregates them in their own round (they reached the server
    before it closed), so it uses more reports in that round and none later (docs/conformance.md#refl)."""
    case = load_record("safa")["cases"][1]
    assert case["name"] == "safa_on_time"
    n, rounds, d, ratio = case["num_clients"], case["rounds"], case["deadline"], case["target_ratio"]
    world = WorldContext(num_clients=n, n_train=np.full(n, 100), label_hist=np.zeros((n, 2)), seed=0, rounds=100)
    selector = SAFASelector(SAFASelector.Config(target_ratio=ratio, weighting="equal"), world)
    mode = Deadline(DeadlineConfig(deadline_s=d, max_reports="target"))
    late = LateBuffer(0)
    durations = np.array([case["durations"][str(c + 1)] for c in range(n)])
    assert (durations <= d).all()
    cached: dict[int, set] = {}
    for r, rd in enumerate(rounds):
        where = f"epoch {rd['epoch']}"
        t0 = rd["clock"]
        available = np.array(sorted(set((np.asarray(rd["online"]) - 1).tolist()) - set(late.busy_clients().tolist())))
        cohort = selector.select(SelectionContext(round=r, time_s=t0, available=available, launch=n,
                                                  rng=rngmod.stream(0, "selection", r), world=world, availability=None,
                                                  probe_loss=None))
        launched = cohort.clients
        assert cohort.target == rd["total_worker"], where  # nobody busy: the same quota
        close = mode.close(durations[launched], np.full(len(launched), np.inf), cohort.target)
        # the cut itself agrees: the fastest ⌊ratio·|launched|⌋ on-time clients
        assert set((launched[close.aggregated] + 1).tolist()) == set(rd["tictak"]["fresh"]) == set(rd["fresh_added"]), \
            where
        late.add(r, launched[close.late], t0 + durations[launched[close.late]], torch.zeros((int(close.late.sum()), 0)),
                 np.ones(int(close.late.sum())), np.full(int(close.late.sum()), 100), np.ones(int(close.late.sum())),
                 durations[launched[close.late]])
        arrived = late.pop_arrived(t0 + d)
        # turnout: the reports over the quota arrive before the close, staleness 0: every launched client is used now
        assert set(arrived.clients.tolist()) == set(launched[close.late].tolist()) and len(late) == 0, where
        assert (r - arrived.origin_round == 0).all() and close.late.sum() > 0, where
        # the code: the others are cached (those not cached yet) and applied two rounds later, one round stale
        fresh_code = set(rd["tictak"]["fresh"])
        assert set(rd["new_stragglers"]) == set(rd["tictak"]["stragglers"]) - cached.get(r - 1, set()), where
        cached[r] = set(rd["new_stragglers"])
        expected = {c: 1 for c in cached.get(r - 2, set())}
        assert {int(c): t for c, t in rd["stale_applied"].items()} == expected, f"{where}: stale applied"
        assert len(launched) > len(fresh_code) == rd["total_worker"], where
    assert any(rd["stale_applied"] for rd in rounds)
