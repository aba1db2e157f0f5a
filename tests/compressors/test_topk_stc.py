"""Top-k and STC: exact upload sizes, server supports through the engine, error feedback, ternarisation."""

import numpy as np
import torch

from turnout.algorithms.base import Algorithm
from turnout.compressors.base import sparse_bytes
from turnout.compressors.gluefl import GlueFLMaskShifting
from turnout.compressors.sparse import (
    Layout,
    bitmap_bytes,
    code_download_bytes,
    code_upload_bytes,
    largest_k,
    topk_select,
)
from turnout.compressors.stc import STC
from turnout.compressors.topk import TopK
from turnout.core.records import Cohort
from turnout.selectors.base import Selector

D = 610
LAYOUT = [600, 10]  # logreg on synthetic: weight (10×60), bias (10)


def build(cls, layout=None, **opts):
    return cls(cls.Config(**opts), D, 0, None, layout=layout)


def distinct(rows, seed=0):
    """Updates whose magnitudes are all distinct (no top-k ties)."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.randperm(rows * D, generator=g).reshape(rows, D).float() + 1.0
    sign = torch.where(torch.rand(rows, D, generator=g) < 0.5, -1.0, 1.0)
    return mag * sign


# ---- upload sizes ---------------------------------------------------------------------------
def test_global_topk_upload_is_k_values_plus_index_cost():
    c = build(TopK, ratio=0.1, scope="global", error_feedback=False)
    u = distinct(3)
    dec, up = c.encode_uploads(0, np.array([4, 5, 6]), u)
    k = int(0.1 * D)
    assert up.tolist() == [k * 4 + min(4 * k, bitmap_bytes(D))] * 3
    assert up.tolist() == sparse_bytes(np.full(3, k), D).tolist()
    for i in range(3):
        top = torch.topk(u[i].abs(), k).indices
        assert set(torch.nonzero(dec[i]).flatten().tolist()) == set(top.tolist())
        assert torch.equal(dec[i, top], u[i, top])


def test_per_tensor_topk_keeps_k_per_tensor_and_bitmap_when_cheaper():
    c = build(TopK, layout=LAYOUT, ratio=0.3, error_feedback=False)
    u = distinct(2, seed=1)
    dec, up = c.encode_uploads(0, np.array([0, 1]), u)
    ks = [int(0.3 * 600), int(0.3 * 10)]
    assert (dec[:, :600] != 0).sum(1).tolist() == [ks[0]] * 2
    assert (dec[:, 600:] != 0).sum(1).tolist() == [ks[1]] * 2
    n = sum(ks)
    assert 4 * n > bitmap_bytes(D)  # here the bitmap is the cheaper index
    assert up.tolist() == [4 * n + bitmap_bytes(D)] * 2
    # without a layout the whole vector is one tensor
    assert Layout(None, D).sizes == [D]


def test_k_is_at_least_one_per_tensor_like_fedscale():
    assert Layout([600, 10], D).k_for(0.05) == [30, 1]
    assert Layout([600, 10], D).k_for(0.0) == [0, 0]
    assert Layout([600, 10], D).k_for(1.0) == [600, 10]


def test_gluefl_code_accounting_formulas():
    stc = build(STC, ratio=0.2, accounting="gluefl_code")
    _, up = stc.encode_uploads(0, np.array([0]), distinct(1))
    assert up[0] == code_upload_bytes(0.2, D) == int(np.ceil(0.2 * 4 * D)) + (D + 7) // 8
    assert stc.download_bytes(np.array([0, 10, D])).tolist() == [(D + 7) // 8, 40 + (D + 7) // 8, 4 * D]
    assert code_download_bytes(np.array([D]), D).tolist() == [4 * D]


def test_selection_breaks_no_ties_on_zero_values():
    x = torch.zeros(1, 20)
    x[0, 3] = 1.0
    m = topk_select(x, [5], Layout(None, 20))
    assert m[0].nonzero().flatten().tolist() == [3]  # zero-valued positions are not sent
    assert build(TopK, ratio=0.5, error_feedback=False).encode_uploads(
        0, np.array([0]), torch.zeros(1, D))[1].tolist() == [0]


# ---- error feedback ------------------------------------------------------------------------
def topk_mask(mag, k):
    out = torch.zeros(mag.shape, dtype=torch.bool)
    return out.scatter_(1, torch.topk(mag, k, dim=1, sorted=False).indices, True)


def test_largest_k_is_topks_choice_with_and_without_ties_across_the_boundary():
    g = torch.Generator().manual_seed(3)
    rows = torch.randn(6, 1000, generator=g).abs()
    rows[1, 500:] = 0.0  # fewer non-zeros than k: the zeros tie across the boundary
    rows[2] = torch.round(rows[2] * 4) / 4  # a few distinct values: ties everywhere
    rows[3, :300] = torch.finfo(torch.float32).max  # forced positions (GlueFL's shared mask), fewer than k
    rows[4] = 1.0  # all equal
    for k in (1, 7, 250, 600, 999):
        got = largest_k(rows, k)
        assert got.dtype == torch.bool and got.shape == rows.shape
        assert torch.equal(got, topk_mask(rows, k)), k
        assert got.sum(dim=1).tolist() == [k] * 6
    # a strided slice of a wider tensor (one parameter tensor of the flat vector), as topk_select passes it
    wide = torch.randn(4, 3000, generator=g).abs()
    assert torch.equal(largest_k(wide[:, 1000:2000], 123), topk_mask(wide[:, 1000:2000], 123))


def test_topk_error_feedback_reloads_residual_and_stc_by_default_does_not():
    u = distinct(1, seed=3)
    for cls, opts, reloads in ((TopK, {"error_feedback": True}, True), (STC, {}, False),
                               (STC, {"error_feedback": True}, True)):
        c = build(cls, ratio=0.1, scope="global", **opts)
        d1, _ = c.encode_uploads(0, np.array([7]), u)
        d2, _ = c.encode_uploads(1, np.array([7]), u)
        if reloads:  # the second upload compresses u + (u − d1)
            expect = u + (u - d1)
            k = int(0.1 * D)
            top = torch.topk(expect[0].abs(), k).indices
            assert torch.allclose(d2[0, top], expect[0, top])
        else:
            assert torch.equal(d1, d2)


def test_server_error_feedback_carries_what_the_server_dropped():
    c = build(STC, ratio=0.1, scope="global", server_error_feedback=True)
    u = distinct(1, seed=4)[0]
    s1 = c.server_update(0, u).sent
    assert torch.allclose(c.server_residual, u - s1)
    s2 = c.server_update(1, torch.zeros(D)).sent
    assert torch.allclose(s1 + s2 + c.server_residual, u)


def test_non_finite_report_passes_through_and_keeps_residual_clean():
    c = build(TopK, ratio=0.1)
    u = distinct(2, seed=5)
    u[1, 3] = float("nan")
    dec, _ = c.encode_uploads(0, np.array([0, 1]), u)
    assert not torch.isfinite(dec[1]).all() and torch.isfinite(dec[0]).all()
    assert torch.isfinite(c._store.get(c.residual_name, np.array([0, 1]))).all()
    assert float(c._store.get(c.residual_name, np.array([1])).abs().sum()) == 0.0


def test_ternary_stc_values_and_bytes():
    c = build(STC, layout=LAYOUT, ratio=0.1, ternary=True)
    u = distinct(1, seed=6)
    dec, up = c.encode_uploads(0, np.array([0]), u)
    for a, b in ((0, 600), (600, 610)):
        vals = dec[0, a:b][dec[0, a:b] != 0]
        kept = u[0, a:b][dec[0, a:b] != 0]
        assert torch.allclose(vals.abs(), torch.full_like(vals, float(kept.abs().mean())))
        assert torch.equal(torch.sign(vals), torch.sign(kept))
    n = 60 + 1
    assert up[0] == min(4 * n, bitmap_bytes(D)) + (n + 7) // 8 + 4 * 2


# ---- through the engine: a stale client downloads the union of the server supports it missed ----
RAW = {"name": "ctopk", "rounds": 6, "data": {"name": "synthetic", "num_clients": 8}, "model": {"name": "logreg"},
       "train": {"batch_size": 10, "local_steps": 1}, "selector": {"name": "uniform", "clients_per_round": 2},
       "output": {"progress": False}}


class DenseHandUpdates(Algorithm):
    """Server rule: a dense random change per round (the same in every run), ignoring the reports."""

    Config = None

    def aggregate(self, round, global_params, reports):
        g = torch.Generator().manual_seed(1000 + round)
        return global_params + torch.randn(len(global_params), generator=g)


class Schedule(Selector):
    """Client 0 in rounds 0 and 5 only (it skips four rounds); others fill in."""

    Config = None
    plan = {0: [0, 1], 1: [2, 3], 2: [2, 4], 3: [3, 4], 4: [2, 5], 5: [0, 2]}

    def target(self):
        return 2

    def select(self, ctx):
        return Cohort(np.array(self.plan[ctx.round]), np.ones(2))


def spying(cls):
    """``cls`` that also records each round's server support and every download it prices."""

    class Spy(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.supports, self.lacking = {}, []

        def server_update(self, r, update):
            out = super().server_update(r, update)
            self.supports[r] = set(torch.nonzero(out.sent).flatten().tolist())
            return out

        def download_bytes(self, lack):
            self.lacking.append(np.asarray(lack).copy())
            return super().download_bytes(lack)

    return Spy


def run_engine(build_simulation, cls, cfg):
    spy = spying(cls)
    sim = build_simulation(RAW, components={
        "algorithm": lambda ctx: DenseHandUpdates(None, ctx.algorithm_context),
        "selector": lambda ctx: Schedule(None, ctx.world),
        "compressor": lambda ctx: spy(cfg, ctx.dim, 0, ctx.store, layout=list(ctx.layout))})
    assert sim.model.sizes == LAYOUT
    res = sim.run()
    return sim, res, sim.compressor.supports, sim.compressor.lacking


def test_stale_client_downloads_union_of_topk_server_supports(build_simulation):
    q = 0.1
    sim, res, supports, lacking = run_engine(build_simulation, TopK, TopK.Config(ratio=q, side="server"))
    ks = Layout(LAYOUT, D).k_for(q)
    assert all(len(supports[r]) == sum(ks) for r in range(6))
    assert [r["coords_changed"] for r in res.rounds] == [len(supports[r]) for r in range(6)]
    union = set().union(*(supports[r] for r in (0, 1, 2, 3, 4)))
    # round 5: client 0 synced at round 0 (through round −1): it lacks rounds 0–4's supports
    assert lacking[5][0] == len(union) < D
    # client 2 ran in round 4 (synced through round 3): it lacks only round 4's support
    assert lacking[5][1] == len(supports[4])
    expected = sparse_bytes(len(union), D) + sparse_bytes(len(supports[4]), D)
    assert res.rounds[5]["bytes_down"] == int(expected)
    # uploads: dense (server-side top-k only)
    assert res.rounds[5]["bytes_up"] == 2 * 4 * D


def test_gluefl_union_over_skipped_rounds_is_at_most_stcs(build_simulation):
    q, q_shr = 0.2, 0.16
    _, res_s, sup_s, lack_s = run_engine(build_simulation, STC, STC.Config(ratio=q))
    _, res_g, sup_g, lack_g = run_engine(build_simulation, GlueFLMaskShifting,
                                         GlueFLMaskShifting.Config(ratio=q, shared_ratio=q_shr))
    lay = Layout(LAYOUT, D)
    k_shr = sum(lay.k_for(q_shr))
    for r in range(5):  # consecutive GlueFL supports overlap in at least the shared mask
        assert len(sup_g[r] & sup_g[r + 1]) >= k_shr
    union_g = set().union(*(sup_g[r] for r in range(5)))
    union_s = set().union(*(sup_s[r] for r in range(5)))
    assert lack_g[5][0] == len(union_g) and lack_s[5][0] == len(union_s)
    assert len(union_g) <= len(union_s)
    assert len(union_g) <= sum(lay.k_for(q)) + 4 * (sum(lay.k_for(q)) - k_shr)
    # the GlueFL client downloads less even though it also receives the shared mask each round
    assert res_g.rounds[5]["bytes_down"] < res_s.rounds[5]["bytes_down"]
