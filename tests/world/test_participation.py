"""Participation metrics on hand-built schedules."""

import numpy as np

from turnout.world.participation import ParticipationTracker


def test_tau_follows_fedsums_convention():
    tr = ParticipationTracker(4)
    # round 0: clients 0,1 participate → clients 2,3 never did: τ(0) = 0 − (−1) = 1
    assert tr.record(0, np.array([0, 1]), np.array([0, 1])) == 1
    assert tr.record(1, np.array([2, 3]), np.array([2, 3])) == 1  # min τ_i = 0
    # client 1 is selected in round 2 but not aggregated: it last participated in round 0
    assert tr.record(2, np.array([0, 1]), np.array([0])) == 2
    assert tr.record(3, np.array([2]), np.array([2])) == 3
    s = tr.summary(np.array([2, 2, 2, 1]))
    assert s["tau_max"] == 3 and s["tau_avg"] == (1 + 1 + 2 + 3) / 4
    assert s["selection_count_var"] == np.var([2, 2, 2, 1])


def test_cyclic_blocks_give_tau_max_n_over_m_minus_one():
    n, m = 12, 3
    tr = ParticipationTracker(n)
    for t in range(40):
        block = np.arange(m) + m * (t % (n // m))
        tr.record(t, block, block)
    taus = np.array(tr.taus)
    # τ(t) = t + 1 while some block has not had its turn, then n/m − 1 for ever: τ_max = n/m − 1 exactly
    assert taus.tolist()[:4] == [1, 2, 3, 3] and (taus[3:] == n // m - 1).all() and taus.max() == n // m - 1
    cols = tr.client_columns()
    assert (cols["reselect_gap_mean"] == n // m).all() and (cols["participation_gap_max"] == n // m).all()
