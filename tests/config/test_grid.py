"""grid: one variant per combination of values, crossed with the explicit variants, named by their values."""

import pytest

from turnout.core.errors import ConfigError
from turnout.sim.composition import expand

BASE = {"name": "g", "rounds": 2, "data": {"name": "synthetic", "num_clients": 10}, "model": {"name": "logreg"},
        "selector": {"name": "uniform", "clients_per_round": 2}}


def test_grid_makes_the_cartesian_product_named_by_values():
    exps = expand({**BASE, "grid": {"train.lr": [0.05, 0.1], "algorithm.server_momentum": [0.0, 0.5, 0.9]}})
    assert [e.variant for e in exps] == [f"lr={lr} server_momentum={m}" for lr in (0.05, 0.1) for m in (0.0, 0.5, 0.9)]
    assert [(e.train.lr, e["algorithm"].cfg.server_momentum) for e in exps] == \
        [(lr, m) for lr in (0.05, 0.1) for m in (0.0, 0.5, 0.9)]


def test_grid_crosses_every_explicit_variant_and_swaps_components():
    exps = expand({**BASE, "grid": {"algorithm": [{"name": "fedavg"}, {"name": "fedprox", "mu": 0.1}]},
                   "variants": [{"name": "K=2"}, {"name": "K=5", "set": {"selector.clients_per_round": 5}}]})
    assert [e.variant for e in exps] == ["K=2 algorithm=fedavg", "K=2 algorithm=fedprox",
                                         "K=5 algorithm=fedavg", "K=5 algorithm=fedprox"]
    assert [e["selector"].cfg.clients_per_round for e in exps] == [2, 2, 5, 5]
    assert exps[3]["algorithm"].name == "fedprox" and exps[3]["algorithm"].cfg.mu == 0.1


def test_command_line_set_does_not_override_a_grid_key_but_reaches_the_rest():
    from turnout.core.errors import ConfigWarning

    with pytest.warns(ConfigWarning, match="--set train.lr reaches no variant"):
        exps = expand({**BASE, "grid": {"train.lr": [0.05, 0.1]}}, {"train.lr": 0.3, "rounds": 7})
    assert [e.train.lr for e in exps] == [0.05, 0.1] and all(e.config.rounds == 7 for e in exps)


@pytest.mark.parametrize("grid,key", [({"train.lr": []}, "grid.train.lr"), ({"train.lr": 0.1}, "grid.train.lr"),
                                      ({"train.lr": [0.1, "0.1"]}, "grid"),
                                      ({"train.bogus": [1]}, "variants[bogus=1].train.bogus"),
                                      ({"train.lr": list(range(1, 40)), "rounds": list(range(1, 40))}, "grid")])
def test_bad_grids_are_one_line_naming_the_key(grid, key):
    with pytest.raises(ConfigError) as e:
        expand({**BASE, "grid": grid})
    assert e.value.key == key
