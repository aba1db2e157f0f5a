"""The server step component: every rule's direction applied in one place, on hand-worked numbers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from turnout.algorithms.base import AlgorithmContext, Reports
from turnout.algorithms.fedau import FedAU, FedAUConfig
from turnout.algorithms.fedavg import FedAvg, FedAvgConfig
from turnout.algorithms.fedvarp import FedVARP, FedVARPConfig
from turnout.algorithms.mifa import MIFA, MIFAConfig
from turnout.algorithms.server_step import Direction, ServerStep, ServerStepConfig
from turnout.core.errors import ConfigError
from turnout.sim.composition import load_experiment
from turnout.world.state_store import ClientStateStore

ROOT = Path(__file__).resolve().parents[2]


def ctx(n, dim):
    return AlgorithmContext(n, dim, np.full(n, 10), 0, 10, ClientStateStore(dim, n, 1 << 30))


def rep(clients, updates):
    k = len(clients)
    u = torch.tensor(updates, dtype=torch.float32).reshape(k, -1) if k else torch.zeros((0, 2))
    return Reports(np.array(clients, np.int64), u, np.ones(k), True, np.full(k, 10), np.zeros(k), np.zeros(k, np.int64))


def test_sgd_momentum_and_nesterov_by_hand():
    x = torch.tensor([0.0, 0.0])
    heavy = ServerStep(ServerStepConfig(lr=0.5, momentum=0.5))
    nest = ServerStep(ServerStepConfig(lr=0.5, momentum=0.5, nesterov=True))
    d1, d2 = torch.tensor([2.0, -4.0]), torch.tensor([4.0, 0.0])
    # b1 = d1 = [2, −4]; b2 = 0.5·b1 + d2 = [5, −2]
    assert heavy.apply(0, x, d1).tolist() == [1.0, -2.0]
    assert heavy.apply(1, x, d2).tolist() == [2.5, -1.0]
    # Nesterov steps d + β·b: [2, −4] + 0.5·[2, −4] = [3, −6]; then [4, 0] + 0.5·[5, −2] = [6.5, −1]
    assert nest.apply(0, x, d1).tolist() == [1.5, -3.0]
    assert nest.apply(1, x, d2).tolist() == [3.25, -0.5]
    assert torch.equal(heavy.apply(2, x, None), x) and heavy.m.tolist() == [5.0, -2.0]  # nothing proposed: unchanged


def test_adagrad_accumulates_squares_by_hand():
    step = ServerStep(ServerStepConfig(name="adagrad", lr=1.0, beta1=0.0, tau=0.5))
    x = torch.tensor([0.0])
    # v = τ² + d² = 0.25 + 9 → m / (√v + τ) = 3 / (3.0414 + 0.5); then v = 9.25 + 16, m = 4
    assert step.apply(0, x, torch.tensor([3.0])).item() == pytest.approx(3 / (math.sqrt(9.25) + 0.5), rel=1e-6)
    assert step.apply(1, x, torch.tensor([4.0])).item() == pytest.approx(4 / (math.sqrt(25.25) + 0.5), rel=1e-6)


def test_the_step_is_applied_to_a_base_the_rule_names_and_a_rule_step_size_is_plain_sgd_only():
    base = torch.tensor([10.0, 10.0], dtype=torch.float64)
    step = ServerStep(ServerStepConfig(lr=0.5))
    out = step.apply(0, torch.zeros(2), Direction(torch.tensor([2.0, 4.0], dtype=torch.float64), base=base))
    assert out.dtype == torch.float32 and out.tolist() == [11.0, 12.0]  # FedAWE's copies' mean, not the model
    assert step.apply(0, torch.ones(2), Direction(torch.tensor([1.0, -1.0]), lr=0.25)).tolist() == [1.25, 0.75]
    with pytest.raises(ValueError, match="plain SGD"):
        ServerStep(ServerStepConfig(name="yogi")).apply(0, torch.ones(2), Direction(torch.ones(2), lr=0.1))


def test_a_transform_changes_the_direction_before_the_optimiser_sees_it():
    """Where differential privacy plugs in: clip and noise the aggregate, then step."""
    halve = lambda r, d: Direction(d.delta * 0.5, d.base, d.lr)  # noqa: E731
    step = ServerStep(ServerStepConfig(lr=1.0, momentum=0.5), transforms=[halve])
    x = torch.zeros(1)
    assert step.apply(0, x, torch.tensor([4.0])).item() == 2.0
    assert step.apply(1, x, torch.tensor([4.0])).item() == 3.0  # b = 0.5·2 + 2


@pytest.mark.parametrize("rule, cfg_cls, rounds", [
    (MIFA, MIFAConfig, [([0, 1], [[1.0, 2.0], [3.0, -2.0]]), ([1], [[0.5, 0.5]]), ([], [])]),
    (FedVARP, FedVARPConfig, [([0, 1], [[1.0, 2.0], [3.0, -2.0]]), ([1], [[0.5, 0.5]]), ([0], [[2.0, 2.0]])]),
    (FedAU, FedAUConfig, [([0, 1], [[1.0, 2.0], [3.0, -2.0]]), ([], []), ([1], [[0.5, 0.5]])]),
])
def test_rules_that_wrote_their_own_sgd_step_take_yogi_from_the_config(rule, cfg_cls, rounds):
    """MIFA, FedVARP, FedAU under Yogi: the plain rule's direction (its η_g = 1 step) through Yogi's step."""
    yogi_cfg = {"name": "yogi", "lr": 0.1, "tau": 1e-2}
    alg = rule(cfg_cls(server_step=yogi_cfg), ctx(3, 2))
    plain = rule(cfg_cls(), ctx(3, 2))
    ref = ServerStep(ServerStepConfig(**yogi_cfg))
    x = torch.tensor([1.0, -1.0])
    moved = False
    for r, (clients, ups) in enumerate(rounds):
        direction = plain.aggregate(r, x, rep(clients, ups)) - x
        new = alg.aggregate(r, x, rep(clients, ups))
        want = ref.apply(r, x, direction if (len(clients) or rule is MIFA) else None)
        torch.testing.assert_close(new, want)
        moved |= not torch.equal(new, x)
        x = new
    assert moved and alg.server_step.v is not None


def test_fedavg_with_adam_from_server_step_is_fedadam():
    from turnout.algorithms.server_optim import FedAdam
    from turnout.algorithms.server_step import AdaptiveServerConfig

    a = FedAvg(FedAvgConfig(server_step={"name": "adam", "lr": 0.1}), ctx(2, 2))
    b = FedAdam(AdaptiveServerConfig(server_lr=0.1), ctx(2, 2))
    x = torch.zeros(2)
    for r, ups in enumerate([[[1.0, 2.0], [3.0, 0.0]], [[-1.0, 0.5], [0.0, 0.0]]]):
        xa, xb = a.aggregate(r, x, rep([0, 1], ups)), b.aggregate(r, x, rep([0, 1], ups))
        assert torch.equal(xa, xb)
        x = xa


def _refusal(algorithm: dict) -> str:
    with pytest.raises(ConfigError) as err:
        load_experiment(ROOT / "experiments" / "quickstart.yaml", [f"algorithm={algorithm}"])
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_steps_a_rule_cannot_take_are_refused_in_one_line():
    assert "plain SGD only" in _refusal("{name: fedsum, server_step: {name: adam}}")
    assert "server_step" in _refusal("{name: fedasync, server_step: {name: yogi}}")  # it mixes models: no step
    assert "give it once" in _refusal("{name: fedavg, server_lr: 0.5, server_step: {name: sgd, lr: 0.5}}")
    assert "option of name: sgd" in _refusal("{name: mifa, server_step: {name: yogi, momentum: 0.9}}")
    assert "nesterov needs a momentum" in _refusal("{name: fedavg, server_step: {nesterov: true}}")


def test_a_resolved_config_without_server_step_is_the_one_from_before():
    """The option is left out of the resolved config when absent, so old configs keep their hash."""
    variants = load_experiment(ROOT / "experiments" / "quickstart.yaml")
    algo = variants[0].as_dict()["algorithm"]
    assert "server_step" not in algo and (algo["server_lr"], algo["server_momentum"]) == (1.0, 0.5)
    given = load_experiment(ROOT / "experiments" / "quickstart.yaml",
                            ["algorithm={name: fedavg, server_step: {name: yogi, lr: 0.02}}"])[0].as_dict()["algorithm"]
    assert given["server_step"]["name"] == "yogi" and given["server_step"]["lr"] == 0.02
