"""Every shipped experiment file validates (a typo in a reproduction config fails here, not after an hour)."""

from pathlib import Path

import pytest

from turnout.sim.composition import expand, load_experiment

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "experiments").rglob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_experiment_file_validates(path):
    if "hub" in path.relative_to(ROOT / "experiments").parts[:1]:
        pytest.importorskip("datasets", reason="experiments/hub/ names Hugging Face datasets (turnout[huggingface])")
    variants = load_experiment(path)
    assert variants and len({v.variant for v in variants}) == len(variants)


def test_command_line_set_reaches_variants_that_swap_the_component():
    """A --set on the command line applies to every variant, except where the variant sets the key itself."""
    raw = {"name": "x", "rounds": 1, "data": {"name": "synthetic", "num_clients": 20},
           "model": {"name": "logreg"}, "selector": {"name": "uniform", "clients_per_round": 5},
           "round_mode": {"name": "sync"},
           "variants": [{"name": "plain"},
                        {"name": "poc", "set": {"selector.name": "power_of_choice"}},
                        {"name": "md6", "set": {"selector": {"name": "md", "clients_per_round": 6}}},
                        {"name": "dl", "set": {"round_mode": {"name": "deadline", "deadline_s": 5}}}]}
    got = {e.variant: e for e in expand(raw, {"selector.clients_per_round": 8, "selector.weighting": "equal",
                                              "round_mode": {"name": "deadline", "deadline_s": 9}})}
    assert got["plain"].components["selector"].cfg.clients_per_round == 8
    assert got["poc"].components["selector"].name == "power_of_choice"
    assert got["poc"].components["selector"].cfg.clients_per_round == 8
    assert got["poc"].components["selector"].cfg.weighting == "equal"
    assert got["md6"].components["selector"].cfg.clients_per_round == 6  # the variant's own value wins
    assert got["md6"].components["selector"].name == "md"  # md has no weighting option: not forced on it
    assert got["plain"].components["round_mode"].cfg.deadline_s == 9
    assert got["dl"].components["round_mode"].cfg.deadline_s == 5
