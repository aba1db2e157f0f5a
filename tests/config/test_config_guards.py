"""Guards every config block shares: no booleans as numbers, only finite numbers, an upper bound on
every size-like option, 32-bit seeds; and one-line errors that name the right block's keys."""

from __future__ import annotations

import copy
import typing

import pytest
from annotated_types import Le, Lt
from pydantic import BaseModel

from turnout.config import limits
from turnout.config.base import _numeric_without_bool
from turnout.config.safe_yaml import load
from turnout.config.schema import EvalConfig, ExperimentConfig, OutputConfig, RuntimeConfig
from turnout.config.train import LRSchedule, TrainConfig
from turnout.core.errors import ConfigError
from turnout.data.registry import PARTITIONERS
from turnout.sim.catalogue import registries
from turnout.sim.composition import expand

BASE = {"name": "guards", "rounds": 2, "data": {"name": "synthetic", "num_clients": 6}, "model": {"name": "logreg"},
        "train": {"batch_size": 10, "local_steps": 2, "lr": 0.05},
        "selector": {"name": "uniform", "clients_per_round": 3}}


def with_set(**dotted) -> dict:
    """BASE with dotted-key values applied the way ``--set`` applies them."""
    from turnout.config.loader import apply_overrides

    return apply_overrides(copy.deepcopy(BASE), {k.replace("__", "."): v for k, v in dotted.items()})


def refused(raw: dict) -> str:
    with pytest.raises(ConfigError) as exc:
        expand(raw)
    message = str(exc.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------
# booleans are not numbers

BOOL_AS_NUMBER = {
    "rounds": {"rounds": True},
    "a seed": {"seeds": [0, True]},
    "train.batch_size": with_set(train__batch_size=True),
    "train.lr (float)": with_set(train__lr=True),
    "selector.clients_per_round": with_set(selector__clients_per_round=False),
    "model.hidden (list of ints)": with_set(model__name="mlp", model__hidden=[True, 4]),
    "a Literal of numbers": with_set(devices__name="flash", devices__kilobyte_bytes=True),
    "eval.target_accuracy (optional float)": with_set(eval__target_accuracy=True),
}


@pytest.mark.parametrize("raw", list(BOOL_AS_NUMBER.values()), ids=list(BOOL_AS_NUMBER))
def test_a_boolean_is_never_a_number(raw):
    raw = {**copy.deepcopy(BASE), **raw} if "data" not in raw else raw
    message = refused(raw)
    assert "not true/false" in message or "should be 1000 or 1024" in message


def test_boolean_options_still_take_yaml_booleans():
    exp = expand({**BASE, **load("output: {plots: off}\neval: {per_client: yes}\n")})[0]
    assert exp.config.output.plots is False and exp.config.eval.per_client is True


def test_integer_options_take_integral_floats_and_refuse_fractional_ones():
    assert expand(with_set(rounds=5.0, train__local_steps=1e2))[0].train.local_steps == 100
    assert "rounds = 2.5" in refused(with_set(rounds=2.5))


# ---------------------------------------------------------------------------------------------
# finite numbers only

NON_FINITE = {
    "train.weight_decay": with_set(train__weight_decay=float("inf")),
    "train.local_epochs": with_set(train__local_steps=None, train__local_epochs=float("inf")),
    "train.lr (string 'inf')": with_set(train__lr="inf"),
    "train.grad_clip (nan)": with_set(train__grad_clip=float("nan")),
    "devices.compute_s_per_sample": with_set(devices__compute_s_per_sample=float("inf")),
    "devices.s_per_sample (flash)": with_set(devices__name="flash", devices__s_per_sample=float("inf")),
    "data.alpha": with_set(data__alpha=float("inf")),
    "round_mode.deadline_s": with_set(round_mode__name="deadline", round_mode__deadline_s=float("inf")),
    "runtime.state_budget_mb": with_set(runtime__state_budget_mb=float("inf")),
    "eval.target_accuracy": with_set(eval__target_accuracy=float("nan")),
    "a list of floats": with_set(availability__name="uniform_bernoulli",
                                 availability__probs=[0.5] * 5 + [float("nan")]),
}


@pytest.mark.parametrize("raw", list(NON_FINITE.values()), ids=list(NON_FINITE))
def test_non_finite_numbers_are_refused_everywhere(raw):
    assert "must be a finite number (not inf or nan)" in refused(raw)


# ---------------------------------------------------------------------------------------------
# size-like options have upper bounds

TOO_BIG = {
    "train.local_steps=2e9": (with_set(train__local_steps=2e9), "train.local_steps = 2000000000.0: must be <= 1000000"),
    "train.local_steps=10^30": (with_set(train__local_steps=10**30), f"train.local_steps = {10**30}"),
    "train.local_epochs": (with_set(train__local_steps=None, train__local_epochs=1e6), "must be <= 10000"),
    "train.batch_size": (with_set(train__batch_size=10**7), "train.batch_size = 10000000: must be <= 1000000"),
    "data.dim=1e8": (with_set(data__dim=1e8), "data.dim = 100000000.0: must be <= 1000000"),
    "data.num_clients=2^31": (with_set(data__num_clients=2**31), "data.num_clients = 2147483648: must be <= 10000000"),
    "availability.num_traces=1e9": (with_set(availability__name="trace", availability__num_traces=1e9),
                                    "availability.num_traces = 1000000000.0: must be <= 100000000"),
    "runtime.state_budget_mb": (with_set(runtime__state_budget_mb=1e12), "runtime.state_budget_mb = 1000000000000.0"),
    "algorithm.server_lr (fedavg)": (with_set(algorithm__server_lr=1e308),
                                     "algorithm.server_lr = 1e+308: must be <= 1000"),
    "algorithm.server_lr (fedadam)": (with_set(algorithm__name="fedadam", algorithm__server_lr=1e6),
                                      "algorithm.server_lr = 1000000.0: must be <= 1000"),
    "round_mode.deadline_s": (with_set(round_mode__name="deadline", round_mode__deadline_s=1e12),
                              "must be <= 1000000000"),
    "selector.clients_per_round": (with_set(selector__clients_per_round=10**8), "must be <= 10000000"),
    "eval.every": (with_set(eval__every=10**7), "eval.every = 10000000: must be <= 1000000"),
}


@pytest.mark.parametrize("raw,needle", list(TOO_BIG.values()), ids=list(TOO_BIG))
def test_absurd_sizes_are_refused_with_the_bound(raw, needle):
    assert needle in refused(raw)


def _config_models() -> dict[str, type[BaseModel]]:
    blocks = (ExperimentConfig, EvalConfig, OutputConfig, RuntimeConfig, TrainConfig, LRSchedule)
    out: dict[str, type[BaseModel]] = {m.__name__: m for m in blocks}
    for seam, reg in [*registries().items(), ("data.partition", PARTITIONERS)]:
        for name, cls in reg:
            out[f"{seam}.{name}"] = cls.Config
    todo = list(out.items())
    while todo:  # nested blocks (e.g. availability.trace's generator options)
        label, model = todo.pop()
        for key, field in model.model_fields.items():
            for sub in (field.annotation, *typing.get_args(field.annotation)):
                if isinstance(sub, type) and issubclass(sub, BaseModel) and f"{label}.{key}" not in out:
                    out[f"{label}.{key}"] = sub
                    todo.append((f"{label}.{key}", sub))
    return out


def _bounded(annotation, metadata) -> bool:
    if any(isinstance(m, (Le, Lt)) for m in metadata) or typing.get_origin(annotation) is typing.Literal:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _bounded(args[0], args[1:]) or any(_bounded(args[0], getattr(m, "metadata", ())) for m in args[1:])
    inner = [a for a in args if a is not type(None)]
    return bool(inner) and all(_bounded(a, ()) for a in inner)


def test_every_integer_option_has_an_upper_bound():
    """Integers are sizes, counts or rounds: each needs a bound, or 10^30 reaches numpy as int64 overflow."""
    unbounded = []
    for label, model in _config_models().items():
        for key, field in model.model_fields.items():
            ints = {int} & set(_leaves(field.annotation))
            if ints and _numeric_without_bool(field.annotation) and not _bounded(field.annotation, field.metadata):
                unbounded.append(f"{label}.{key}")
    assert unbounded == []


def _leaves(annotation) -> list:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _leaves(args[0])
    return [leaf for a in args for leaf in _leaves(a)] if args else [annotation]


# ---------------------------------------------------------------------------------------------
# seeds


@pytest.mark.parametrize("seeds,needle", [([0, 2**32], "seeds.1 = 4294967296: must be <= 4294967295"),
                                          ([-1], "seeds.0 = -1: must be >= 0")])
def test_seeds_outside_32_bits_are_refused_not_aliased(seeds, needle):
    assert needle in refused({**BASE, "seeds": seeds})


def test_the_largest_seed_is_accepted_and_distinct_from_zero():
    from turnout.core import rng

    assert expand({**BASE, "seeds": [0, limits.MAX_SEED]})[0].config.seeds == [0, 2**32 - 1]
    assert rng.stream(2**32 - 1, "x").random() != rng.stream(0, "x").random()
    with pytest.raises(ValueError, match="outside"):
        rng.stream(2**32, "x")
    with pytest.raises(ValueError, match="outside"):
        rng.stream(-1, "x")


def test_data_seed_is_bounded_too():
    assert "data.data_seed = 4294967296" in refused(with_set(data__data_seed=2**32))


# ---------------------------------------------------------------------------------------------
# unknown keys inside nested blocks list that block's keys


@pytest.mark.parametrize("raw,key,allowed", [
    (with_set(eval__bogus=1), "eval.bogus", "batch_size, centralized_baseline, centralized_epochs, every, per_client"),
    (with_set(output__bogus=1), "output.bogus", "allowed keys: plots, progress"),
    (with_set(runtime__bogus=1), "runtime.bogus",
     "allowed keys: checkpoint_every_rounds, checkpoint_every_s, cudnn_benchmark, device, num_cpus, num_gpus, "
     "state_budget_mb, torch_threads"),
    (with_set(train__lr_schedule__bogus=1), "train.lr_schedule.bogus",
     "allowed keys: gamma, min_lr, name, sqrt_scale, step_size"),
    (with_set(availability__name="trace", availability__generator__bogus=1), "availability.generator.bogus",
     "calibration_path"),
])
def test_unknown_nested_key_lists_its_own_blocks_keys(raw, key, allowed):
    message = refused(raw)
    assert message.startswith(f"{key} = 1: unknown key; allowed keys: ")
    assert allowed in message
    listed = message.split("allowed keys: ", 1)[1].split(", ")
    assert "rounds" not in listed and "seeds" not in listed  # not the parent's keys


def test_keys_with_control_characters_are_shown_escaped():
    message = refused({**BASE, "bad\nkey\x1b": 1})
    assert message.startswith("bad\\nkey\\x1b = 1: unknown key")


def test_variant_names_with_control_characters_are_refused():
    assert "control characters" in refused({**BASE, "variants": [{"name": "a\x1b[31mred", "set": {}}]})


def test_turnout_list_shows_each_options_range(capsys):
    from turnout.app.cli import main

    assert main(["list", "selector.uniform"]) == 0
    assert "clients_per_round = 10 in [1, 10,000,000]: K: reports wanted per round" in capsys.readouterr().out
    assert main(["list", "round_mode.deadline"]) == 0
    assert "deadline_s = 100.0 in (0, 1e+09]" in capsys.readouterr().out
