"""Shared test fixtures: a tiny experiment, and simulations built (or run) with injected components.

Test-session settings: one torch thread (small models run fastest single-threaded, and the
2-core CI machine is shared by the test process and the engine's own work).

Fixtures that return functions (``simulate``, ``build_simulation``) keep one dataset per
(data block, seed) for the whole session, so a test file that builds twenty simulations on the
same population builds its data once.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from turnout.devices.base import DeviceModel
from turnout.world.population import DeviceProfiles

torch.set_num_threads(1)

#: 20 synthetic clients, logistic regression, 4 per round, 3 rounds — runs in well under a second.
TINY = {"name": "tiny", "rounds": 3, "data": {"name": "synthetic", "num_clients": 20}, "model": {"name": "logreg"},
        "train": {"batch_size": 10, "local_steps": 4, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": 4}, "eval": {"every": 1},
        "output": {"progress": False, "plots": False}}

_DATASETS: dict[tuple[str, int], object] = {}


def dataset_for(exp, seed: int):
    """The dataset of ``exp`` on ``seed``, built once per session."""
    from turnout.runs.experiment import prepare

    key = (json.dumps(exp["data"].as_dict(), sort_keys=True), seed)
    if key not in _DATASETS:
        _DATASETS[key] = prepare([exp]).dataset_for(exp, seed)
    return _DATASETS[key]


def _build(raw: dict, seed: int = 0, components=None, scratch_dir=None, variant: int = 0):
    from turnout.sim.composition import expand
    from turnout.sim.engine import Simulation

    exp = expand(copy.deepcopy(raw))[variant]
    return Simulation(exp, dataset_for(exp, seed), seed, scratch_dir=scratch_dir, components=components)


def _simulate(raw: dict, seed: int = 0, components=None, observers=(), scratch_dir=None, variant: int = 0):
    sim = _build(raw, seed, components, scratch_dir, variant)
    return sim, sim.run(observers)


class EditedCompute(DeviceModel):
    """The configured devices with their per-sample compute seconds replaced by ``edit(default)``."""

    def __init__(self, inner: DeviceModel, edit):
        self.inner, self.edit = inner, edit

    def profiles(self, num_clients: int, seed: int) -> DeviceProfiles:
        p = self.inner.profiles(num_clients, seed)
        compute = np.asarray(self.edit(p.compute_s_per_sample.copy()), dtype=np.float64)
        return DeviceProfiles(compute, p.down_bytes_per_s, p.up_bytes_per_s)


@pytest.fixture(scope="session")
def compute_speeds():
    """``compute_speeds(edit)`` → a ``devices`` factory for ``components=``: the configured devices with
    ``compute_s_per_sample = edit(default array)`` (heterogeneous speeds on a homogeneous population)."""
    return lambda edit: (lambda ctx: EditedCompute(ctx.exp["devices"].build(), edit))


@pytest.fixture(scope="session")
def spy():
    """``spy(seam, method, keep)`` → a factory for ``components=``: the configured component of ``seam``
    (same class, same options) that appends ``keep(component, result, *args)`` to its ``calls`` list
    after every ``method`` call. Tests observe a component's traffic without monkeypatching it."""

    def make(seam: str, method: str, keep=lambda obj, result, *args: (result, *args)):
        from turnout.config.loader import Component
        from turnout.sim.composition import BUILDERS

        def factory(ctx):
            comp = ctx.exp[seam]

            def wrapper(self, *args, **kwargs):
                result = getattr(super(cls, self), method)(*args, **kwargs)
                self.calls.append(keep(self, result, *args, **kwargs))
                return result

            cls = type(f"Spied{comp.cls.__name__}", (comp.cls,), {method: wrapper})
            obj = BUILDERS[seam](Component(comp.name, cls, comp.cfg), ctx)
            obj.calls = []
            return obj

        return factory

    return make


@pytest.fixture
def tiny() -> dict:
    """A fresh copy of :data:`TINY` to edit."""
    return copy.deepcopy(TINY)


@pytest.fixture
def two_variant_run(tmp_path, tiny):
    """``two_variant_run(seeds) -> Path``: a finished run folder of the tiny experiment, variants K4 and K8 (4 and 8
    clients a round), 4 rounds evaluated every round against a target of 0.15 (what the report tests read)."""
    def run(seeds: list[int]) -> Path:
        from turnout.app.cli import main

        tiny.update(seeds=seeds, rounds=4, eval={"every": 1, "target_accuracy": 0.15},
                    data={"name": "synthetic", "num_clients": 10},
                    variants=[{"name": "K4"}, {"name": "K8", "set": {"selector.clients_per_round": 8}}])
        cfg = tmp_path / "tiny.yaml"
        cfg.write_text(yaml.safe_dump(tiny))
        out = tmp_path / "run"
        assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
        return out
    return run


@pytest.fixture(scope="session")
def build_simulation():
    """``build_simulation(raw, seed=0, components=None, scratch_dir=None, variant=0) -> Simulation``.

    ``components`` injects components instead of the configured ones (see ``turnout.sim.composition.compose``).
    """
    return _build


@pytest.fixture(scope="session")
def simulate():
    """``simulate(raw, seed=0, components=None, observers=(), scratch_dir=None, variant=0) -> (sim, result)``."""
    return _simulate
