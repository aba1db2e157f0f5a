"""Server rules only read their reports.

When every report of a round is taken, the engine hands the server rule the compressor's decoded
cohort itself rather than a copy, and the selector sees the same tensor afterwards; a rule that
wrote into ``reports.updates`` would change what the selector observes.
"""

import pytest
import torch

from turnout.sim.catalogue import registries


@pytest.mark.parametrize("algorithm", registries()["algorithm"].names())
def test_server_rules_leave_their_reports_as_they_found_them(algorithm, build_simulation):
    raw = {"name": "read-only", "rounds": 3, "data": {"name": "synthetic", "num_clients": 12},
           "model": {"name": "logreg"}, "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
           "selector": {"name": "uniform", "clients_per_round": 4}, "algorithm": {"name": algorithm},
           "eval": {"every": 3}, "output": {"progress": False}}
    sim = build_simulation(raw)
    rule = sim.algorithm.aggregate
    checked = []

    def aggregate(r, params, reports):
        before = reports.updates.clone()
        out = rule(r, params, reports)
        checked.append(len(reports) > 0 and torch.equal(before, reports.updates))
        return out

    sim.algorithm.aggregate = aggregate
    sim.run()
    assert checked == [True, True, True]
