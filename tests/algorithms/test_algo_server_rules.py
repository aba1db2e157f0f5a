"""Server rules of the FedSUM baselines, SCAFFOLD, FedAdam/FedYogi and FedAvg's lr decay on hand-made reports,
including rounds in which nobody reports."""

import numpy as np
import pytest
import torch

from turnout.algorithms.base import AlgorithmContext, Reports
from turnout.algorithms.fedau import FedAU, FedAUConfig
from turnout.algorithms.fedavg import FedAvg, FedAvgConfig, ServerLRConfig
from turnout.algorithms.fedawe import FedAWE, FedAWEConfig
from turnout.algorithms.fedvarp import FedVARP, FedVARPConfig
from turnout.algorithms.mifa import MIFA, MIFAConfig
from turnout.algorithms.server_optim import AdaptiveServerConfig, FedAdam, FedYogi
from turnout.world.state_store import ClientStateStore


def ctx(n, dim, budget=1 << 30):
    return AlgorithmContext(n, dim, np.full(n, 10), 0, 10, ClientStateStore(dim, n, budget))


def rep(clients, updates, weights=None, dim=2):
    k = len(clients)
    u = torch.tensor(updates, dtype=torch.float32).reshape(k, -1) if k else torch.zeros((0, dim))
    return Reports(np.array(clients, dtype=np.int64), u, np.ones(k) if weights is None else np.array(weights, float),
                   True, np.full(k, 10), np.zeros(k), np.zeros(k, np.int64))


EMPTY = rep([], [])


def test_server_lr_decay_schedule_and_fedavg_default_unchanged():
    cfg = ServerLRConfig(server_lr=1.0, server_lr_decay=0.5, server_lr_decay_every=2, server_lr_min=0.2)
    assert [cfg.server_lr_at(r) for r in range(8)] == [1, 1, 0.5, 0.5, 0.25, 0.25, 0.2, 0.2]
    assert [ServerLRConfig(server_lr=0.7).server_lr_at(r) for r in (0, 5, 10**6)] == [0.7] * 3
    algo = FedAvg(FedAvgConfig(server_lr=2.0, server_lr_decay=0.5, server_lr_decay_every=1), None)
    x = algo.aggregate(0, torch.zeros(2), rep([0], [[1.0, 0.0]]))
    x = algo.aggregate(1, x, rep([0], [[1.0, 0.0]]))
    torch.testing.assert_close(x, torch.tensor([3.0, 0.0]))
    with pytest.raises(ValueError):
        ServerLRConfig(server_lr_decay=1.5)


def fedau_reference(masks, k_cut):
    """The ``IBM/fedau`` main.py loop, per client with Python lists (the code's own data structures)."""
    n = masks.shape[1]
    count, intervals, out = [0] * n, [[] for _ in range(n)], []
    for mask in masks:
        w = {}
        for i in range(n):
            if mask[i]:
                w[i] = float(np.mean(intervals[i])) if intervals[i] else 1.0
                intervals[i].append(count[i] + 1)
                count[i] = 0
            else:
                count[i] += 1
                if count[i] >= k_cut:
                    intervals[i].append(count[i])
                    count[i] = 0
        out.append(w)
    return out


def test_fedau_weights_follow_the_reference_code_including_empty_rounds():
    n, k_cut = 7, 4
    g = np.random.default_rng(3)
    masks = g.random((40, n)) < np.linspace(0.05, 0.9, n)
    masks[5] = False  # an empty round
    algo = FedAU(FedAUConfig(interval_cutoff=k_cut), ctx(n, 2))
    ref = fedau_reference(masks, k_cut)
    x = torch.zeros(2)
    for t, mask in enumerate(masks):
        clients = np.flatnonzero(mask)
        ups = np.tile([[1.0, -2.0]], (len(clients), 1))
        new = algo.aggregate(t, x, rep(clients, ups))
        np.testing.assert_allclose(algo.last_weights, [ref[t][i] for i in clients])
        expect = x + torch.tensor([1.0, -2.0]) * float(sum(ref[t].values())) / n  # D over all N clients
        torch.testing.assert_close(new, expect)
        x = new
    assert (algo.last_weights > 1).any()


def test_mifa_applies_the_memory_every_round_even_when_empty():
    algo = MIFA(MIFAConfig(), ctx(4, 2))
    x = algo.aggregate(0, torch.zeros(2), rep([0], [[4.0, 0.0]]))
    torch.testing.assert_close(x, torch.tensor([1.0, 0.0]))
    x = algo.aggregate(1, x, EMPTY)  # nobody: the stored update is applied again
    torch.testing.assert_close(x, torch.tensor([2.0, 0.0]))
    x = algo.aggregate(2, x, rep([0, 1], [[0.0, 4.0], [4.0, 4.0]]))  # G_0 replaced, G_1 added
    torch.testing.assert_close(x, torch.tensor([3.0, 2.0]))
    algo2 = MIFA(MIFAConfig(server_lr=0.5), ctx(4, 2))
    torch.testing.assert_close(algo2.aggregate(0, torch.zeros(2), EMPTY), torch.zeros(2))


def test_fedvarp_saga_step_and_empty_round():
    algo = FedVARP(FedVARPConfig(), ctx(2, 1))
    rep1 = lambda c, u: rep(c, [[v] for v in u], dim=1)  # noqa: E731
    x = algo.aggregate(0, torch.zeros(1), rep1([0], [2.0]))  # D = 0 + (2 − 0)
    assert float(x) == 2.0
    x = algo.aggregate(1, x, rep1([], []))
    assert float(x) == 2.0  # D = 0, ȳ unchanged
    x = algo.aggregate(2, x, rep1([1], [4.0]))  # D = ȳ(=1) + (4 − 0)
    assert float(x) == 7.0
    x = algo.aggregate(3, x, rep1([0, 1], [1.0, 1.0]))  # D = ȳ(=3) + ((1−2) + (1−4))/2
    assert float(x) == 8.0


def test_fedawe_stale_copies_echo_clip_and_evaluation_model():
    n = 3
    algo = FedAWE(FedAWEConfig(clip=0.5), ctx(n, 2))
    x0 = torch.tensor([1.0, 1.0])
    assert torch.equal(algo.client_start(0, x0), x0)
    x1 = algo.aggregate(0, x0, rep([0], [[0.3, 0.0]]))  # e_0 = 1, ‖0.3‖ < 0.5: no clip
    torch.testing.assert_close(x1, torch.tensor([1.3, 1.0]))
    # round 1: client 1 never took part, so it starts from x^0 and its update is echoed twice
    torch.testing.assert_close(algo.client_start(1, x1), x0)
    torch.testing.assert_close(algo.copies(np.array([0])), x1[None])  # committed at the next sight of x^1
    x2 = algo.aggregate(1, x1, rep([1], [[0.0, 0.2]]))
    torch.testing.assert_close(x2, x0 + torch.tensor([0.0, 0.4]))  # 2·0.2 = 0.4 < 0.5
    # round 2: nobody — the model does not move, the echo counters grow
    x3 = algo.aggregate(2, x2, EMPTY)
    assert torch.equal(x3, x2)
    np.testing.assert_array_equal(algo.echo, [3, 2, 4])
    # round 3: client 2 (missed 3 rounds, e = 4) and client 0 (e = 3); the mean echoed update is clipped to 0.5
    x4 = algo.aggregate(3, x3, rep([0, 2], [[1.0, 0.0], [0.0, 1.0]]))
    echoed = torch.tensor([3.0, 4.0]) / 2  # norm 2.5 → scaled to 0.5
    base = (x1 + x0) / 2  # copies of clients 0 and 2
    torch.testing.assert_close(x4, base + echoed * (0.5 / 2.5))
    # evaluation on the mean of all copies: client 0 and 2 now hold x^4, client 1 holds x^2
    torch.testing.assert_close(algo.eval_params(x4), (2 * x4 + x2) / 3)
    np.testing.assert_array_equal(algo.echo, [1, 3, 1])


def test_fedyogi_and_fedadam_follow_reddi_et_al():
    d = torch.tensor([0.5, -1.0])
    cfg = AdaptiveServerConfig(server_lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    for cls in (FedAdam, FedYogi):
        algo = cls(cfg, None)
        x = algo.aggregate(0, torch.zeros(2), rep([0], [d.tolist()]))
        m = 0.1 * d
        v0 = torch.full((2,), 1e-6)
        v = 0.99 * v0 + 0.01 * d * d if cls is FedAdam else v0 - 0.01 * d * d * torch.sign(v0 - d * d)
        torch.testing.assert_close(x, 0.1 * m / (v.sqrt() + 1e-3))
        assert torch.equal(algo.aggregate(1, x, EMPTY), x)  # empty round: nothing moves
        torch.testing.assert_close(algo.m, m)
    # FedScale/REFL's YoGi: the first round is a plain step and initialises m = Δ, v = Δ²
    algo = FedYogi(AdaptiveServerConfig(server_lr=3e-3, tau=1e-8, init="fedscale"), None)
    x = algo.aggregate(0, torch.zeros(2), rep([0], [d.tolist()]))
    torch.testing.assert_close(x, d)
    x2 = algo.aggregate(1, x, rep([0], [d.tolist()]))
    v = d * d  # sign(v − Δ²) = 0: Yogi keeps v
    torch.testing.assert_close(x2, x + 3e-3 * d / (v.sqrt() + 1e-8))


def test_configs_reject_bad_values():
    from turnout.algorithms.fedprox import FedProxConfig
    from turnout.algorithms.scaffold import ScaffoldConfig

    bad = [(FedProxConfig, {"mu": -0.1}), (ScaffoldConfig, {"form": "three_uplink"}),
           (FedAUConfig, {"interval_cutoff": 0}), (FedAWEConfig, {"clip": 0.0}),
           (AdaptiveServerConfig, {"beta1": 1.0}), (AdaptiveServerConfig, {"init": "zeros"}),
           (MIFAConfig, {"server_lr": 0.0}), (FedVARPConfig, {"momentum": 0.9})]
    for cls, kw in bad:
        with pytest.raises(ValueError):
            cls(**kw)
    assert FedAUConfig(interval_cutoff=None).interval_cutoff is None
    assert FedAWEConfig(clip=None).clip is None and FedAWEConfig().clip == 0.5
    assert ScaffoldConfig().form == "original"


@pytest.mark.parametrize("form", ["original", "single_uplink"])
def test_scaffold_server_rule_rebuilds_both_vectors_and_keeps_c_the_mean(form):
    from turnout.algorithms.scaffold import Scaffold, ScaffoldConfig

    n, dim = 4, 3
    algo = Scaffold(ScaffoldConfig(form=form, server_lr=0.5), ctx(n, dim))
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(dim)
    for r in range(5):
        clients = np.array([[0, 1], [2], [], [1, 3], [0, 1, 2, 3]][r], dtype=np.int64)
        steps = np.array([2, 3, 4, 5])[clients]
        algo.begin_round(r, clients, steps, 0.1 if r != 4 else 0.0)
        c_old, ci_old = algo.c.float().clone(), algo.store.get("scaffold/c_i", clients)
        # local training moves the model, except at η = 0
        ends = [x + (torch.randn(dim, generator=g) if r != 4 else 0.0) for _ in clients]
        ups = torch.stack([algo.client_update(int(c), x, e) for c, e in zip(clients, ends)]) if len(clients) else \
            torch.zeros((0, dim))
        new = algo.aggregate(r, x, Reports(clients, ups, np.ones(len(clients)), True, np.ones(len(clients)),
                                           np.zeros(len(clients)), np.zeros(len(clients), np.int64)))
        dy = torch.stack([e - x for e in ends]) if len(clients) else torch.zeros((0, dim))
        if r == 4:  # η = 0: the model moves by the mean Δy, no control variate changes
            torch.testing.assert_close(algo.store.get("scaffold/c_i", clients), ci_old)
        elif len(clients):
            k_eta = torch.tensor(steps * 0.1, dtype=torch.float32)[:, None]
            torch.testing.assert_close(algo.store.get("scaffold/c_i", clients), ci_old - c_old - dy / k_eta)
        torch.testing.assert_close(new, x + 0.5 * dy.mean(0) if len(clients) else x, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(algo.c.float(), algo.store.get("scaffold/c_i", np.arange(n)).mean(0))
        x = new
    traffic = Scaffold.traffic_for(algo.cfg)
    assert (traffic.up, traffic.down) == ((2, 2) if form == "original" else (1, 2))
