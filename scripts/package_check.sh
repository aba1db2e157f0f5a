#!/usr/bin/env bash
# What a pip user gets, checked from outside the checkout: build the sdist and the wheel, `twine check`
# them, install the wheel into a fresh virtual environment in a temporary folder (pins from
# constraints.txt; torch must come out as the CPU build), then, from a temporary folder that is not the
# checkout, run the bundled quickstart by name, write + validate a starter with `turnout new`, list the results pages
# and check one of them against its bundled record (`turnout reproduce`).
# Run by scripts/test.sh (CI); needs .venv with the test extra (build, twine). About 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
PY="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/turnout-package.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

echo "package check: build sdist + wheel"
.venv/bin/python -m build --sdist --wheel --outdir "$work/dist" . >"$work/build.log" 2>&1 \
  || { tail -n 30 "$work/build.log"; echo "package check: python -m build failed" >&2; exit 1; }
.venv/bin/python -m twine check --strict "$work"/dist/*
wheel=("$work"/dist/turnout-*.whl)

echo "package check: a fresh virtual environment with only the wheel and its dependencies"
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check -c constraints.txt "${wheel[0]}" 2>&1 \
  | { grep -v "^WARNING: Location" || true; }
# the CPU build of torch, nothing of CUDA's (an unpinned torch from PyPI brings GBs of nvidia-* packages)
"$work/venv/bin/python" - <<'PY'
import importlib.metadata as md
import torch
cuda = sorted(d.metadata["Name"] for d in md.distributions() if d.metadata["Name"].lower().startswith("nvidia"))
assert torch.version.cuda is None and not cuda, f"CUDA torch was installed: {torch.__version__} {cuda}"
print(f"package check: torch {torch.__version__}, no CUDA packages")
PY

outside="$work/outside"
mkdir "$outside"
cd "$outside"  # not the checkout: only what the wheel installed can be found
export PATH="$work/venv/bin:$PATH"
case "$(command -v turnout)" in "$work"/venv/bin/turnout) ;; *) echo "turnout is not the fresh venv's" >&2; exit 1;; esac
"$work/venv/bin/python" -c "import turnout, sys; sys.exit(0 if '$root' not in turnout.__file__ else 'imported from the checkout')"
set -x
turnout list experiments
turnout run quickstart --set rounds=5 --out run --quiet
turnout new mylab
turnout check mylab/experiment.yaml --plugin mylab/components.py
turnout reproduce --list > pages.txt
turnout reproduce --check fedgs_graphs --jobs 1 | tee check.txt
{ set +x; } 2>/dev/null
grep -q "^fedgs_graphs: FedGS Table 4" pages.txt || { echo "package check: turnout reproduce --list lacks a page" >&2; exit 1; }
grep -q "^1 of 1 pages match the code, 0 stale, 0 not checked" check.txt \
  || { echo "package check: the bundled page fedgs_graphs does not check from the wheel" >&2; exit 1; }
echo "package check: passed in $((SECONDS - start)) s"
