#!/usr/bin/env bash
# A thin alias of `turnout reproduce` with the project's Python (the pages live in the package: turnout/pages/):
#   bash scripts/reproduce.sh PAGE                    # run PAGE's settings, write docs/results/PAGE.md and its record
#   bash scripts/reproduce.sh --check PAGE... | all   # re-run each page's check slice (seconds) and compare
#   bash scripts/reproduce.sh --check --full PAGE     # re-run the whole page and compare every table
#   bash scripts/reproduce.sh --record-slice PAGE     # measure the slice's horizons under every emulated CPU again
#   bash scripts/reproduce.sh --report PAGE           # re-write PAGE.md from runs/reproduce/PAGE
#   bash scripts/reproduce.sh --list                  # the pages, their settings and check slices
# Units run in $JOBS worker processes (default 2; results do not depend on it). Run the README's set-up first.
set -euo pipefail
cd "$(dirname "$0")/.."
python=".venv/bin/python"
[ -x "$python" ] || python="python3"
exec "$python" -m turnout reproduce "$@"
