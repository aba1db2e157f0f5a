"""The package's shape: moved modules keep their old import names for one release, with a warning."""

import importlib
import importlib.resources
import sys

import pytest

import turnout


@pytest.mark.parametrize("old", sorted(turnout.MOVED))
def test_an_old_module_name_imports_the_moved_module_with_a_deprecation_warning(old):
    sys.modules.pop(f"turnout.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"turnout.{old} moved to turnout.{turnout.MOVED[old]}"):
        alias = importlib.import_module(f"turnout.{old}")
    moved = importlib.import_module(f"turnout.{turnout.MOVED[old]}")
    assert alias is moved
    assert moved.__spec__.name == f"turnout.{turnout.MOVED[old]}"  # the alias leaves the real module's spec alone


def test_the_package_root_holds_only_the_public_entry_points():
    root = importlib.resources.files("turnout")
    assert sorted(p.name for p in root.iterdir() if p.name.endswith(".py")) == ["__init__.py", "__main__.py"]
