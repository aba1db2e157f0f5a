#!/usr/bin/env bash
# One command from a fresh clone: install (with test extras and the Fashion-MNIST Debian
# package when we are root), then run the default test suite (slow tests excluded; add
# `-m slow` or `-m ""` to include them).
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
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
