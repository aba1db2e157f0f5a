"""What the download ledger counts as changed never hinges on a float's last digit (docs/determinism.md)."""

import numpy as np
import torch

from turnout.algorithms.fedavg import FedAvg
from turnout.sim.work import changed_support


def fedavg(momentum=0.0):
    return FedAvg(FedAvg.Config(server_momentum=momentum), None)


def test_a_step_that_rounds_away_still_counts_as_a_change():
    algo = fedavg()
    old = torch.tensor([1.0, 1.0, 1.0])
    step = torch.tensor([1e-9, 0.0, 0.5])  # 1 + 1e-9 rounds back to 1 in float32
    new = algo.stepped(old, step)
    assert new[0] == old[0]  # the value did not move ...
    support = algo.take_step_support()
    assert changed_support(new, old, support, None).tolist() == [True, False, True]  # ... but the step touched it
    assert (new != old).tolist() == [False, False, True]  # what the ledger counted before: a last-digit question
    assert algo.take_step_support() is None  # read once


def test_a_rule_with_memory_changes_every_coordinate_when_it_moves_at_all():
    algo = fedavg()
    old = torch.zeros(4)
    algo.stepped(old, torch.tensor([0.0, 2.0, 0.0, 0.0]), dense=True)
    assert algo.take_step_support().tolist() == [True] * 4
    algo.stepped(old, torch.zeros(4), dense=True)
    assert algo.take_step_support().tolist() == [False] * 4


def test_a_rule_that_does_not_say_is_counted_by_value_and_a_compressor_cuts_to_what_it_sent():
    old, new = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.5, 3.5])
    assert changed_support(new, old, None, None).tolist() == [False, True, True]
    sent = torch.tensor([True, True, False])
    assert changed_support(new, old, torch.ones(3, dtype=torch.bool), sent).tolist() == [True, True, False]
    assert changed_support(new, old, None, sent).dtype == np.bool_
