"""The timing policy: chosen once from the round mode's ``timing``, it alone says what reports in flight mean."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from turnout.core.errors import ConfigError
from turnout.round_modes.asynchronous import Asynchronous
from turnout.round_modes.deadline import Deadline
from turnout.round_modes.over_commit import OverCommit
from turnout.round_modes.wait_all import WaitAll
from turnout.sim.timing import AsynchronousTiming, SynchronousTiming, timing_for
from turnout.world.late import LateBuffer
from turnout.world.lost import LostTasks

ENGINE = Path(__file__).resolve().parents[2] / "turnout" / "sim" / "engine.py"


class Rule:
    """The one fact a timing reads of a server rule: how stale a late report it takes may be (None: it takes none)."""

    def __init__(self, max_staleness: int | None):
        self.max_staleness = max_staleness


@pytest.mark.parametrize("mode, timing", [(WaitAll, SynchronousTiming), (Deadline, SynchronousTiming),
                                          (OverCommit, SynchronousTiming), (Asynchronous, AsynchronousTiming)])
def test_each_round_mode_names_its_timing_and_keeps_the_old_flag_in_step(mode, timing):
    assert timing_for(mode) is timing
    assert mode.asynchronous is timing.mixes_cohorts


def test_a_round_mode_naming_an_unknown_timing_is_refused_in_one_line():
    class Tiered(WaitAll):
        timing = "tiered"

    with pytest.raises(ConfigError) as err:
        timing_for(Tiered)
    assert str(err.value) == "round_mode.name = 'tiered': unknown timing; choose one of: asynchronous, synchronous"


def test_a_report_arriving_in_its_own_round_is_fresh_only_under_asynchronous_timing():
    origin = np.array([7, 6, 4])  # ages 0, 1 and 3 in round 7
    no_stale, stale_2 = Rule(None), Rule(2)
    assert SynchronousTiming(no_stale).usable(7, origin).tolist() == [False, False, False]
    assert AsynchronousTiming(no_stale).usable(7, origin).tolist() == [True, False, False]
    assert SynchronousTiming(stale_2).usable(7, origin).tolist() == [True, True, False]
    assert AsynchronousTiming(stale_2).usable(7, origin).tolist() == [True, True, False]


def test_only_asynchronous_timing_hands_the_close_the_reports_in_flight():
    late = LateBuffer(0)
    late.add(3, np.array([1, 2]), np.array([15.0, 40.0]), torch.zeros((2, 0)), np.ones(2), np.ones(2, np.int64),
             np.zeros(2), np.ones(2))
    late.add(0, np.array([5]), np.array([12.0]), torch.zeros((1, 0)), np.ones(1), np.ones(1, np.int64), np.zeros(1),
             np.ones(1))
    lost = LostTasks()
    lost.add(np.array([9]), np.array([30.0]))
    rule = Rule(2)  # round 4: the reports of round 3 are usable, the one of round 0 is too stale
    in_flight, gone = AsynchronousTiming(rule).in_flight(4, 10.0, late, lost)
    assert in_flight.tolist() == [5.0, 30.0] and gone.tolist() == [20.0, 2.0]
    in_flight, gone = SynchronousTiming(rule).in_flight(4, 10.0, late, lost)
    assert len(in_flight) == len(gone) == 0
    # a buffer of K = 1: the too-stale report (arriving first) is taken along but does not count towards K
    arrived = AsynchronousTiming(rule).arrivals(4, 50.0, late, 1)
    assert arrived.clients.tolist() == [5, 1]


def test_the_engine_reads_no_timing_flag_and_no_training_flag():
    source = ENGINE.read_text()
    assert "asynchronous" not in source and "trains_model" not in source
