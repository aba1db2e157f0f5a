"""`turnout list`: every component and every non-component block, with options, defaults and descriptions."""

import pytest

from turnout.app.cli import main
from turnout.config.options import _nested_model
from turnout.sim.catalogue import BLOCKS, listed_registries


def listing(capsys, *argv) -> str:
    assert main(["list", *argv]) == 0
    return capsys.readouterr().out


def option_keys(model, prefix=""):
    """Dotted option names of a config model, nested blocks included (``generator.days``)."""
    for key, field in model.model_fields.items():
        yield prefix + key
        nested = _nested_model(field.annotation)
        if nested is not None:
            yield from option_keys(nested, f"{prefix}{key}.")


def test_every_component_lists_every_option_without_pydantic_internals(capsys):
    checked = 0
    for seam, registry in listed_registries().items():
        for name, cls in registry:
            text = listing(capsys, f"{seam}.{name}")
            assert f"  {name} " in text, (seam, name)
            for key in option_keys(cls.Config):
                assert f"\n      {key} = " in text, (seam, name, key)
            assert not any(junk in text for junk in ("PydanticUndefined", "object at 0x", "<class", "<function")), text
            checked += 1
    assert checked > 70  # every registered component (79 today), not a handful


def test_required_options_and_nested_blocks_say_what_they_are(capsys):
    text = listing(capsys, "data.mnist")
    assert "      path = (required): directory holding the four MNIST IDX files" in text
    assert "      partition = {'name': 'iid'}: partitioner block" in text
    text = listing(capsys, "availability.trace")
    assert "      generator = (block): options of the synthetic trace" in text
    assert "      generator.days = 6 in [1, 366]: trace length" in text
    assert "      mapping = 'modulo': client i -> trace (i+1) % n, or random; one of: modulo, random" in text


def test_blocks_without_components_are_listed_with_defaults_and_descriptions(capsys):
    text = listing(capsys)
    for block, model in BLOCKS.items():
        assert f"\n  {block} " in text
        for key in model.model_fields:
            assert f"      {key} = " in text, (block, key)
    train = listing(capsys, "train")
    assert "      lr = 0.01 in (0, 100]: client learning rate at round 0 (see lr_schedule)" in train
    assert "      lr_schedule.gamma = 0.5 in (0, 1]: decay factor" in train and "  eval " not in train
    schedule = listing(capsys, "train.lr_schedule")
    assert "      name = 'constant': shape of the decay over rounds; one of: constant, step, exponential" in schedule
    assert "      target_accuracy = None in (0, 1]: report rounds/time/bytes to reach it" in listing(capsys, "eval")
    assert "      state_budget_mb = 1024.0 in (0, 1.67772e+07]: " in listing(capsys, "runtime")
    assert "      plots = True: draw accuracy_vs_*.png in the run folder" in listing(capsys, "output")


def test_partitioner_by_name(capsys):
    text = listing(capsys, "data.partition.dirichlet")
    assert "  dirichlet " in text and "      alpha = 0.5 in (0, 1000]: " in text and "  iid " not in text


@pytest.mark.parametrize("what,words", [
    ("data.partition.nope", ["nope", "unknown partition", "dirichlet", "zipf"]),
    ("compressor.nope", ["nope", "gluefl"]),
    ("nope", ["nope", "data.partition", "train", "train.lr_schedule", "eval", "runtime", "output"]),
])
def test_unknown_names_are_one_line_errors_listing_the_choices(capsys, what, words):
    assert main(["list", what]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and err[0].startswith("turnout: error: ")
    assert all(w in err[0] for w in words), err[0]


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["list", "experiments"]])
def test_help_and_the_bundled_experiments_start_without_torch(args):
    """A command imports only what it runs: the parser, the process guard and the bundled list need no torch."""
    import subprocess
    import sys

    code = (f"import sys\nfrom turnout.app.cli import main\ntry:\n    rc = main({args!r})\nexcept SystemExit as e:\n"
            f"    rc = e.code\nprint('rc', rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.strip().splitlines()[-1] == "rc 0 False", out[-500:]
