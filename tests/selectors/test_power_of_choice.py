"""Power-of-Choice (docs/algorithms/baselines.md#power-of-choice): Cho et al. pow-d / cpow-d / rpow-d,
FedGS-repo and Adaptive-OU-repo versions."""

import itertools
import warnings

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from turnout.core import rng as rngmod
from turnout.selectors.base import RoundFeedback, SelectionContext
from turnout.selectors.power_of_choice import PowerOfChoiceSelector, top_by_loss, weighted_sample_without_replacement
from turnout.world.context import WorldContext


def world(n, n_train=None, rounds=100):
    return WorldContext(num_clients=n, n_train=np.full(n, 50) if n_train is None else np.asarray(n_train),
                        label_hist=np.zeros((n, 2)), seed=0, rounds=rounds)


class FakeProbe:
    """``probe_loss`` stand-in: fixed per-client losses, every call recorded."""

    def __init__(self, losses):
        self.losses = np.asarray(losses, dtype=np.float64)
        self.calls = []

    def __call__(self, clients, batch=None):
        clients = np.asarray(clients)
        self.calls.append((clients.copy(), batch))
        return self.losses[clients]

    @property
    def probed(self):
        return np.concatenate([c for c, _ in self.calls]) if self.calls else np.zeros(0, int)


def ctx(w, r, available=None, launch=3, probe=None):
    avail = np.arange(w.num_clients) if available is None else np.asarray(available, dtype=np.int64)
    return SelectionContext(round=r, time_s=0.0, available=avail, launch=launch,
                            rng=rngmod.stream(0, "selection", r), world=w, availability=None,
                            probe_loss=probe)


def feedback(r, clients, losses, samples=None, aggregated=None):
    k = len(clients)
    agg = np.ones(k, bool) if aggregated is None else np.asarray(aggregated, bool)
    samples = np.full(k, 20) if samples is None else np.asarray(samples)
    return RoundFeedback(r, np.asarray(clients), agg, np.zeros(k, bool), np.asarray(losses, dtype=float), samples,
                         np.ones(k), np.ones(k), torch.zeros(k, 1), 1.0)


def poc(w, **kw):
    return PowerOfChoiceSelector(PowerOfChoiceSelector.Config(**kw), w)


# -- sampling helpers ---------------------------------------------------------------------------
def test_weighted_sampling_without_replacement_matches_sequential_draws():
    w = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    cands = np.arange(5) + 100
    # exact inclusion probabilities of two sequential draws ∝ w without replacement
    exact = np.zeros(5)
    for i, j in itertools.permutations(range(5), 2):
        pr = w[i] / w.sum() * w[j] / (w.sum() - w[i])
        exact[i] += pr
        exact[j] += pr
    rng = np.random.default_rng(0)
    counts = np.zeros(5)
    trials = 20000
    for _ in range(trials):
        got = weighted_sample_without_replacement(rng, cands, w, 2)
        assert len(set(got)) == 2
        counts[got - 100] += 1
    freq = counts / trials
    assert np.all(np.abs(freq - exact) < 4 * np.sqrt(exact * (1 - exact) / trials))
    # zero weights only when the positive ones run out
    zw = np.array([0.0, 1.0, 0.0, 2.0])
    assert set(weighted_sample_without_replacement(rng, np.arange(4), zw, 2)) == {1, 3}
    assert len(set(weighted_sample_without_replacement(rng, np.arange(4), zw, 3))) == 3


def test_top_by_loss_nan_last_random_ties():
    rng = np.random.default_rng(0)
    c = np.array([10, 11, 12, 13])
    assert set(top_by_loss(rng, c, [np.nan, 1.0, 5.0, 2.0], 2)) == {12, 13}
    assert set(top_by_loss(rng, c, [np.nan, 1.0, 5.0, 2.0], 4)) == {10, 11, 12, 13}
    firsts = {int(top_by_loss(np.random.default_rng(s), c, [1.0, 1.0, 1.0, 1.0], 1)[0]) for s in range(40)}
    assert firsts == {10, 11, 12, 13}


# -- Cho et al. -----------------------------------------------------------------------------------
def test_cho_full_probes_d_candidates_and_takes_the_top_m():
    n = 20
    w = world(n, np.arange(1, n + 1) * 5)
    losses = np.linspace(0.1, 2.0, n)[::-1]  # client 0 has the highest loss
    sel = poc(w, clients_per_round=3, d=6)
    probe = FakeProbe(losses)
    c = sel.select(ctx(w, 0, launch=3, probe=probe))
    assert len(probe.calls) == 1 and probe.calls[0][1] is None
    cands = probe.calls[0][0]
    assert len(np.unique(cands)) == 6
    want = np.sort(cands[np.argsort(-losses[cands])[:3]])
    np.testing.assert_array_equal(c.clients, want)
    assert c.normalize and np.all(c.weights == 1.0) and c.target == 3


def test_cho_candidates_are_proportional_to_data_size():
    n = 10
    n_train = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 100])
    w = world(n, n_train)
    sel = poc(w, clients_per_round=1, d=2)
    hits = 0
    for r in range(300):
        probe = FakeProbe(np.ones(n))
        sel.select(ctx(w, r, launch=1, probe=probe))
        hits += 9 in probe.probed
    assert hits / 300 > 0.95  # the big client is almost always a candidate (uniform would give 20 %)


def test_cpow_uses_a_minibatch_probe_and_rpow_none():
    w = world(12)
    probe = FakeProbe(np.arange(12.0))
    poc(w, clients_per_round=2, d=4, estimate="cpow", probe_batch=16).select(ctx(w, 0, launch=2, probe=probe))
    assert probe.calls[0][1] == 16 and len(probe.calls[0][0]) == 4

    sel = poc(w, clients_per_round=2, d=12, estimate="rpow")
    first = sel.select(ctx(w, 0, launch=2, probe=None))  # never calls the probe (None would raise)
    assert len(first.clients) == 2
    seen = np.setdiff1d(np.arange(12), [5, 7])
    # every client reports once (low losses) except 5 and 7, which report high losses
    sel.observe(feedback(0, seen, np.full(len(seen), 0.5)))
    sel.observe(feedback(0, np.array([5, 7]), [9.0, 8.0]))
    np.testing.assert_array_equal(sel.select(ctx(w, 1, launch=2, probe=None)).clients, [5, 7])
    # unseen clients (+inf) are tried before any reported loss
    sel2 = poc(w, clients_per_round=2, d=12, estimate="rpow")
    sel2.observe(feedback(0, np.arange(10), np.full(10, 100.0)))
    np.testing.assert_array_equal(sel2.select(ctx(w, 1, launch=2, probe=None)).clients, [10, 11])
    # non-delivered (dropped) clients' losses are not recorded
    sel2.observe(feedback(1, np.array([10, 11]), [1.0, 2.0], aggregated=[False, False]))
    assert np.isinf(sel2.last_loss[[10, 11]]).all()


def test_d_decay_and_overcommitment():
    w = world(100, rounds=11)
    sel = poc(w, clients_per_round=5, d=25, d_end=5)
    assert [sel.candidates_d(r) for r in (0, 5, 10)] == [25, 15, 5]
    probe = FakeProbe(np.ones(100))
    c = sel.select(ctx(w, 10, launch=7, probe=probe))  # d = 5 < launch 7: raised to 7
    assert len(probe.calls[0][0]) == 7 and len(c.clients) == 7 and c.target == 5


# -- FedGS repo -----------------------------------------------------------------------------------
def test_fedgs_probes_every_available_client():
    w = world(30)
    losses = np.random.default_rng(2).random(30)
    avail = np.arange(0, 30, 2)
    probe = FakeProbe(losses)
    c = poc(w, clients_per_round=4, variant="fedgs").select(ctx(w, 0, avail, launch=4, probe=probe))
    np.testing.assert_array_equal(np.sort(probe.probed), avail)
    np.testing.assert_array_equal(c.clients, np.sort(avail[np.argsort(-losses[avail])[:4]]))
    assert np.all(c.weights == 1.0)


# -- Adaptive-OU repo -----------------------------------------------------------------------------
def test_adaptive_ou_ranks_reported_training_loss():
    n = 40
    n_train = np.arange(1, n + 1)
    w = world(n, n_train)
    sel = poc(w, clients_per_round=6, variant="adaptive_ou")  # keep = 3
    c = sel.select(ctx(w, 0, launch=6, probe=None))
    assert len(c.clients) == 6 and np.all(c.weights == n_train[c.clients])
    mean_loss = np.array([1.0, 5.0, 2.0, 4.0, 3.0, np.nan])
    samples = np.array([100, 10, 100, 10, 10, 10])
    agg = np.array([True, True, True, True, False, True])
    fb = feedback(0, c.clients, mean_loss, samples, agg)
    wts = sel.settle_weights(c, fb)
    # summed loss: 100, 50, 200, 40, (not aggregated), nan → keep indices 2, 0, 1
    kept = np.zeros(6, bool)
    kept[[0, 1, 2]] = True
    np.testing.assert_array_equal(wts, np.where(kept, n_train[c.clients], 0))
    mean_sel = poc(w, clients_per_round=6, variant="adaptive_ou", keep=2, loss_statistic="mean")
    c2 = mean_sel.select(ctx(w, 0, launch=6, probe=None))
    wts = mean_sel.settle_weights(c2, feedback(0, c2.clients, mean_loss, samples, agg))
    np.testing.assert_array_equal(np.flatnonzero(wts), [1, 3])  # mean losses 5 and 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel.observe(fb)


def test_adaptive_ou_probe_ranking_is_fixed_at_selection():
    w = world(20, np.full(20, 7))
    losses = np.arange(20.0)
    probe = FakeProbe(losses)
    sel = poc(w, clients_per_round=5, variant="adaptive_ou", keep=2, rank_by="probe")
    c = sel.select(ctx(w, 0, launch=5, probe=probe))
    np.testing.assert_array_equal(np.sort(probe.probed), c.clients)
    top2 = np.sort(c.clients)[-2:]
    np.testing.assert_array_equal(c.weights, np.where(np.isin(c.clients, top2), 7.0, 0.0))
    np.testing.assert_array_equal(sel.settle_weights(c, feedback(0, c.clients, np.ones(5))), c.weights)


# -- config and edges -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [
    {"clients_per_round": 5, "d": 3},
    {"variant": "fedgs", "d": 20},
    {"variant": "fedgs", "estimate": "cpow"},
    {"variant": "cho", "keep": 2},
    {"variant": "adaptive_ou", "clients_per_round": 4, "keep": 5},
    {"variant": "adaptive_ou", "weighting": "equal"},
    {"d_end": 5},
    {"clients_per_round": 5, "d": 10, "d_end": 12},
    {"clients_per_round": 0},
    {"variant": "nope"},
    {"estimate": "approx"},
])
def test_bad_configs(bad):
    with pytest.raises(ValidationError):
        PowerOfChoiceSelector.Config(**bad)


@pytest.mark.parametrize("options", [{"d": 6}, {"estimate": "rpow"}, {"variant": "fedgs"},
                                     {"variant": "adaptive_ou"}, {"variant": "adaptive_ou", "rank_by": "probe"}])
def test_fewer_available_and_nobody_available(options):
    w = world(30)
    sel = poc(w, clients_per_round=6, **options)
    probe = FakeProbe(np.random.default_rng(1).random(30))
    few = np.array([2, 11, 25])
    c = sel.select(ctx(w, 0, few, launch=6, probe=probe))
    np.testing.assert_array_equal(c.clients, few)
    assert c.target == 3
    probe.calls.clear()
    empty = sel.select(ctx(w, 1, [], launch=6, probe=probe))
    assert len(empty.clients) == 0 and empty.target == 0 and not probe.calls
    sel.observe(feedback(1, empty.clients, np.zeros(0)))


# -- end to end ---------------------------------------------------------------------------------
BASE = {
    "name": "poc", "seeds": [0], "rounds": 3,
    "data": {"name": "synthetic", "num_clients": 12, "alpha": 0.5, "beta": 0.5},
    "model": {"name": "logreg"},
    "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
    "devices": {"name": "homogeneous", "compute_s_per_sample": 0.01, "down_kBps": 100.0, "up_kBps": 50.0},
    "eval": {"every": 3},
    "output": {"progress": False},
}
DIM = 60 * 10 + 10  # logreg on the synthetic task



def test_engine_fedgs_variant_pays_for_its_probes(simulate):
    sim, res = simulate({**BASE, "selector": {"name": "power_of_choice", "variant": "fedgs", "clients_per_round": 4}})
    for row in res.rounds:
        # dense FedAvg changes every coordinate: each of the 12 probed clients downloads the model once
        # (the 4 that train already hold it), uploads a 4-byte loss; the 4 trainers upload the model
        assert row["bytes_down"] == 12 * 4 * DIM
        assert row["bytes_up"] == 4 * 4 * DIM + 12 * 4
        assert row["n_selected"] == 4 == row["n_aggregated"]
    assert np.isfinite(res.rounds[-1]["loss"])


@pytest.mark.parametrize("options", [{"d": 6, "estimate": "cpow", "probe_batch": 8}, {"estimate": "rpow"},
                                     {"variant": "adaptive_ou", "rank_by": "probe"}])
def test_engine_variants(options, simulate):
    sim, res = simulate({**BASE, "selector": {"name": "power_of_choice", "clients_per_round": 4, **options},
                         "round_mode": {"name": "over_commit", "oc": 1.3}})
    assert all(r["n_selected"] == 6 and r["n_aggregated"] == 4 for r in res.rounds)
    assert np.isfinite(res.rounds[-1]["loss"])
    if options.get("estimate") == "rpow":
        assert res.rounds[0]["bytes_up"] == 4 * 4 * DIM  # no probe traffic


def test_engine_adaptive_ou_train_loss(build_simulation, spy):
    """The engine settles weights after the close: only the `keep` highest-loss reports move the model."""
    keep = lambda alg, out, round, params, reports: (reports.weights.copy(), reports.losses.copy(),  # noqa: E731
                                                     reports.n_samples.copy())
    sim = build_simulation({**BASE, "selector": {"name": "power_of_choice", "variant": "adaptive_ou",
                                                 "clients_per_round": 4, "keep": 2}},
                           components={"algorithm": spy("algorithm", "aggregate", keep)})
    res = sim.run()
    seen = sim.algorithm.calls
    assert all(r["n_selected"] == 4 for r in res.rounds) and np.isfinite(res.rounds[-1]["loss"])
    for weights, losses, n in seen:
        kept = np.flatnonzero(weights)
        # every client processes the same local_steps × batch_size samples here, so ranking by the
        # summed loss (mean × samples) is ranking by the mean loss: the two highest keep n_k
        assert set(kept.tolist()) == set(np.argsort(-losses)[:2].tolist())
        np.testing.assert_array_equal(weights[kept], n[kept])
