"""The gluefl_network page's over-commitment settings give GlueFL App. F's splits (Table 3a / 3b)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from turnout.config.loader import parse_override, read_yaml
from turnout.round_modes.over_commit import OverCommit, OverCommitConfig
from turnout.selectors.sticky import StickySelector
from turnout.sim.composition import expand
from turnout.world.context import WorldContext

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments" / "gluefl"


def _variants(name: str, *sets: str) -> dict[str, dict]:
    overrides = dict(parse_override(s) for s in sets)
    return {v.variant: v.as_dict() for v in expand(read_yaml(EXPERIMENTS / f"{name}.yaml"), overrides)}


def _split(cfg: dict) -> tuple[int, int, int]:
    """(launched, sticky candidates, non-sticky candidates) of a round after the first."""
    rm = {k: v for k, v in cfg["round_mode"].items() if k != "name"}
    launch = OverCommit(OverCommitConfig(**rm)).launch_count(cfg["selector"]["clients_per_round"])
    sel_opts = {k: v for k, v in cfg["selector"].items() if k != "name"}
    n = cfg["data"]["num_clients"]
    world = WorldContext(num_clients=n, n_train=np.full(n, 50), label_hist=np.zeros((n, 2)), seed=0, rounds=10)
    n_st, n_ch = StickySelector(StickySelector.Config(**sel_opts), world).candidate_counts(launch)
    return launch, n_st, n_ch


@pytest.mark.parametrize("oc,launch,extra_sticky,extra_fresh", [
    # K = 30, C = 24, K − C = 6; "10 %" strategy: non-sticky extras = round(0.9 · (launch − 30))
    ("1.0", 30, 0, 0),   # no extras
    ("1.3", 39, 1, 8),   # 9 extras: round(8.1) = 8 fresh, 1 sticky — Table 3a's row "10 % (1 : 8)"
    ("1.5", 45, 1, 14),  # 15 extras: round(13.5) = 14 (half to even), 1 sticky
])
def test_gluefl_oc_values_use_the_10_percent_strategy(oc, launch, extra_sticky, extra_fresh):
    cfg = _variants("over_commit", f"round_mode.oc={oc}")["gluefl"]
    assert _split(cfg) == (launch, 24 + extra_sticky, 6 + extra_fresh)


@pytest.mark.parametrize("variant,extra_sticky,extra_fresh", [
    ("gluefl 30% (3:6)", 3, 6),  # round(0.7 · 9) = round(6.3) = 6
    ("gluefl 50% (5:4)", 5, 4),  # round(0.5 · 9) = round(4.5) = 4 (half to even)
    ("gluefl C:K (7:2)", 7, 2),  # unset: n_ch = round(6 · 39 / 30) = round(7.8) = 8 = 6 + 2
])
def test_gluefl_oc_strategies_match_table_3a(variant, extra_sticky, extra_fresh):
    assert _split(_variants("oc_strategy")[variant]) == (39, 24 + extra_sticky, 6 + extra_fresh)
