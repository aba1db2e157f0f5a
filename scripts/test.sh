#!/usr/bin/env bash
# One command from a fresh clone: install (with the test, docs and flower extras and the
# Fashion-MNIST Debian package when we are root), lint, build the documentation site strictly,
# check the package as a pip user gets it (scripts/package_check.sh), then run the default test
# suite (slow tests excluded; add `-m slow` or `-m ""` to include them). The suite runs the golden and page
# checks twice: as the machine is, and in a process that computes like another CPU (tests/test_emulated_cpu.py,
# scripts/emulate_cpu.py), so a clone on another CPU passes what CI passed (docs/determinism.md). pytest runs in
# two worker processes (pytest-xdist; most tests wait on subprocesses, so two keep both of CI's cores busy; `-n 0`
# runs in one process, `-n 4` in four) and prints the 40 slowest tests, so a CI log shows where the default
# suite's time goes (keep it under 10 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh --test
if [ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "installing Debian package dataset-fashion-mnist (30 MB) for the Fashion-MNIST tests"
    (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) >/dev/null 2>&1 \
      || echo "warning: could not install dataset-fashion-mnist; its tests will be skipped"
  else
    echo "note: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist); its tests will be skipped"
  fi
fi
echo "lint first: ruff check ."
.venv/bin/ruff check .
echo "layers next: lint-imports (the contracts in pyproject.toml: no upward import, no import circle)"
.venv/bin/lint-imports
# TURNOUT_CHECKS=0 skips the two checks below (a quick local run); CI always runs them.
if [ "${TURNOUT_CHECKS:-1}" != "0" ]; then
  echo "docs: mkdocs build --strict (warnings are errors)"
  site="$(mktemp -d "${TMPDIR:-/tmp}/turnout-site.XXXXXX")"
  NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site"
  rm -rf "$site"
  bash scripts/package_check.sh
fi
exec .venv/bin/python -m pytest -p no:cacheprovider -n 2 --durations=40 "$@"
