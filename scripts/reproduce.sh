#!/usr/bin/env bash
# Regenerate a seed paper's results page, or check that a page still matches the code:
#   bash scripts/reproduce.sh PAGE                  # run PAGE's settings, write docs/results/PAGE.md
#   bash scripts/reproduce.sh --check PAGE... | all # re-run each page's check slice (seconds) and compare
#   bash scripts/reproduce.sh --check --full PAGE   # re-run the whole page and compare every table
#   bash scripts/reproduce.sh --report PAGE         # re-write PAGE.md from runs/reproduce/PAGE
#   bash scripts/reproduce.sh --list                # the pages and their settings
# PAGE: fedgs, fedgs_fmnist, fedsum, adaptive_ou, adaptive_ou_fedprox, refl, refl_rules, gluefl,
# gluefl_k10, gluefl_ablations, gluefl_sensitivity, async,
# fedsum_vectors, fedsum_cases, fedgs_graphs, fedgs_1000, refl_apt, refl_forecast, refl_large,
# adaptive_ou_shakespeare, adaptive_ou_8bit, gluefl_network.
# What each runs is in scripts/pages.py; units run in $JOBS worker
# processes (default 2; results do not depend on it). Run the README's set-up command first (it creates .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
python=".venv/bin/python"
[ -x "$python" ] || python="python3"
exec "$python" scripts/pages.py "$@"
