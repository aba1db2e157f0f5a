"""Every shipped experiment file validates (a typo in a reproduction config fails here, not after an hour)."""

import re
from pathlib import Path

import pytest

from turnout.config.loader import load_experiment

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "experiments").rglob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_experiment_file_validates(path):
    variants = load_experiment(path)
    assert variants and len({v.variant for v in variants}) == len(variants)


def settings_of_reproduce_script():
    """(config, [--set values]) of every setting in scripts/reproduce.sh."""
    text = (ROOT / "scripts" / "reproduce.sh").read_text()
    out = []
    for name, config, rest in re.findall(r'"([^"|$]+)\|(experiments/[^"|]+)\|([^"]*)"', text):
        out.append((name, config, [s for s in rest.split("|") if s]))
    return out


@pytest.mark.parametrize("name,config,sets", settings_of_reproduce_script(),
                         ids=[s[0] for s in settings_of_reproduce_script()])
def test_reproduction_settings_validate(name, config, sets):
    assert load_experiment(ROOT / config, sets)
