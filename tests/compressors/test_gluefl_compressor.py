"""GlueFL mask shifting: shared mask, regeneration, re-scaled error compensation, wire sizes, ablations."""

import math

import numpy as np
import pytest
import torch

from turnout.compressors.base import sparse_bytes
from turnout.compressors.gluefl import GlueFLMaskShifting
from turnout.compressors.sparse import Layout, bitmap_bytes, index_bytes
from turnout.core.errors import ConfigError
from turnout.core.records import Cohort
from turnout.core.registry import describe
from turnout.sim.composition import expand

D = 610
LAYOUT = [600, 10]
G = GlueFLMaskShifting


def build(layout=LAYOUT, **opts):
    return G(G.Config(**opts), D, 0, None, layout=layout)


def cohort(clients, weights, normalize, sticky=None):
    return Cohort(clients, np.asarray(weights, np.float64), normalize,
                  tags={} if sticky is None else {"sticky": np.asarray(sticky, bool)})


def rand(rows, seed):
    return torch.randn(rows, D, generator=torch.Generator().manual_seed(seed))


def test_client_sends_shared_mask_plus_unique_top_and_pays_only_unique_indices():
    c = build(ratio=0.2, shared_ratio=0.16)
    lay = Layout(LAYOUT, D)
    c.server_update(0, rand(1, 1)[0])  # round 0 (regeneration) → M for round 1
    M = c.shared_mask.clone()
    assert int(M[:600].sum()) == lay.k_for(0.16)[0] and int(M[600:].sum()) == lay.k_for(0.16)[1]
    u = rand(3, 2)
    dec, up = c.encode_uploads(1, np.array([0, 1, 2]), u)
    sent = dec != 0
    assert sent[:, M].all()  # every shared position is sent
    assert sent[:, :600].sum(1).tolist() == [lay.k_for(0.2)[0]] * 3
    for i in range(3):  # the unique part is the largest |u| outside M
        outside = u[i].abs().clone()
        outside[M] = -1
        uni = torch.topk(outside[:600], lay.k_for(0.2)[0] - int(M[:600].sum())).indices
        assert sent[i, uni].all()
    n_uni = (sent & ~M).sum(1).numpy()
    expected = 4 * (int(M.sum()) + n_uni) + index_bytes(n_uni, D)
    assert up.tolist() == expected.tolist()
    # downloads carry the mask broadcast on top of what the client lacks
    assert c.mask_broadcast_bytes() == min(4 * int(M.sum()), bitmap_bytes(D))
    assert c.download_bytes(np.array([0, 50])).tolist() == [
        c.mask_broadcast_bytes(), int(sparse_bytes(50, D)) + c.mask_broadcast_bytes()]


def test_server_support_contains_mask_and_new_mask_is_top_shared_of_the_change():
    c = build(ratio=0.2, shared_ratio=0.16)
    c.server_update(0, rand(1, 3)[0])
    M = c.shared_mask.clone()
    s = c.server_update(1, rand(1, 4)[0]).sent
    assert (s[M] != 0).all()
    assert int((s != 0).sum()) == sum(Layout(LAYOUT, D).k_for(0.2))
    new = c.shared_mask
    for a, b, k in ((0, 600, 96), (600, 610, 1)):
        top = torch.topk(s[a:b].abs(), k).indices + a
        assert set(torch.nonzero(new[a:b]).flatten().add(a).tolist()) == set(top.tolist())


def test_regeneration_rounds_use_plain_topk_and_can_be_switched_off():
    u = rand(1, 5)
    on, off = build(regenerate_every=3), build(regenerate_every=None)
    for c in (on, off):
        c.server_update(0, rand(1, 6)[0])
        c.server_update(1, rand(1, 7)[0])
        c.server_update(2, rand(1, 8)[0])
    assert not on.mask_in_use and off.mask_in_use  # round 3 regenerates (3 % 3 == 0)
    d_on, _ = on.encode_uploads(3, np.array([0]), u)
    d_off, _ = off.encode_uploads(3, np.array([0]), u)
    plain = set(torch.topk(u[0, :600].abs(), 120).indices.tolist())
    assert set(torch.nonzero(d_on[0, :600]).flatten().tolist()) == plain
    assert (d_off[0, off.shared_mask] != 0).all()
    assert on.mask_broadcast_bytes() == 0 < off.mask_broadcast_bytes()
    assert [on.regenerates(r) for r in range(7)] == [True, False, False, True, False, False, True]
    assert [off.regenerates(r) for r in range(3)] == [True, False, False]


def _accumulate(ec, weights, sticky=None, reload="always", rounds=8):
    """One client (id 3) in every round of a 4-client cohort whose weights change; returns the sums."""
    c = build(ratio=0.1, shared_ratio=0.05, error_compensation=ec, compensation_reload=reload, regenerate_every=4)
    clients = np.array([1, 3, 5, 7])
    true_sum = torch.zeros(D, dtype=torch.float64)
    sent_sum = torch.zeros(D, dtype=torch.float64)
    for r in range(rounds):
        w = weights(r)
        c.begin_round(r, cohort(clients, w, False, None if sticky is None else sticky(r)))
        u = rand(4, 100 + r)
        dec, _ = c.encode_uploads(r, clients, u)
        true_sum += w[1] * u[1].double()
        sent_sum += w[1] * dec[1].double()
        c.server_update(r, torch.as_tensor(w, dtype=torch.float32) @ dec)
    resid = c._store.get(c.residual_name, np.array([3]))[0].double()
    return true_sum, sent_sum, resid


def weights_changing(r):
    # the client alternates between sticky-like (S/C) and non-sticky-like ((N−S)/(K−C)) weights, ν = a·p
    p = 1 / 100
    a = [5.0, 15.0, 5.0, 2.5, 40.0, 5.0, 1.0, 7.0][r % 8]
    return np.array([p * 3, p * a, p * 2, p * 10])


def test_rescaled_compensation_telescopes_across_changing_weights():
    true_sum, sent_sum, resid = _accumulate("rescaled", weights_changing)
    # Σ ν_t·sent_t + ν_T·h_T = Σ ν_t·update_t  (the stored residual is ν·h)
    assert torch.allclose(sent_sum + resid, true_sum, atol=1e-4)
    assert float(resid.abs().sum()) > 0


def test_unscaled_compensation_breaks_the_identity_when_weights_change():
    true_sum, sent_sum, resid = _accumulate("unscaled", weights_changing)
    w_last = weights_changing(7)[1]
    gap = (sent_sum + w_last * resid - true_sum).abs().max()
    assert gap > 1e-2
    # ... and both agree with constant weights (plain error feedback)
    def const(r):
        return np.full(4, 0.25)

    t1, s1, h1 = _accumulate("unscaled", const)
    t2, s2, h2 = _accumulate("rescaled", const)
    assert torch.allclose(s1 + 0.25 * h1, t1, atol=1e-4) and torch.allclose(s2 + h2, t2, atol=1e-4)
    assert torch.allclose(s1, s2, atol=1e-5)


def test_residual_reloaded_only_for_sticky_clients_by_default():
    u = rand(2, 11)
    c = build(ratio=0.1, shared_ratio=0.05)
    clients = np.array([0, 1])
    c.begin_round(0, cohort(clients, [0.5, 0.5], True, [False, False]))
    c.encode_uploads(0, clients, u)
    c.server_update(0, rand(1, 12)[0])
    c.begin_round(1, cohort(clients, [0.5, 0.5], True, [True, False]))
    res = c._store.get(c.residual_name, clients)
    dec, _ = c.encode_uploads(1, clients, u)
    fresh = build(ratio=0.1, shared_ratio=0.05)
    fresh.shared_mask, fresh.mask_in_use = c.shared_mask.clone(), c.mask_in_use
    ref, _ = fresh.encode_uploads(1, clients, u + torch.stack([res[0] / 0.5, torch.zeros(D)]))
    assert torch.allclose(dec, ref)  # client 0 (sticky) reloaded h̃/ν, client 1 (not sticky) started afresh
    # with no cohort information (no engine hook) nobody is sticky: no reload
    c2 = build(ratio=0.1, shared_ratio=0.05)
    d1, _ = c2.encode_uploads(0, clients, u)
    c2.server_update(0, torch.zeros(D))
    d2, _ = c2.encode_uploads(1, clients, u)
    assert torch.equal(d1, d2)


def test_config_rejects_shared_ratio_above_total_with_the_key():
    import turnout.compressors.gluefl  # noqa: F401  (registers "gluefl")
    raw = {"compressor": {"name": "gluefl", "ratio": 0.1, "shared_ratio": 0.2}}
    with pytest.raises(ConfigError) as e:
        expand(raw)
    assert "compressor" in str(e.value) and "shared_ratio" in str(e.value)


def test_ablation_switches_are_documented_options():
    fields = G.Config.model_fields
    for name in ("regenerate_every", "error_compensation", "compensation_reload", "shared_ratio", "accounting"):
        assert fields[name].description
    assert "regeneration" in describe(G) and "error compensation" in describe(G)


# ---- through the engine with the sticky selector ------------------------------------------
RAW = {"name": "gluefl-engine", "rounds": 4, "data": {"name": "synthetic", "num_clients": 30},
       "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
       "selector": {"name": "sticky", "clients_per_round": 5, "sticky_size": 10, "sticky_per_round": 4},
       "compressor": {"name": "gluefl", "ratio": 0.2, "shared_ratio": 0.1, "regenerate_every": 2},
       "eval": {"every": 2}, "output": {"progress": False}}


class RecordingGlueFL(G):
    """GlueFL that records what ``begin_round`` is told."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def begin_round(self, round, cohort):
        self.calls.append((round, cohort.clients.copy(), cohort.tag("sticky")))
        super().begin_round(round, cohort)


def test_engine_tells_the_compressor_the_sticky_members_once_per_round(build_simulation):
    sim = build_simulation(RAW, components={"compressor": lambda ctx: RecordingGlueFL(
        ctx.exp["compressor"].cfg, ctx.dim, 0, ctx.store, layout=list(ctx.layout))})
    sim.run()
    calls = sim.compressor.calls
    assert [r for r, _, _ in calls] == [0, 1, 2, 3]  # once per round, not twice
    # round 0 initialises the group (nobody sticky); later rounds have C = 4 sticky members of 5
    assert not calls[0][2].any() and all(int(s.sum()) == 4 for _, _, s in calls[1:])
    assert all(len(c) == len(s) == 5 for _, c, s in calls)


@pytest.mark.parametrize("opts", [{}, {"regenerate_every": None}, {"error_compensation": "off"},
                                  {"error_compensation": "unscaled"}, {"compensation_reload": "always"},
                                  {"accounting": "gluefl_code"}, {"scope": "global"}, {"shared_ratio": 0.0}])
def test_ablations_run_through_the_engine(opts, simulate):
    sim, res = simulate(dict(RAW, compressor={**RAW["compressor"], **opts}))
    assert all(math.isfinite(r["loss"]) for r in res.rounds if not math.isnan(r["loss"]))
    assert all(r["bytes_up"] < 5 * 4 * sim.model.dim for r in res.rounds)  # sparse uploads
    if opts.get("error_compensation") != "off":
        assert sim.store.stats()["state_rows"] > 0  # residuals live in the engine's state store


def test_experiment_config_validates():
    from pathlib import Path

    from turnout.sim.composition import load_experiment

    path = Path(__file__).resolve().parents[2] / "experiments" / "gluefl_bytes.yaml"
    exps = load_experiment(path)
    assert [e.variant for e in exps] == ["fedavg", "stc", "gluefl", "gluefl_c5", "gluefl_equal"]
    assert [e["compressor"].name for e in exps] == ["none", "stc", "gluefl", "gluefl", "gluefl"]
    assert exps[4]["selector"].cfg.weights == "equal"
    assert exps[2]["selector"].name == "sticky" and exps[2]["selector"].cfg.sticky_per_round == 8


@pytest.mark.parametrize("algorithm,compressor,ok", [
    ("fedsum", "stc", False), ("fedsum", "gluefl", False), ("fedsum", "topk", True), ("fedsum", "quant8", True),
    ("adaptive_ou", "quant8", False), ("adaptive_ou", "topk", False), ("adaptive_ou", "none", True),
    ("fedavg", "gluefl", True), ("fedavg", "apf", True),
])
def test_incompatible_compressor_is_refused_at_validation(algorithm, compressor, ok):
    raw = {"rounds": 1, "data": {"name": "synthetic"}, "model": {"name": "logreg"}, "algorithm": {"name": algorithm},
           "compressor": {"name": compressor}}
    if ok:
        assert expand(raw)[0]["compressor"].name == compressor
    else:
        with pytest.raises(ConfigError) as e:
            expand(raw)
        assert e.value.key == "compressor.name" and algorithm in str(e.value)
        # a rule with its own compression names the option to set instead
        assert ("algorithm.quantize: true" in str(e.value)) == (algorithm == "adaptive_ou")


@pytest.mark.parametrize("key,value", [("momentum", 0.9), ("weight_decay", 1e-4), ("grad_clip", 5.0)])
def test_gradient_recovering_rules_refuse_non_plain_sgd(key, value):
    from turnout.core.errors import ConfigError
    from turnout.sim.composition import expand

    for algo in ("scaffold", "fedsum", "fedsum_cr"):
        raw = {"rounds": 1, "data": {"name": "synthetic"}, "model": {"name": "logreg"}, "algorithm": {"name": algo},
               "train": {key: value}}
        with pytest.raises(ConfigError) as e:
            expand(raw)
        assert e.value.key == f"train.{key}"


def _ec_run(simulate, weights, ec, rounds=12):
    raw = dict(RAW, rounds=rounds, eval={"every": rounds},
               selector={**RAW["selector"], "weights": weights},
               compressor={**RAW["compressor"], "error_compensation": ec})
    return simulate(raw)


def test_with_equal_weights_rec_is_ec(simulate):
    """GlueFL App. E: re-scaled error compensation (REC) differs from plain EC only through ν_prev/ν_now.

    With equal weights ν = 1/K every round, so the factor is 1 and REC ≡ EC — up to float32 rounding of
    the stored ν·h divided by ν again (~1e-8 here): an ablation "EC unscaled" on GlueFL (Equal) measures nothing. \
(With unbiased weights ν changes between sticky and
    non-sticky rounds and the two differ, next test.)"""
    sim_rec, rec = _ec_run(simulate, "equal", "rescaled")
    sim_ec, ec = _ec_run(simulate, "equal", "unscaled")
    for a, b in zip(rec.rounds, ec.rounds):
        assert a["bytes_up"] == b["bytes_up"] and a["bytes_down"] == b["bytes_down"]
        assert a["coords_changed"] == b["coords_changed"]
    assert rec.rounds[-1]["loss"] == pytest.approx(ec.rounds[-1]["loss"], rel=1e-5)
    torch.testing.assert_close(sim_rec.params, sim_ec.params, rtol=1e-5, atol=1e-6)


def test_with_unbiased_weights_rec_and_ec_differ(simulate):
    sim_rec, rec = _ec_run(simulate, "paper", "rescaled")
    sim_ec, ec = _ec_run(simulate, "paper", "unscaled")
    assert (sim_rec.params - sim_ec.params).abs().max() > 1e-3
