"""The round's contracts: the engine names no component, config validation imports none, the round reads as phases."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

import turnout.sim.engine
from turnout.sim.catalogue import SEAMS

ENGINE = Path(turnout.sim.engine.__file__).read_text()


def test_importing_config_imports_no_component_package():
    components = sorted(s.package for s in SEAMS)
    code = ("import sys, turnout.config, turnout.config.loader, turnout.config.schema, turnout.config.components\n"
            f"print([m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in {components!r})])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_engine_never_probes_a_component_and_names_no_paper():
    assert "getattr(" not in ENGINE and "hasattr(" not in ENGINE
    papers = ["gluefl", "refl", "fedgs", "oort", "scaffold", "fedsum", "adaptive", "sticky", "fedprox", "safa",
              "fedawe", "fedau", "mifa", "fedvarp", "power_of_choice", "stc", "apf", "flash", "fedscale"]
    found = [p for p in papers if re.search(rf"\b{p}\b", ENGINE, re.IGNORECASE)]
    assert not found


def test_a_round_is_a_handful_of_phases():
    lines = inspect.getsource(turnout.sim.engine.Simulation.step).splitlines()
    assert len(lines) <= 40
    body = "\n".join(lines)
    for phase in ("_open", "_train", "_settle", "_aggregate", "_account"):
        assert f"self.{phase}(" in body
