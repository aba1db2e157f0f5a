"""Clipping, the noise's std and the fixed denominator worked by hand; a planted bug (noise scaled to the wrong
cohort size) caught; adaptive clipping's step by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from turnout.core.records import Reports
from turnout.privacy.base import PrivacyContext, SelectionFacts
from turnout.privacy.clipping import clip_rows
from turnout.privacy.gaussian import AdaptiveClipConfig, GaussianConfig, GaussianDP


def _mech(k: int = 4, **cfg) -> GaussianDP:
    mech = GaussianDP(GaussianConfig(**cfg), PrivacyContext(num_clients=10, seed=7, rounds=5))
    mech.attach(SelectionFacts("uniform", "", target=k))
    return mech


def _reports(updates: torch.Tensor, clients=None) -> Reports:
    k = len(updates)
    clients = np.arange(k) if clients is None else np.asarray(clients)
    return Reports(clients=clients, updates=updates, weights=np.arange(1.0, k + 1), normalize=True,
                   n_samples=np.full(k, 10), losses=np.zeros(k), staleness=np.zeros(k, np.int64))


def test_clipping_by_hand():
    u = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped, norms = clip_rows(u, 1.0)
    np.testing.assert_allclose(norms, [5.0, 0.5, 0.0])
    torch.testing.assert_close(clipped, torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]))
    mech = _mech(clip_norm=1.0)
    out = mech.clip(0, np.array([0, 1, 2]), u)
    torch.testing.assert_close(out, clipped)
    assert mech.round_metrics()["dp_clipped_frac"] == pytest.approx(1 / 3)  # only the (3, 4) report was cut
    assert mech.round_metrics()["dp_clip_norm"] == 1.0


def test_noised_mean_is_the_fixed_denominator_estimate_by_hand():
    """z = 0: no noise, so the estimate is Σ clipped u_i / K with unit weights (the selector's weights ignored),
    K = 4 although only 2 reports arrived: (0.6 + 0.3) / 4 = 0.225 and (0.8 + 0.4) / 4 = 0.3."""
    mech = _mech(k=4, clip_norm=1.0, noise_multiplier=0.0)
    clipped = mech.clip(0, np.array([0, 1]), torch.tensor([[3.0, 4.0], [0.3, 0.4]]))
    mean = mech.privatize(0, _reports(clipped)).weighted_mean()
    torch.testing.assert_close(mean, torch.tensor([0.225, 0.3]))


def measured_noise_std(mech: GaussianDP, arrived: int, dim: int = 200_000) -> float:
    """The std of (noised mean − clipped mean · arrived/K): what the server's estimate carries as noise."""
    updates = torch.zeros(arrived, dim)
    return float(mech.privatize(3, _reports(updates)).weighted_mean().std())


def test_noise_std_is_z_c_over_k_by_hand():
    # z = 2, C = 0.5, K = 4: std on the mean = z·C/K = 0.25, whatever number of reports arrived
    mech = _mech(k=4, clip_norm=0.5, noise_multiplier=2.0)
    for arrived in (4, 3, 1):
        assert measured_noise_std(mech, arrived) == pytest.approx(0.25, rel=0.01)
    assert mech.round_metrics()["dp_noise_std"] == pytest.approx(0.25)


class WrongCohortSize(GaussianDP):
    """The planted bug: the estimate divides by the reports that arrived instead of the K the round wanted, so the
    released sum's noise, as the accountant assumes it, is mis-scaled whenever a report is missing."""

    def privatize(self, round, reports):
        out = super().privatize(round, reports)
        object.__setattr__(out, "denominator", float(max(1, len(reports))))
        return out


def test_planted_bug_noise_scaled_to_the_wrong_cohort_size_is_caught():
    bugged = WrongCohortSize(GaussianConfig(clip_norm=0.5, noise_multiplier=2.0),
                             PrivacyContext(num_clients=10, seed=7, rounds=5))
    bugged.attach(SelectionFacts("uniform", "", target=4))
    assert measured_noise_std(bugged, arrived=4) == pytest.approx(0.25, rel=0.01)  # a full round hides it
    # with 3 of 4 reports in, the check above (std = z·C/K) fails for the bug: 0.5·2/3 = 0.333, not 0.25
    got = measured_noise_std(bugged, arrived=3)
    assert got == pytest.approx(1 / 3, rel=0.01)
    assert got != pytest.approx(0.25, rel=0.01)


def test_noise_is_deterministic_per_seed_and_round():
    a, b = _mech(clip_norm=1.0, noise_multiplier=1.0), _mech(clip_norm=1.0, noise_multiplier=1.0)
    u = torch.zeros(2, 50)
    torch.testing.assert_close(a.privatize(2, _reports(u)).weighted_mean(), b.privatize(2, _reports(u)).weighted_mean())
    assert not torch.equal(a.privatize(2, _reports(u)).weighted_mean(), a.privatize(3, _reports(u)).weighted_mean())


def test_adaptive_clipping_step_by_hand():
    """Andrew et al. 2021 with no noise (z = 0): 4 reports, 1 within C = 1, K = 4 → b̄ = 0.25;
    C ← 1 · exp(−0.2 · (0.25 − 0.5)) = exp(0.05) = 1.051271."""
    mech = _mech(k=4, clip_norm=1.0, noise_multiplier=0.0,
                 adaptive=AdaptiveClipConfig(target_quantile=0.5, clip_lr=0.2))
    u = torch.tensor([[0.5, 0.0], [3.0, 0.0], [0.0, 2.0], [4.0, 0.0]])
    mech.privatize(0, _reports(mech.clip(0, np.arange(4), u)))
    assert mech.clip_norm == pytest.approx(math.exp(0.05), rel=1e-12)


def test_adaptive_clipping_pays_for_the_count_with_the_sum_noise():
    """z = 1, σ_b = K/20 = 1 (K = 20): z_Δ = (1 − (2·1)⁻²)^(−1/2) = (3/4)^(−1/2) = 1.154701."""
    mech = _mech(k=20, noise_multiplier=1.0, adaptive=AdaptiveClipConfig())
    assert mech.count_noise() == 1.0
    assert mech.sum_noise_multiplier() == pytest.approx(1.154701, rel=1e-6)


def test_adaptive_clipping_refuses_too_little_count_noise():
    from turnout.core.errors import ConfigError

    mech = GaussianDP(GaussianConfig(noise_multiplier=4.0, adaptive=AdaptiveClipConfig(count_noise=1.0)),
                      PrivacyContext(num_clients=10, seed=0, rounds=5))
    with pytest.raises(ConfigError, match="privacy.adaptive.count_noise"):
        mech.attach(SelectionFacts("uniform", "", target=20))
