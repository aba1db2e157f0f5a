"""The per-coordinate change record gives exact download sizes for stale clients."""

import numpy as np

from turnout.compressors.base import sparse_bytes
from turnout.world.ledger import CoordinateLedger
from turnout.world.population import NEVER


def brute_force(last_changed, synced):
    return np.array([(last_changed > s).sum() for s in synced])


def test_never_synced_client_lacks_everything():
    led = CoordinateLedger(dim=100, max_rounds=10)
    assert led.lacking(np.array([NEVER]))[0] == 100


def test_lacking_counts_union_of_changes_after_sync():
    led = CoordinateLedger(dim=10, max_rounds=5)
    led.record(0, np.array([0, 1, 2]))
    led.record(1, np.array([2, 3]))
    led.record(2, np.array([3, 4, 5]))
    # synced through round 0 → lacks changes of rounds 1, 2: {2, 3, 4, 5}
    # synced through round 1 → lacks round 2: {3, 4, 5}; through 2 → nothing
    # synced through −1 (got the initial model) → lacks {0..5}
    got = led.lacking(np.array([0, 1, 2, -1, NEVER]))
    assert got.tolist() == [4, 3, 0, 6, 10]


def test_ledger_matches_brute_force_on_random_histories():
    rng = np.random.default_rng(3)
    dim, rounds = 500, 40
    led = CoordinateLedger(dim, rounds)
    for r in range(rounds):
        mask = rng.random(dim) < rng.uniform(0.01, 0.3)
        led.record(r, mask)
        synced = rng.integers(-2, r + 1, size=20)
        np.testing.assert_array_equal(led.lacking(synced), brute_force(led.last_changed, synced))
    assert led.hist.sum() == dim


def test_sparse_bytes_rule():
    dim = 1000
    # dense when everything changed, values + int32 indices when few, bitmap when many
    assert sparse_bytes(1000, dim) == 4000
    assert sparse_bytes(10, dim) == 10 * 4 + 10 * 4
    assert sparse_bytes(500, dim) == 500 * 4 + 125  # bitmap (1000/8 B) beats 500 indices
    assert sparse_bytes(0, dim) == 0
    assert sparse_bytes(990, dim) == 4000  # never more than the dense vector


def test_dense_and_sparse_masks_leave_the_state_the_index_path_leaves():
    """Masks changing ≥ 90 % of the coordinates take the counting path; any mix gives the index path's state."""
    dim, rounds = 5_000, 12
    rng = np.random.default_rng(3)
    fast, slow = CoordinateLedger(dim, rounds), CoordinateLedger(dim, rounds)
    for r in range(rounds):
        share = [1.0, 0.95, 0.9, 0.5, 0.02, 0.0][r % 6]
        mask = rng.random(dim) < share
        assert fast.record(r, mask) == int(mask.sum())
        slow.record(r, np.flatnonzero(mask))  # an index array always takes the index path
        np.testing.assert_array_equal(fast.last_changed, slow.last_changed)
        np.testing.assert_array_equal(fast.hist, slow.hist)
        synced = rng.integers(-2, r + 1, 50)
        np.testing.assert_array_equal(fast.lacking(synced), brute_force(fast.last_changed, synced))
    assert fast.hist.sum() == dim
