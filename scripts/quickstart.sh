#!/usr/bin/env bash
# One command from a fresh clone: install, then run the README's main job on the embedded
# Synthetic(0.5, 0.5) dataset (generated locally; nothing is downloaded at run time).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh
exec .venv/bin/turnout run experiments/quickstart.yaml "$@"
