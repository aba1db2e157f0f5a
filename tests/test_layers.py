"""The package's shape: moved modules keep their old import names for one release, with a warning."""

import ast
import importlib
import importlib.resources
import shutil
import subprocess
import sys
from pathlib import Path

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


ROOT = Path(__file__).resolve().parents[1]


def _function_level_imports(path: Path):
    """(line, source line, line above) of each turnout-internal import written inside a function."""
    src = path.read_text()
    lines = src.splitlines()
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.ImportFrom) and (
                    child.level or (child.module or "").startswith("turnout")):
                found.append((child.lineno, lines[child.lineno - 1], lines[child.lineno - 2]))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(src), False)
    return found


def test_imports_inside_functions_say_why():
    """An import inside a function is for an optional extra or a light start, and says so on its line or in
    a comment line just above its group; anything else is imported at the top of the module."""
    unexplained = []
    for path in sorted((ROOT / "turnout").rglob("*.py")):
        found = _function_level_imports(path)
        explained_groups = set()
        for lineno, line, above in found:
            in_group = any(n == lineno - 1 for n, _, _ in found)
            if "#" in line or above.strip().startswith("#") or (in_group and lineno - 1 in explained_groups):
                explained_groups.add(lineno)
                continue
            unexplained.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not unexplained, "\n".join(unexplained)


def test_the_layer_contract_holds():
    """`lint-imports` (scripts/test.sh runs it too): no layer imports one above it, no import circle, no seam
    package imports another (but executors -> algorithms.base)."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.skip("import-linter is not installed (it is in the test extra)")
    r = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 3 kept, 0 broken." in r.stdout and "seams are independent" in r.stdout


def test_no_class_overrides_a_private_method_of_its_base():
    """Variants are made by what is handed in (a Work, a component), not by overriding a base's private step."""
    classes: dict[str, list[tuple[str, set, list]]] = {}
    for path in sorted((ROOT / "turnout").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
                classes.setdefault(node.name, []).append((str(path.relative_to(ROOT)), methods, bases))

    def ancestors(name, seen=()):
        for _, _, bases in classes.get(name, []):
            for base in bases:
                if base in classes and base not in seen:
                    yield base
                    yield from ancestors(base, (*seen, base))

    overridden = [f"{path}: {name}.{m} overrides {base}.{m}"
                  for name, defs in classes.items() for path, methods, _ in defs
                  for base in set(ancestors(name)) for _, base_methods, _ in classes[base]
                  for m in sorted(methods & base_methods) if m.startswith("_") and not m.startswith("__")]
    assert not overridden, "\n".join(overridden)
