"""What the download ledger counts as changed never hinges on a float's last digit (docs/determinism.md)."""

import numpy as np
import torch

from turnout.compressors.topk import TopK
from turnout.sim.work import record_step
from turnout.world.ledger import INITIAL, CoordinateLedger


def test_a_dense_step_changes_every_coordinate_even_where_the_sum_rounded_back():
    ledger = CoordinateLedger(4, max_rounds=5)
    old = torch.tensor([1.0, 1.0, 1.0, 0.0])
    new = old + torch.tensor([1e-9, 0.0, 0.5, 0.0])  # 1 + 1e-9 rounds back to 1 in float32
    assert (new != old).tolist() == [False, False, True, False]  # what the ledger once counted: a last-digit question
    assert record_step(ledger, 0, new, old, None) == 4
    assert ledger.last_change().tolist() == [0, 0, 0, 0] and ledger.lacking(np.array([-1, 0])).tolist() == [4, 0]


def test_a_round_that_does_not_move_the_model_changes_nothing():
    ledger = CoordinateLedger(5, max_rounds=5)
    old = torch.arange(5, dtype=torch.float32)
    assert record_step(ledger, 0, old.clone(), old, None) == 0
    assert (ledger.last_change() == INITIAL).all() and ledger.lacking(np.array([-1])).tolist() == [0]


def test_a_sparse_step_changes_what_the_compressor_sent():
    c = TopK(TopK.Config(ratio=0.5), dim=4, seed=0)
    step = c.server_update(2, torch.tensor([0.0, 0.25, 0.0, -1.0]))  # the support comes back with the step
    assert step.support.tolist() == [False, True, False, True]
    ledger = CoordinateLedger(4, max_rounds=5)
    old = torch.ones(4)
    assert record_step(ledger, 2, old + step.sent, old, step.support) == 2
    assert ledger.last_change().tolist() == [INITIAL, 2, INITIAL, 2]


def test_recording_every_coordinate_is_the_mask_path_in_o_rounds():
    """record_all leaves the per-coordinate array for later; every reading agrees with the mask path's."""
    a, b = CoordinateLedger(6, max_rounds=5), CoordinateLedger(6, max_rounds=5)
    synced = np.array([-1, 0, 1, 2, 3])
    for ledger in (a, b):
        ledger.record(0, np.array([True, False, True, False, False, False]))
    a.record_all(1)
    b.record(1, np.ones(6, dtype=bool))
    assert a.hist.tolist() == b.hist.tolist() and a.lacking(synced).tolist() == b.lacking(synced).tolist()
    assert a.lacking_mask(0).tolist() == b.lacking_mask(0).tolist() == [True] * 6
    for ledger in (a, b):  # a sparse round after the dense one
        ledger.record(2, np.array([3, 4]))
    assert a.last_change().tolist() == b.last_change().tolist() == [1, 1, 1, 2, 2, 1]
    assert a.hist.tolist() == b.hist.tolist() and a.lacking(synced).tolist() == b.lacking(synced).tolist()
