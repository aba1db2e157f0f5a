"""What an algorithm class declares, and what it no longer declares because its config or its traffic says it."""

import numpy as np
import pytest

from turnout.algorithms.base import Algorithm, AlgorithmContext, Traffic
from turnout.algorithms.fedavg import FedAvg, FedAvgConfig
from turnout.algorithms.fedbuff import FedBuff, FedBuffConfig
from turnout.algorithms.late_reports import UNBOUNDED
from turnout.algorithms.safa import SAFA, SAFAConfig
from turnout.algorithms.stale_aware import StaleAware, StaleAwareConfig


def ctx():
    return AlgorithmContext(4, 3, np.ones(4), 0, 10)


@pytest.mark.parametrize("cls, cfg, bound", [
    (FedAvg, FedAvgConfig(), None), (FedBuff, FedBuffConfig(), UNBOUNDED), (FedBuff, FedBuffConfig(max_staleness=0), 0),
    (SAFA, SAFAConfig(), 5), (SAFA, SAFAConfig(max_staleness=2), 2),
    (StaleAware, StaleAwareConfig(max_staleness=3), 3), (StaleAware, StaleAwareConfig(use_stale=False), None)])
def test_how_stale_a_late_report_may_be_is_the_configs_option(cls, cfg, bound):
    assert cls(cfg, ctx()).max_staleness == bound


@pytest.mark.parametrize("old, fix", [
    ("uplink_vectors", "declare traffic = Traffic(up=...)"),
    ("uses_stale_updates", "give the rule's Config the max_staleness option (turnout.algorithms.late_reports)"),
    ("dp_unsound", "declare reads_each_report (the same reason)")])
def test_a_rule_declaring_a_retired_flag_is_refused_in_one_line(old, fix):
    with pytest.raises(TypeError) as err:
        type("Mine", (Algorithm,), {old: 2})
    assert str(err.value) == f"Mine.{old} is no longer read: {fix}"


def test_traffic_defaults_to_one_model_delta_each_way():
    assert Algorithm.traffic == Traffic(down=1, up=1)
    assert str(Algorithm.upload_kind(FedAvgConfig())) == "model_delta"
