"""Adaptive-OU's 8-bit uploads (§4.3.3, Fig. 3) and FedAvg's under ``quant8`` with ``scope: global`` are the same
quantiser at the same price: the adaptive_ou_8bit results page compares the two, so these tests pin both to one
hand-computed case."""

import numpy as np
import torch

import turnout.algorithms.adaptive_ou  # noqa: F401  (registers components)
from turnout.algorithms.adaptive_ou import AdaptiveOU, AdaptiveOUConfig, quantize_8bit
from turnout.algorithms.base import AlgorithmContext
from turnout.compressors.quantize import Quantize

# min 0, max 255: the 256 levels are the integers 0..255 (step (255 − 0) / (2^8 − 1) = 1), so 0, 3 and 255 lie on a
# level and come back exactly; 1.5 lies halfway between levels 1 and 2 and is rounded up with probability 0.5.
V = torch.tensor([0.0, 1.5, 255.0, 3.0])


def _check_lattice(out: torch.Tensor) -> float:
    assert out[0] == 0.0 and out[2] == 255.0 and out[3] == 3.0
    assert float(out[1]) in (1.0, 2.0)
    return float(out[1])


def test_adaptive_ou_8bit_rounds_to_the_hand_computed_levels_without_bias():
    ups = [_check_lattice(quantize_8bit(V, torch.Generator().manual_seed(s))) for s in range(2000)]
    assert abs(np.mean(ups) - 1.5) < 0.05  # unbiased: E = 1·0.5 + 2·0.5; 2000 draws have std 0.011
    assert {1.0, 2.0} == set(ups)


def test_quant8_global_scope_uses_the_same_levels():
    q = Quantize(Quantize.Config(scope="global"), 4, 0, None, layout=[3, 1])  # global: the layout is ignored
    dec, _ = q.encode_uploads(0, np.arange(2000), V.repeat(2000, 1))
    ups = [_check_lattice(row) for row in dec]
    assert abs(np.mean(ups) - 1.5) < 0.05


def test_both_8bit_uploads_cost_d_plus_8_bytes_and_a_nack_8():
    # D = 610 (the logistic regression 60 → 10): float32 4·610 = 2440 bytes.
    # Adaptive-OU quantize: ⌈2440 / 4⌉ + 8 (float32 minimum and step) = 618; a NACK: nack_bytes = 8.
    # quant8, scope global: ⌈610 · 8 / 8⌉ + 8 (min and max as float32) = 618; per tensor [600, 10]: 610 + 2·8 = 626.
    d = 610
    ctx = AlgorithmContext(num_clients=2, dim=d, n_train=np.array([10, 20]), seed=0, rounds=1)
    alg = AdaptiveOU(AdaptiveOUConfig(quantize=True), ctx)
    ups = torch.zeros(2, d)
    ups[0, 0] = 0.7  # a NACK (norm, 0, …, 0)
    ups[1] = 1.0  # a transmitted update
    assert alg.upload_bytes(0, np.arange(2), ups, np.array([4 * d, 4 * d])).tolist() == [8, 618]
    for scope, size in (("global", 618), ("tensor", 626)):
        q = Quantize(Quantize.Config(scope=scope), d, 0, None, layout=[600, 10])
        assert q.dense_upload_bytes(1).tolist() == [size]
