"""APF freezing and b-bit quantisation: dynamics, sizes, determinism; every new compressor runs in the engine."""

import math

import numpy as np
import pytest
import torch

from turnout.compressors.apf import APF
from turnout.compressors.base import sparse_bytes
from turnout.compressors.quantize import Quantize
from turnout.compressors.sparse import bitmap_bytes

D = 40


def apf(**opts):
    return APF(APF.Config(**opts), D, 0)


def signs(r):
    """Coordinates 0–19 move steadily (same sign every round); 20–39 oscillate (sign flips every round)."""
    g = torch.ones(D)
    g[20:] = 1.0 if r % 2 == 0 else -1.0
    return g


def test_apf_freezes_oscillating_coordinates_and_unfreezes_them_after_the_period():
    c = apf(check_every=1, threshold=0.3)
    c.server_update(0, signs(0))  # code round 1: E = A·sign → P = 1 everywhere, nothing stable
    assert c.active.all() and torch.all(c.freeze_len == 0)
    c.server_update(1, signs(1))  # oscillating: |E| = 0.0001, A = 0.0199 → P ≈ 0.005 < θ → L = 1, U = 2 + 1
    assert c.active[:20].all() and not c.active[20:].any()
    assert torch.all(c.freeze_len[20:] == 1) and torch.all(c.unfreeze_at[20:] == 3)
    # frozen coordinates are neither sent by clients nor changed by the server
    dec, up = c.encode_uploads(2, np.array([0, 1]), torch.ones(2, D))
    assert (dec[:, 20:] == 0).all() and (dec[:, :20] == 1).all()
    assert up.tolist() == [20 * 4, 20 * 4]
    # downloads pay for the frozen mask (20 indices = 80 B > bitmap of 5 B)
    assert c.download_bytes(np.array([7])).tolist() == [int(sparse_bytes(7, D)) + bitmap_bytes(D)]
    assert (c.server_update(2, torch.ones(D)).sent[20:] == 0).all()  # code round 3: U = 3 < 3 + 1 → active again
    assert c.active.all()


def test_apf_checks_only_every_f_c_rounds_with_that_rounds_change():
    c = apf(check_every=5)
    for r in range(4):
        c.server_update(r, signs(r))
    assert torch.all(c.ema_abs == 0)  # no check yet: the code's first check is its round 5
    c.server_update(4, signs(4))
    assert torch.allclose(c.ema_abs, torch.full((D,), 0.01, dtype=torch.float64)) and c.active.all()


def test_apf_zero_change_is_not_stable_and_code_accounting():
    c = apf(check_every=1, accounting="gluefl_code")
    c.server_update(0, torch.zeros(D))  # 0/0 → NaN → not stable → stays active
    assert c.active.all()
    assert c.encode_uploads(1, np.array([0]), torch.ones(1, D))[1].tolist() == [4 * D]
    assert c.download_bytes(np.array([0, D])).tolist() == [bitmap_bytes(D), 4 * D]


def q8(**opts):
    return Quantize(Quantize.Config(**opts), 600 + 10, 3, None, layout=[600, 10])


@pytest.mark.parametrize("scheme", ["minmax", "qsgd"])
def test_quantisation_error_bounded_and_sizes(scheme):
    c = q8(scheme=scheme, rounding="nearest")
    u = torch.randn(3, 610, generator=torch.Generator().manual_seed(0))
    dec, up = c.encode_uploads(0, np.array([0, 1, 2]), u)
    scale = 8 if scheme == "minmax" else 4
    assert up.tolist() == [610 + 2 * scale] * 3
    for a, b in ((0, 600), (600, 610)):
        seg = u[:, a:b]
        if scheme == "minmax":
            step = (seg.max(1).values - seg.min(1).values) / 255
        else:
            step = seg.norm(dim=1) / 127
        assert ((dec[:, a:b] - seg).abs() <= step.unsqueeze(1) / 2 + 1e-6).all()
    assert len(torch.unique(dec[0, :600])) <= 256


def test_stochastic_rounding_is_unbiased_and_seeded_per_client():
    c = q8(bits=4)
    u = torch.randn(1, 610, generator=torch.Generator().manual_seed(1))
    a, _ = c.encode_uploads(5, np.array([9]), u)
    b, _ = q8(bits=4).encode_uploads(5, np.array([9]), u)
    assert torch.equal(a, b)  # same (seed, round, client) → same draw
    c_other, _ = c.encode_uploads(5, np.array([4, 9]), u.repeat(2, 1))
    assert torch.equal(c_other[1], a[0])  # independent of who else is in the batch
    mean = torch.stack([c.encode_uploads(r, np.array([9]), u)[0][0] for r in range(400)]).mean(0)
    step = float((u.max() - u.min()) / 15)
    assert float((mean - u[0]).abs().max()) < 0.25 * step


def test_downlink_quantisation_prices_bits_per_lacking_value():
    c = q8(downlink=True)
    s = c.server_update(0, torch.randn(610, generator=torch.Generator().manual_seed(2))).sent
    assert len(torch.unique(s[:600])) <= 256
    assert c.download_bytes(np.array([0, 610, 100])).tolist() == [0, 610 + 16, 100 + min(400, 77) + 16]
    assert q8().download_bytes(np.array([610])).tolist() == [610 * 4]


# ---- every new compressor runs through the engine with FedAvg ------------------------------
RAW = {"name": "comp-engine", "rounds": 6, "data": {"name": "synthetic", "num_clients": 20},
       "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
       "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 3},
       "output": {"progress": False}}


@pytest.mark.parametrize("block", [{"name": "topk", "ratio": 0.1, "side": "both"},
                                   {"name": "stc", "ternary": True, "error_feedback": True},
                                   {"name": "apf", "check_every": 2},
                                   {"name": "quant8", "downlink": True, "scheme": "qsgd"},
                                   {"name": "gluefl"}])
def test_compressor_runs_in_the_engine(block, simulate):
    sim, res = simulate(dict(RAW, compressor=block))
    assert math.isfinite(res.rounds[-1]["loss"])
    dense = 4 * 4 * sim.model.dim
    assert all(r["bytes_up"] <= dense for r in res.rounds)
    if block["name"] != "apf":  # APF sends every active value (all of them until something freezes)
        assert all(r["bytes_up"] < dense for r in res.rounds)
    assert res.rounds[-1]["accuracy"] > 0.1
