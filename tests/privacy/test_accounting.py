"""The accountant's ε against dp-accounting's own reference numbers, and per-client ε worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

pytest.importorskip("dp_accounting")

from turnout.privacy import accounting  # noqa: E402
from turnout.privacy.base import PrivacyContext, SelectionFacts  # noqa: E402
from turnout.privacy.gaussian import GaussianConfig, GaussianDP  # noqa: E402


def test_standard_epsilon_matches_the_library_reference_pld():
    # dp-accounting's pld_privacy_accountant_test.test_self_composed_subsampled_gaussian: Poisson q = 0.2,
    # z = 0.5, 3 rounds has ε = 1 at δ = 0.15594 (within 1e-3)
    assert accounting.standard_epsilon(0.2, 0.5, 3, 0.15594, "pld") == pytest.approx(1.0, abs=1e-3)


def test_amplified_rdp_matches_the_library_reference_curve():
    # dp-accounting's rdp_privacy_accountant_test.test_compute_rdp_poisson_sampled_gaussian: q = 0.01, z = 2.5,
    # 50 rounds; RDP at orders 1.5, 2.5, 5, 50. The ledger sums one round's curve 50 times, per client.
    ledger = accounting.AmplifiedLedger(3, 2.5)
    for _ in range(50):
        ledger.record(np.array([0, 2]), np.array([0.01, 0.01]))
    orders = accounting.rdp_orders().tolist()
    got = [ledger.rdp[0][orders.index(a)] for a in (1.5, 2.5, 5, 50)]
    np.testing.assert_allclose(got, [6.70579741e-04, 1.08548710e-03, 2.18075656e-03, 2.38460375e-02], rtol=1e-5)
    assert not ledger.rdp[1].any()  # client 1 was never available: nothing released about it
    # the summed curve gives the same ε as the library composing the 50 rounds itself
    assert ledger.epsilons(1e-5)[0] == pytest.approx(accounting.standard_epsilon(0.01, 2.5, 50, 1e-5, "rdp"), rel=1e-9)
    assert ledger.epsilons(1e-5)[1] == 0.0


def _gaussian_delta(eps: float, sigma: float) -> float:
    """The exact δ(ε) of a Gaussian mechanism of sensitivity 1 and std σ (Balle & Wang 2018, Thm. 8)."""
    return norm.cdf(0.5 / sigma - eps * sigma) - math.exp(eps) * norm.cdf(-0.5 / sigma - eps * sigma)


def test_three_client_schedule_worked_by_hand():
    """Clients aggregated in 3, 1 and 0 rounds at z = 2, δ = 1e-5, no amplification.

    By hand (RDP): the Gaussian of multiplier z composed n times has RDP n·α / (2 z²); the library converts
    with ε = min_α [RDP(α) + log((α − 1)/α) − (log δ + log α) / (α − 1)]. Over its default orders this is
    2.16572 for n = 1 (at α = 9.6) and 4.01132 for n = 3 (α = 6.1); 0 for a client never aggregated.
    PLD is exact for a Gaussian: n compositions at z are one Gaussian of std z/√n, so δ(ε) from the closed
    form at the PLD's ε must give back δ = 1e-5.
    """
    times = np.array([3, 1, 0])
    np.testing.assert_allclose(accounting.client_epsilons(times, 2.0, 1e-5, "rdp"), [4.01132, 2.16572, 0.0],
                               atol=1e-5)
    pld = accounting.client_epsilons(times, 2.0, 1e-5, "pld")
    assert pld[2] == 0.0
    for n, eps in zip((3, 1), pld[:2]):
        assert _gaussian_delta(eps, 2.0 / math.sqrt(n)) == pytest.approx(1e-5, rel=0.02)
    assert pld[0] < 4.01132 and pld[1] < 2.16572  # PLD is tighter than RDP


def test_summary_reports_standard_and_per_client_epsilon():
    mech = GaussianDP(GaussianConfig(clip_norm=1.0, noise_multiplier=2.0, budget_epsilon=3.0),
                      PrivacyContext(num_clients=3, seed=0, rounds=4))
    mech.attach(SelectionFacts("uniform", "", target=1))
    summary, cols = mech.summary(np.array([3, 1, 0]), rounds_run=4)
    np.testing.assert_allclose(cols["epsilon"], [4.01132, 2.16572, 0.0], atol=1e-5)
    assert summary["dp_epsilon_client_max"] == pytest.approx(4.01132, abs=1e-5)
    assert summary["dp_epsilon_client_median"] == pytest.approx(2.16572, abs=1e-5)
    assert summary["dp_epsilon_over_budget"] == pytest.approx(1 / 3)  # only the client aggregated 3 times
    # the standard figure: Poisson at q = K/N = 1/3 over the 4 rounds run
    assert summary["dp_epsilon"] == pytest.approx(accounting.standard_epsilon(1 / 3, 2.0, 4, 1e-5), rel=1e-12)
    assert summary["dp_epsilon"] < summary["dp_epsilon_client_max"]


def test_a_selector_that_reads_client_data_gets_no_amplification_and_a_note():
    mech = GaussianDP(GaussianConfig(noise_multiplier=1.0), PrivacyContext(num_clients=3, seed=0, rounds=2))
    mech.attach(SelectionFacts("oort", "ranks clients by their training losses (statistical utility)", target=1))
    mech.record_selection(0, np.arange(3), np.full(3, 1 / 3))
    summary, cols = mech.summary(np.array([1, 1, 0]), rounds_run=1)
    assert "epsilon_amplified" not in cols
    assert "oort" in summary["dp_amplified_off_because"] and "losses" in summary["dp_selection_note"]


def test_no_noise_means_no_guarantee():
    mech = GaussianDP(GaussianConfig(noise_multiplier=0.0), PrivacyContext(num_clients=3, seed=0, rounds=2))
    mech.attach(SelectionFacts("uniform", "", target=1))
    summary, cols = mech.summary(np.array([1, 1, 0]), rounds_run=2)
    assert "dp_epsilon" not in summary and "no privacy" in summary["dp_note"] and cols == {}
    assert accounting.standard_epsilon(0.1, 0.0, 5, 1e-5) == math.inf
