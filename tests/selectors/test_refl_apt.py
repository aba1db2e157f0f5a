"""REFL's Adaptive Participant Target over several rounds (REFL §4.1), against hand-computed targets.

μ_t = (1 − α)·D_{t−1} + α·μ_{t−1} with α = 0.25 (μ = D_0 after the first round; 1000 s before any),
B_t = #{in-flight late reports with remaining time RT_s ≤ μ_t}, N_t = max(1, N_0 − B_t) (paper) or
max(⌊0.5·N_0⌋, N_0 − B_t) (the code's capped rule).
"""

import dataclasses

import numpy as np
import pytest
import torch

from turnout.availability.always import AlwaysAvailable
from turnout.core import rng as rngmod
from turnout.core.records import RoundFeedback, SelectionContext
from turnout.selectors.refl import REFLSelector
from turnout.world.context import WorldContext

N0 = 10


def _world(n=100):
    return WorldContext(num_clients=n, n_train=np.full(n, 50), label_hist=np.zeros((n, 2)), seed=0, rounds=10)


def _ctx(w, r, t, pending, remaining):
    """Round ``r`` starting at ``t``; ``pending`` clients' late reports arrive ``remaining`` seconds from now."""
    return SelectionContext(round=r, time_s=t, available=np.arange(60), launch=N0,
                            rng=rngmod.stream(0, "selection", r), world=w, availability=AlwaysAvailable(None, w),
                            probe_loss=None, pending_clients=np.asarray(pending, dtype=np.int64),
                            pending_arrival_s=t + np.asarray(remaining, dtype=np.float64))


def _close(sel, r, clients, duration):
    k = len(clients)
    sel.observe(RoundFeedback(r, np.asarray(clients), np.ones(k, bool), np.zeros(k, bool), np.ones(k),
                              np.full(k, 50), np.ones(k), np.ones(k), torch.zeros(k, 1), duration))


@pytest.mark.parametrize("mode,targets", [("paper", [9, 8, 8, 1]), ("capped", [9, 8, 8, 5]),
                                          ("off", [10, 10, 10, 10])])
def test_refl_apt_targets_follow_the_moving_average_and_the_stragglers_remaining_time(mode, targets):
    w = _world()
    sel = REFLSelector(REFLSelector.Config(clients_per_round=N0, apt=mode, cooldown_rounds=0), w)
    # round 0 at t = 0: no round has closed, μ = 0, so the window is the initial 1000 s.
    # one straggler from before with RT = 900 ≤ 1000, one with RT = 1200 > 1000  → B_0 = 1, N_0' = 9
    rounds = [(0.0, [90, 91], [900.0, 1200.0], 100.0),
              # D_0 = 100 → μ_1 = D_0 = 100. RT = 50, 90 ≤ 100; 150 > 100            → B_1 = 2, N_1 = 8
              (100.0, [90, 91, 92], [50.0, 90.0, 150.0], 60.0),
              # D_1 = 60 → μ_2 = 0.75·60 + 0.25·100 = 45 + 25 = 70. RT = 30, 65 ≤ 70; 90 > 70 → B_2 = 2, N_2 = 8
              # (μ = D_1 = 60 would give B = 1; the weights swapped, 0.25·60 + 0.75·100 = 90, B = 3)
              (160.0, [90, 91, 92], [30.0, 65.0, 90.0], 200.0),
              # D_2 = 200 → μ_3 = 0.75·200 + 0.25·70 = 150 + 17.5 = 167.5; twelve stragglers with RT = 10 … 165
              # (all ≤ 167.5) and one at 168 → B_3 = 12: paper max(1, 10 − 12) = 1, capped max(5, −2) = 5
              (360.0, list(range(80, 93)), [*np.linspace(10.0, 165.0, 12), 168.0], 50.0)]
    mus = []
    for r, (t, pending, remaining, duration) in enumerate(rounds):
        mus.append(sel.mean_round_s)
        cohort = sel.select(_ctx(w, r, t, pending, remaining))
        assert cohort.target == targets[r], r
        assert len(cohort.clients) == targets[r]  # launch = N_t without over-commitment
        assert sel.last_ready == (0 if mode == "off" else [1, 2, 2, 12][r])
        _close(sel, r, cohort.clients, duration)
    assert mus == pytest.approx([0.0, 100.0, 70.0, 167.5])


def test_refl_apt_under_over_commitment_scales_the_launch_with_the_target():
    w = _world()
    sel = REFLSelector(REFLSelector.Config(clients_per_round=N0, apt="paper", cooldown_rounds=0), w)
    sel.mean_round_s = 70.0
    c = _ctx(w, 3, 500.0, [90, 91, 92, 93], [10.0, 20.0, 70.0, 70.1])  # B = 3 (70.1 > 70) → N = 7
    c = dataclasses.replace(c, launch=13)  # OC 1.3: launch ⌈13 · 7 / 10⌉ = ⌈9.1⌉ = 10
    cohort = sel.select(c)
    assert cohort.target == 7 and len(cohort.clients) == 10
