"""SecAgg / SecAgg+ cost and failure model worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from turnout.core.records import RoundClose
from turnout.privacy.secagg import SecAgg, SecAggConfig, SecAggPlus, SecAggPlusConfig


def _free(j, b):  # an infinitely fast link: only round trips and the PRG take time
    return np.zeros(len(np.atleast_1d(j)))


def _verdict(aggregated) -> RoundClose:
    agg = np.asarray(aggregated, bool)
    return RoundClose(aggregated=agg, late=np.zeros(len(agg), bool), duration_s=10.0, busy_s=np.ones(len(agg)))


def test_secagg_round_by_hand():
    """4 launched, 3 submit, all 3 online to unmask; k = n − 1 = 3 neighbours, dim 1000.
    Keys and shares: up 2·32 + 3·64 = 256 B, down 2·32·3 + 3·64 = 384 B per client before training;
    unmasking: each survivor sends 3·64 = 192 B and gets 4·4 = 16 B of ids. Setup 2 round trips = 0.2 s;
    unmasking 0.1 s + PRG (1 dropped × 3 submitted pair masks + 3 self masks) · 1000 / 1e6 = 0.006 s.
    t = max(2, ⌈0.5 · 4⌉) = 2 ≤ 3 survivors: the round stands."""
    sa = SecAgg(SecAggConfig(threshold=0.5, key_bytes=32, share_bytes=64, round_trip_s=0.1, prg_values_per_s=1e6))
    verdict = _verdict([1, 1, 1, 0])
    out, bill = sa.close(verdict, 10.0, np.array([100.0, 100.0, 100.0, 1.0]), _free, _free, dim=1000)
    assert out is verdict and not bill.failed
    np.testing.assert_array_equal(bill.up, [256 + 192, 256 + 192, 256 + 192, 256])
    np.testing.assert_array_equal(bill.down, [384 + 16, 384 + 16, 384 + 16, 384])
    assert bill.setup_s == pytest.approx(0.2)
    assert bill.unmask_s == pytest.approx(0.106)
    assert (bill.submitted, bill.survivors, bill.dropped, bill.threshold) == (3, 3, 1, 2)


def test_secagg_fails_when_survivors_fall_below_the_threshold():
    """Same round, but two of the three that submitted go offline before unmasking (at 10.2 s < 10 + 0.2 + 0.1):
    1 survivor < t = 2, so nothing is aggregated."""
    sa = SecAgg(SecAggConfig(threshold=0.5, round_trip_s=0.1, prg_values_per_s=1e6))
    verdict = RoundClose(aggregated=np.array([1, 1, 1, 0], bool), late=np.array([0, 0, 0, 1], bool), duration_s=10.0,
                         busy_s=np.ones(4))
    out, bill = sa.close(verdict, 10.0, np.array([100.0, 10.2, 10.2, 1e9]), _free, _free, dim=1000,
                         sent_up=np.full(4, 4000))
    assert bill.failed and bill.survivors == 1
    assert not out.aggregated.any()
    np.testing.assert_array_equal(out.late, [0, 0, 0, 1])  # a straggler still computing finishes as it would have
    # the three masked inputs were sent (4000 B each) on top of keys and shares (256 B; the survivor 192 B more)
    np.testing.assert_array_equal(bill.up, [256 + 192 + 4000, 256 + 4000, 256 + 4000, 256])


def test_secagg_plus_shares_with_log_many_neighbours():
    """n = 100, c = 3: k = ⌈3 · log₂ 100⌉ = ⌈19.93⌉ = 20 neighbours (SecAgg: 99), so the key-share bytes shrink
    by 99/20 and the pairwise unmasking work by the same factor."""
    plus = SecAggPlus(SecAggPlusConfig(neighbours_per_log2=3.0, share_bytes=64, key_bytes=32))
    full = SecAgg(SecAggConfig(share_bytes=64, key_bytes=32))
    assert plus.neighbours(100) == 20 and full.neighbours(100) == 99
    agg = np.r_[np.ones(90), np.zeros(10)]
    _, bp = plus.close(_verdict(agg), 10.0, np.full(100, 1e9), _free, _free, dim=10)
    _, bf = full.close(_verdict(agg), 10.0, np.full(100, 1e9), _free, _free, dim=10)
    assert bp.up[-1] == 2 * 32 + 20 * 64 and bf.up[-1] == 2 * 32 + 99 * 64
    assert bp.unmask_s < bf.unmask_s
