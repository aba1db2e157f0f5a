"""FedGS: the 3DG pipeline, the selection solvers (heuristic vs exact HiGHS) and the selector."""

import itertools
import math
import time

import numpy as np
import pytest
import torch

from turnout.availability.fedgs import LogNormal, MoreDataFirst
from turnout.config.components import validate_component
from turnout.core import rng as rngmod
from turnout.core.errors import ConfigError
from turnout.selectors import fedgs_graph as fg
from turnout.selectors import fedgs_solver as fs
from turnout.selectors.base import SELECTORS, RoundFeedback, SelectionContext
from turnout.selectors.fedgs import FedGS
from turnout.selectors.uniform import UniformSelector
from turnout.world.context import WorldContext
from turnout.world.model import ModelView


# ------------------------------------------------------------------------------------------------
# helpers
def make_world(n=30, seed=0, classes=10, extras=None, conc=1.75, model=None):
    """FedGS's 100-client CIFAR-10 partition: n_k ~ lognormal(log(n/N) − 0.5, 1) with n/N = 500, and
    label mixes ~ Dirichlet(1.75 · uniform)."""
    g = np.random.default_rng(1000 + seed)
    sizes = np.maximum(g.lognormal(np.log(500) - 0.5, 1.0, n).astype(np.int64), 1)
    hist = np.stack([g.multinomial(k, g.dirichlet(np.full(classes, conc))) for k in sizes])
    return WorldContext(n, sizes, label_hist=hist, seed=seed, rounds=500, extras=extras, model=model)


def ctx_for(world, r, available, launch=10, availability=None):
    return SelectionContext(round=r, time_s=0.0, available=np.asarray(available, dtype=np.int64), launch=launch,
                            rng=rngmod.stream(world.seed, "selection", r), world=world, availability=availability,
                            probe_loss=None)


def selector(world, **cfg):
    return FedGS(FedGS.Config(**cfg), world)


def feedback(r, clients, updates, aggregated=None):
    k = len(clients)
    agg = np.ones(k, bool) if aggregated is None else np.asarray(aggregated, bool)
    return RoundFeedback(r, np.asarray(clients, np.int64), agg, np.zeros(k, bool), np.zeros(k), np.zeros(k),
                         np.zeros(k), np.zeros(k), torch.as_tensor(updates, dtype=torch.float32), 1.0)


def reference_3dg(features, epsilon=0.01, sigma=0.1):
    """An independent, loop-by-loop transcription of the FedGS code's create_graph_from_features →
    create_adj_from_graph → floyd (cosine similarity), for N small."""
    n = len(features)
    g = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            x, y = np.asarray(features[i], float), np.asarray(features[j], float)
            g[i][j] = g[j][i] = np.dot(x, y) / np.sqrt((x ** 2).sum() * (y ** 2).sum())
    mx, mn = np.max(g), np.min(g)
    for i in range(n):
        g[i][i] = mx
    g = (g - mn) / (mx - mn)
    adj = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            adj[i][j] = adj[j][i] = math.exp(-g[i][j] ** 2 / sigma) if g[i][j] > epsilon else math.inf
    dis = adj.copy()
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if dis[i][k] + dis[k][j] < dis[i][j]:
                    dis[i][j] = dis[i][k] + dis[k][j]
    top = np.max(np.where(np.isinf(dis), -1, dis))
    dis = dis / top
    return np.where(np.isinf(dis), np.max(dis[np.isfinite(dis)]), dis)


def random_instance(seed, n=30, m=6, alpha=1.0, kind=None, num_clients=None):
    g = np.random.default_rng(seed)
    kind = seed % 3 if kind is None else kind
    if kind == 0:  # Dirichlet label skew (CIFAR-like)
        feats = g.dirichlet(np.full(10, 0.3), size=n)
    elif kind == 1:  # two labels per client (FashionMNIST-like)
        feats = np.zeros((n, 10))
        for i in range(n):
            feats[i, g.choice(10, 2, replace=False)] = g.random(2)
    else:  # synthetic local optima
        feats = g.normal(g.normal(0, 0.5, n)[:, None], 1, (n, 610))
    h = fg.distances_from_features(feats)
    counts = g.integers(0, 5, n)
    return fs.build_problem(h, counts, counts.mean(), m, num_clients or n, alpha)


# ------------------------------------------------------------------------------------------------
# 3DG
def test_3dg_matches_a_transcription_of_the_fedgs_code():
    g = np.random.default_rng(3)
    synthetic_optima = g.normal(g.normal(0, 0.5, 12)[:, None], 1, (12, 61))  # cosines of both signs
    labels = g.dirichlet(np.full(10, 0.4), size=12)  # non-negative: the zero diagonal sets the min
    for feats in (synthetic_optima, labels):
        for eps, sig in ((0.01, 0.1), (0.1, 0.01), (0.3, 1.0)):
            # cosines come from unit vectors quantised to 2**-26 (exact on every BLAS kernel; turnout.core.numerics),
            # which moves these [0, 1] distances by up to ~3e-7 from the float transcription
            np.testing.assert_allclose(fg.distances_from_features(feats, epsilon=eps, sigma=sig),
                                       reference_3dg(feats, eps, sig), rtol=0, atol=1e-6)


def test_3dg_shapes_similar_close_dissimilar_disconnected():
    # clients 0–1 and 2–3 share most labels, the groups overlap a little, client 4 shares no label
    feats = np.array([[1, 0, 0.3, 0], [1, 0.02, 0.3, 0], [0.3, 0, 1, 0], [0.3, 0.02, 1, 0], [0, 0, 0, 1.0]])
    h = fg.distances_from_features(feats)
    assert h.shape == (5, 5) and np.allclose(h, h.T) and np.all(np.diag(h) == 0)
    assert h[0, 1] < 1e-3 and h[2, 3] < 1e-3  # same label mix → almost no distance
    assert 0.5 < h[0, 2] <= 1.0 and h[0, 2] > 100 * h[0, 1]
    assert (h[4, :4] == 1.0).all()  # no shared label → no edge → the maximum distance
    # [QUIRK, kept] distances are divided by the largest *finite* one, so when every edge has the same
    # length (two tight clusters, no link between them) within-cluster pairs end at 1.0 too
    tight = fg.distances_from_features(np.array([[1.0, 0], [1.0, 0], [0, 1.0], [0, 1.0]]))
    assert (tight == 1 - np.eye(4)).all()


def test_3dg_edge_cases_zero_features_unknown_clients_and_underflow():
    feats = np.array([[1.0, 0], [0, 0], [1.0, 0.1], [0.5, 1.0]])
    h = fg.distances_from_features(feats)
    assert np.isfinite(h).all() and (h[1, [0, 2, 3]] == 1.0).all()  # a zero vector is similar to nobody
    known = np.array([True, False, True, True])
    hk = fg.distances_from_features(feats, known)
    assert (hk[1, [0, 2, 3]] == 1.0).all() and hk[1, 1] == 0
    sub = fg.distances_from_features(feats[[0, 2, 3]])
    np.testing.assert_allclose(hk[np.ix_([0, 2, 3], [0, 2, 3])], sub)
    # σ so small that exp(−V²/σ) underflows to 0: the edges still exist (zero length), no NaN
    hs = fg.distances_from_features(np.array([[1.0, 0], [1.0, 0.01], [0, 1.0]]), sigma=1e-6)
    assert np.isfinite(hs).all() and hs[0, 1] == 0 and hs[0, 2] == 1.0
    assert fg.distances_from_features(np.ones((1, 3))).tolist() == [[0.0]]
    signed = np.array([[1.0, 0], [-1.0, 0.2], [0.5, 1.0]])
    assert fg.cosine_similarity(signed).min() < 0 and fg.cosine_similarity(signed, clamp_negative=True).min() == 0
    assert (fg.distances_from_features(np.eye(3)) == 1 - np.eye(3)).all()  # all orthogonal: no edges


def test_count_sketch_preserves_cosine_roughly():
    g = np.random.default_rng(0)
    base = g.normal(size=20000)
    u = torch.tensor(np.stack([base + 0.3 * g.normal(size=20000), g.normal(size=20000), base]), dtype=torch.float32)
    sk = fg.CountSketch(20000, 2048, rngmod.stream(0, "t"))(u).numpy()
    full, approx = fg.cosine_similarity(u.numpy()), fg.cosine_similarity(sk)
    assert np.abs(full - approx).max() < 0.1


# ------------------------------------------------------------------------------------------------
# solvers
def brute_force(p):
    return max(p.objective(np.array(c)) for c in itertools.combinations(range(p.n), p.m))


def test_exact_solver_equals_enumeration_on_small_instances():
    for seed in range(6):
        p = random_instance(seed, n=11, m=4, alpha=[0.5, 2.0, 5.0][seed % 3])
        best = brute_force(p)
        ex = fs.solve_exact(p, 10.0)
        assert ex.solver == "exact" and ex.optimal and not ex.hit_limit and len(ex.chosen) == 4
        assert ex.objective == pytest.approx(best, rel=1e-6, abs=1e-9)
        assert ex.bound == pytest.approx(best, rel=1e-4)
        he = fs.solve_heuristic(p)
        assert len(he.chosen) == 4 and he.objective <= best + 1e-12


def check_heuristic_vs_exact(cases):
    print()
    for seed, m, alpha in cases:
        p = random_instance(seed, n=30, m=m, alpha=alpha)
        he = fs.solve_heuristic(p, 5.0)
        ex = fs.solve_exact(p, 30.0)
        ratio = he.objective / ex.objective
        print(f"  30 clients, M={m:2d}, α={alpha}: heuristic/exact = {ratio:.5f}  "
              f"heuristic {he.solve_s * 1e3:6.2f} ms, exact {ex.solve_s * 1e3:8.1f} ms (optimal={ex.optimal})")
        assert ex.optimal and len(he.chosen) == m == len(np.unique(he.chosen))
        assert ex.objective >= he.objective - 1e-9 * abs(ex.objective)
        assert he.objective >= ex.objective - 0.02 * abs(ex.objective)  # within 2 %


def test_heuristic_within_2_percent_of_exact_on_30_client_instances():
    check_heuristic_vs_exact([(0, 6, 1.0), (1, 6, 0.5), (2, 6, 2.0), (3, 10, 1.0), (4, 10, 0.5), (5, 6, 1.0),
                              (7, 10, 2.0), (8, 6, 5.0)])


@pytest.mark.slow
def test_heuristic_within_2_percent_of_exact_many_instances():
    check_heuristic_vs_exact([(s, m, a) for s in range(10, 22) for m, a in ((6, 5.0), (10, 5.0), (10, 2.0))])


def test_closed_forms_and_time_limits():
    p = random_instance(0, n=30, m=6, alpha=0.0)
    for sol in (fs.solve_heuristic(p), fs.solve_exact(p)):
        assert sol.solver == "closed_form" and sol.optimal
        assert set(sol.chosen) == set(np.argsort(-p.d, kind="stable")[:6])
    p = random_instance(1, n=5, m=5)
    assert fs.solve(p, "heuristic").chosen.tolist() == [0, 1, 2, 3, 4]
    # a limit too short to finish: still a feasible answer, flagged
    p = random_instance(2, n=200, m=40, alpha=5.0)
    he = fs.solve_heuristic(p, time_limit_s=1e-9)
    assert he.hit_limit and len(he.chosen) == 40 == len(np.unique(he.chosen))
    ex = fs.solve_exact(random_instance(2, n=40, m=15, alpha=5.0), time_limit_s=0.3)
    assert ex.solver == "exact" and ex.hit_limit and not ex.optimal and len(ex.chosen) == 15
    assert fs.solve(random_instance(0, n=12, m=4), "auto", exact_max_available=12).solver == "exact"
    assert fs.solve(random_instance(0, n=13, m=4), "auto", exact_max_available=12).solver == "heuristic"


def test_default_solver_limits_count_work_not_seconds(monkeypatch):
    """Without time_limit_s the answer cannot depend on the machine's speed: a clock that jumps 1,000 s
    per reading (a machine under heavy load) changes nothing; with time_limit_s it cuts the search."""
    problems = [random_instance(1, n=60, m=12, alpha=5.0), random_instance(2, n=24, m=8, alpha=5.0)]
    calm = [fs.solve_heuristic(problems[0]), fs.solve_exact(problems[1])]
    ticks = iter(range(0, 10**9, 1000))
    monkeypatch.setattr(fs.time, "perf_counter", lambda: float(next(ticks)))
    loaded = [fs.solve_heuristic(problems[0]), fs.solve_exact(problems[1])]
    for a, b in zip(calm, loaded):
        assert a.chosen.tolist() == b.chosen.tolist() and not b.hit_limit
    assert loaded[1].optimal
    cut = fs.solve_heuristic(problems[0], time_limit_s=1.0)
    assert cut.hit_limit and cut.objective < calm[0].objective


def test_swap_and_node_limits_stop_the_search_deterministically():
    p = random_instance(1, n=60, m=12, alpha=5.0)
    greedy = [fs.solve_heuristic(p, max_swaps=0) for _ in range(2)]
    full = fs.solve_heuristic(p)
    assert greedy[0].hit_limit and greedy[0].chosen.tolist() == greedy[1].chosen.tolist()
    assert not full.hit_limit and full.objective > greedy[0].objective
    q = random_instance(2, n=40, m=15, alpha=5.0)
    ex = fs.solve_exact(q, node_limit=1)
    assert ex.solver == "exact" and ex.hit_limit and not ex.optimal and len(np.unique(ex.chosen)) == 15
    assert fs.solve_exact(q, node_limit=1).chosen.tolist() == ex.chosen.tolist()


def test_selector_has_no_wall_clock_limit_by_default():
    from turnout.selectors.fedgs import FedGS

    cfg = FedGS.Config()
    assert cfg.time_limit_s is None and cfg.max_swaps == fs.MAX_SWAPS and cfg.node_limit == fs.NODE_LIMIT
    assert "NOT reproducible" in FedGS.Config.model_fields["time_limit_s"].description


def test_balancing_term_matches_the_fedgs_code():
    h = np.array([[0, 0.5, 1.0], [0.5, 0, 0.2], [1.0, 0.2, 0]])
    counts, n_total, m, alpha = np.array([3, 1, 0]), 10, 2, 2.0
    p = fs.build_problem(h, counts, 1.5, m, n_total, alpha)
    # Ht = α·2/(M(M−1))·H off the diagonal; diag = −(2(v − v̄ − M/N_a) + 1)/(N − 1)
    np.testing.assert_allclose(p.w, alpha * h)
    np.testing.assert_allclose(p.d, -(2 * (counts - 1.5 - m / 3) + 1) / 9)
    # Σ_{i≤j} Ht_ij s_i s_j for s = {0, 2}
    assert p.objective(np.array([0, 2])) == pytest.approx(p.d[0] + p.d[2] + alpha * 1.0)


# ------------------------------------------------------------------------------------------------
# selector
@pytest.mark.parametrize("mode", ["ln", "mdf"])
def test_sampling_count_variance_5x_lower_than_uniform(mode):
    world = make_world(100, seed=0)
    av = LogNormal(LogNormal.Config(beta=0.5), world) if mode == "ln" else \
        MoreDataFirst(MoreDataFirst.Config(beta=0.7), world)
    masks = [np.flatnonzero(av.available(r, 0.0)) for r in range(500)]
    uni = UniformSelector(UniformSelector.Config(clients_per_round=10), world)
    cu = np.zeros(100)
    for r, a in enumerate(masks):
        cu[uni.select(ctx_for(world, r, a, availability=av)).clients] += 1
    print()
    for alpha in (0.0, 0.5, 1.0, 2.0, 5.0):
        sel = selector(world, clients_per_round=10, alpha=alpha)
        cf = np.zeros(100)
        t0 = time.perf_counter()
        for r, a in enumerate(masks):
            c = sel.select(ctx_for(world, r, a, availability=av))
            assert len(c.clients) == min(10, len(a)) and np.isin(c.clients, a).all()
            cf[c.clients] += 1
        wall = time.perf_counter() - t0
        st = sel.stats()
        assert (sel.counts == cf).all() and cf.sum() == cu.sum()
        ratio = cu.var(ddof=1) / cf.var(ddof=1)
        print(f"  {mode}: α={alpha}: Var(counts) uniform {cu.var(ddof=1):7.1f} / FedGS {cf.var(ddof=1):6.1f} "
              f"= {ratio:5.1f}x; mean N_a {st['n_available'].mean():.1f}; solve {st['solve_ms'].mean():.2f} ms "
              f"mean / {st['solve_ms'].max():.2f} ms max; {wall:.2f} s for 500 rounds")
        assert ratio >= 5.0
        assert len(st["round"]) == 500 and not st["hit_limit"].any()


def test_edge_cases_none_one_and_fewer_than_k_available():
    world = make_world(30)
    sel = selector(world, clients_per_round=6)
    empty = sel.select(ctx_for(world, 0, [], launch=6))
    assert len(empty.clients) == 0 and len(empty.weights) == 0 and empty.target == 0
    one = sel.select(ctx_for(world, 1, [7], launch=6))
    assert one.clients.tolist() == [7] and one.weights.tolist() == [float(world.n_train[7])] and one.target == 1
    few = sel.select(ctx_for(world, 2, [3, 9, 20], launch=6))
    assert few.clients.tolist() == [3, 9, 20] and few.normalize and few.target == 3
    np.testing.assert_array_equal(few.weights, world.n_train[[3, 9, 20]].astype(float))
    assert sel.counts.sum() == 4 and sel.counts[7] == 1
    st = sel.stats()
    assert st["solver"].tolist() == ["empty", "single", "closed_form"] and st["m"].tolist() == [0, 1, 3]
    # over-commitment: launch > K picks `launch` clients, the target stays K
    oc = sel.select(ctx_for(world, 3, np.arange(30), launch=8))
    assert len(oc.clients) == 8 and oc.target == 6
    # K = 1: no pair term (the code's 2/(M(M−1)) would divide by zero); the least-sampled client wins
    sel1 = selector(world, clients_per_round=1)
    sel1.counts[:] = 5
    sel1.counts[11] = 0
    assert sel1.select(ctx_for(world, 0, np.arange(30), launch=1)).clients.tolist() == [11]


def test_selector_balances_and_spreads_out_on_a_clustered_graph():
    # two groups of similar label mixes, weakly linked; with equal counts and α > 0 FedGS takes one from each
    hist = np.zeros((10, 4), np.int64)
    hist[:5, 0], hist[5:, 2], hist[:5, 2], hist[5:, 0] = 100, 100, 30, 30
    hist[:, 1] = np.arange(10)
    world = WorldContext(10, hist.sum(1), label_hist=hist, seed=0)
    sel = selector(world, clients_per_round=2, alpha=1.0, solver="exact")
    for r in range(10):
        c = sel.select(ctx_for(world, r, np.arange(10), launch=2)).clients
        assert (c < 5).sum() == 1
    assert (sel.counts == 2).all()  # and every client was picked equally often
    assert set(sel.stats()["solver"]) == {"exact"} and sel.stats()["optimal"].all()


def test_oracle_graph_uses_synthetic_local_optima():
    g = np.random.default_rng(0)
    opt = g.normal(size=(20, 61)).astype(np.float32)
    world = make_world(20, extras={"optimal": opt})
    sel = selector(world, epsilon=0.05, sigma=0.2)
    np.testing.assert_allclose(sel.distances, fg.distances_from_features(opt.astype(np.float64), epsilon=0.05,
                                                                         sigma=0.2))
    plain = selector(make_world(20))
    labels = fg.label_features(make_world(20).label_hist)
    np.testing.assert_allclose(plain.distances, fg.distances_from_features(labels))


def test_update_cosine_warmup_and_online_graph():
    world = make_world(8)
    sel = selector(world, graph="update_cosine", clients_per_round=3)
    warm = sel.select(ctx_for(world, 0, [1, 2], launch=3))
    # FedGS round 0: every client trains, weight 0 (absolute) → the global model does not move
    assert warm.clients.tolist() == list(range(8)) and not warm.normalize and (warm.weights == 0).all()
    assert sel.counts.sum() == 0 and sel.stats()["solver"].tolist() == ["warmup"]
    ups = np.zeros((8, 5))
    ups[:4, 0], ups[4:, 1] = 1.0, 1.0
    ups[0] = [1.0, 0.05, 0, 0, 0]
    agg = np.ones(8, bool)
    agg[7] = False  # its report did not reach the server
    sel.observe(feedback(0, np.arange(8), ups, agg))
    c = sel.select(ctx_for(world, 1, np.arange(8), launch=3))
    assert len(c.clients) == 3
    h = sel.distances
    assert h[1, 2] < 1e-3 and h[1, 5] == 1.0 and (h[7, :7] == 1.0).all()
    np.testing.assert_allclose(h[:7, :7], fg.distances_from_features(ups[:7]))
    assert not sel.known[7] and sel.known[:7].all()
    sel.observe(feedback(1, [7], ups[[6]]))  # client 7 reports later: joins the graph at the next select
    sel.select(ctx_for(world, 2, np.arange(8), launch=3))
    assert sel.known.all() and sel.distances[6, 7] < 1e-3
    # warmup: available launches only the available clients
    sel2 = selector(world, graph="update_cosine", warmup="available")
    assert sel2.select(ctx_for(world, 0, [1, 2], launch=3)).clients.tolist() == [1, 2]


def test_update_cosine_sketches_long_updates():
    world = make_world(4)
    sel = selector(world, graph="update_cosine", warmup="none", sketch_dim=64)
    ups = np.random.default_rng(0).normal(size=(4, 1000))
    sel.observe(feedback(0, np.arange(4), ups))
    assert sel.features.shape == (4, 64)


def linear_forward(flat, x):
    w = flat[:12].view(4, 3)
    return x @ w + flat[12:15]


def test_functional_graph_needs_the_model_and_works_with_it():
    with pytest.raises(ConfigError, match="selector.graph"):
        selector(make_world(6), graph="functional")
    params = torch.zeros(15)
    inputs = torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
    world = make_world(6, model=ModelView(forward=linear_forward, global_params=lambda: params, server_inputs=inputs))
    sel = selector(world, graph="functional", clients_per_round=2)
    warm = sel.select(ctx_for(world, 0, [0], launch=2))
    assert len(warm.clients) == 6
    g = torch.Generator().manual_seed(1)
    ups = torch.randn(6, 15, generator=g)
    ups[1] = ups[0]  # identical local models → identical logits → distance 0
    sel.observe(feedback(0, np.arange(6), ups))
    sel.select(ctx_for(world, 1, np.arange(6), launch=2))
    noise = fg.noise_inputs(world.model.server_inputs, rngmod.torch_generator(world.seed, "fedgs/noise"))
    assert noise.shape == (128, 4)
    expect = fg.functional_features(linear_forward, params[None, :] + ups, noise)
    np.testing.assert_allclose(sel.features, expect, rtol=1e-5)
    np.testing.assert_allclose(sel.distances, fg.distances_from_features(expect), atol=1e-6)
    assert sel.distances[0, 1] < 1e-3 * sel.distances[0, 2:].max()


def test_config_validation_registry_and_state_roundtrip():
    assert SELECTORS.get("fedgs") is FedGS
    cls, cfg = validate_component(SELECTORS, {"name": "fedgs", "alpha": 2, "solver": "auto"}, "selector")
    assert cls is FedGS and cfg.alpha == 2.0
    for bad in ({"solver": "gurobi"}, {"alpha": -1}, {"graph": "label"}, {"sigma": 0}, {"bogus": 1}):
        with pytest.raises(ConfigError, match="selector"):
            validate_component(SELECTORS, {"name": "fedgs", **bad}, "selector")
    with pytest.raises(ConfigError, match="max_clients"):
        selector(make_world(30), max_clients=20)
    world = make_world(30)
    a, b = selector(world), selector(world)
    for r in range(20):
        ctx = ctx_for(world, r, np.arange(0, 30, 2), launch=5)
        assert a.select(ctx).clients.tolist() == b.select(ctx_for(world, r, np.arange(0, 30, 2), 5)).clients.tolist()
    c = selector(world)
    c.load_state_dict(a.state_dict())
    assert (c.counts == a.counts).all()
    assert c.select(ctx_for(world, 20, np.arange(30), 5)).clients.tolist() == \
        a.select(ctx_for(world, 20, np.arange(30), 5)).clients.tolist()


# ------------------------------------------------------------------------------------------------
# engine
def test_engine_runs_fedgs_on_synthetic_with_ln_availability(build_simulation):
    raw = {
        "name": "fedgs", "seeds": [0], "rounds": 6,
        "data": {"name": "synthetic", "variant": "fedgs", "num_clients": 30},
        "model": {"name": "logreg"},
        "train": {"batch_size": 10, "local_steps": 2, "lr": 0.1},
        "selector": {"name": "fedgs", "clients_per_round": 6, "alpha": 1.0},
        "availability": {"name": "ln", "beta": 0.5},
        "eval": {"every": 3}, "output": {"progress": False},
    }
    sim = build_simulation(raw)
    data = sim.data
    res = sim.run()
    sel = sim.selector
    assert isinstance(sel, FedGS)
    np.testing.assert_allclose(sel.distances, fg.distances_from_features(data.extras["optimal"].astype(np.float64)))
    assert all(0 < row["n_selected"] <= 6 for row in res.rounds)
    assert np.isfinite(res.rounds[-1]["loss"])
    np.testing.assert_array_equal(sim.population.times_selected, sel.counts)
    assert len(sel.stats()["round"]) == 6

    # update_cosine: round 0 is FedGS's warm-up (all 30 clients, model unchanged), then the learned graph
    raw2 = {**raw, "rounds": 3, "selector": {"name": "fedgs", "clients_per_round": 6, "graph": "update_cosine"}}
    sim2 = build_simulation(raw2)
    start = sim2.params.clone()
    row0 = sim2.step(0)
    assert row0["n_selected"] == 30 and torch.equal(sim2.params, start)
    sim2.step(1)
    assert sim2.selector.known.all() and not torch.equal(sim2.params, start)


def test_engine_functional_graph_and_solver_columns(tmp_path):
    """With the engine's model hooks FedGS's functional graph runs, and solver stats reach rounds.csv."""
    from turnout.app.cli import main

    cfg = tmp_path / "fg.yaml"
    cfg.write_text("""
name: fg
rounds: 3
data: {name: synthetic, variant: fedgs, num_clients: 12}
model: {name: logreg}
train: {batch_size: 10, local_steps: 2}
selector: {name: fedgs, clients_per_round: 3, graph: functional}
availability: {name: ln, beta: 0.5}
output: {progress: false, plots: false}
""")
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    import csv

    rows = list(csv.DictReader(open(tmp_path / "out" / "rounds.csv")))
    assert len(rows) == 3 and all(r["fedgs_solver"] for r in rows)
    assert rows[-1]["loss"] != ""


def test_learned_3dgs_on_a_hand_computed_three_client_case():
    """FedGS Table 4's learned graphs, worked by hand. Clients' features (round-0 updates for update_cosine, mean
    logits for functional) u0 = (1, 0), u1 = (1, 1), u2 = (0, 1): cos(u0, u1) = cos(u1, u2) = 1/√2, cos(u0, u2) = 0.
    Normalised with the zero diagonal inside the min/max: lo = 0, hi = 1/√2, so V01 = V12 = 1 and V02 = 0. Edges
    where V > ε = 0.01: 0–1 and 1–2, each of length exp(−1²/σ) = e^−10 (σ = 0.1); 0–2 has none. Shortest paths:
    d01 = d12 = e^−10, d02 = 2e^−10 (through 1); divided by the largest, 2e^−10: H01 = H12 = 0.5, H02 = 1."""
    hand = np.array([[0, 0.5, 1], [0.5, 0, 0.5], [1, 0.5, 0]])
    feats = np.array([[1.0, 0, 0], [1.0, 1.0, 0], [0, 1.0, 0]])
    world = make_world(3)
    cos = selector(world, graph="update_cosine", clients_per_round=2)
    cos.select(ctx_for(world, 0, [0, 1, 2], launch=2))  # the warm-up round: everyone trains
    cos.observe(feedback(0, [0, 1, 2], feats))
    cos.select(ctx_for(world, 1, [0, 1, 2], launch=2))
    np.testing.assert_allclose(cos.distances, hand, rtol=0, atol=1e-6)
    # functional: a linear model whose weights are zero outputs its bias on every input, so each client's mean
    # logits on the noise batch are exactly its bias — the same three vectors, hence the same graph
    params = torch.zeros(15)
    world = make_world(3, model=ModelView(forward=linear_forward, global_params=lambda: params,
                                          server_inputs=torch.ones(8, 4)))
    fun = selector(world, graph="functional", clients_per_round=2)
    fun.select(ctx_for(world, 0, [0, 1, 2], launch=2))
    ups = torch.zeros(3, 15)
    ups[:, 12:15] = torch.as_tensor(feats, dtype=torch.float32)
    fun.observe(feedback(0, [0, 1, 2], ups))
    fun.select(ctx_for(world, 1, [0, 1, 2], launch=2))
    np.testing.assert_allclose(fun.features, feats, rtol=0, atol=1e-6)
    np.testing.assert_allclose(fun.distances, hand, rtol=0, atol=1e-6)
