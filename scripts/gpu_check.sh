#!/usr/bin/env bash
# The GPU check: CUDA tests, the GPU benchmark figures, torch.compile's measurement and the pfl-like end-to-end
# run, in one script, for a machine with an NVIDIA GPU that has Python, torch (CUDA), numpy, scipy, scikit-learn,
# pandas, PyYAML, matplotlib and tqdm but may lack pydantic and cannot reach a package index.
#
#   bash scripts/gpu_check.sh [OUT_DIR] [STEPS]   # log: OUT_DIR/gpu_check.log (default OUT_DIR: gpu-check/)
#
# STEPS: a comma-separated subset of smoke,tests,bench,e2e,layouts,compile,profile (default: all, in that order:
# the most needed first, so a run cut short by its time limit keeps them).
#
# Before, on a machine with pip (the wheels of pydantic and its needs for the GPU machine's Python):
#   python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl pydantic==2.14.4 pydantic_core==2.50.5 annotated-types \
#       typing-inspection "typing_extensions>=4.16"
# and, for the Fashion-MNIST rows, a copy of the four IDX files in .gpu/fashion-mnist/.
# Every step has its own time limit, so one stuck step leaves the others' figures.
set -u
OUT_DIR=${1:-gpu-check}
STEPS=",${2:-smoke,tests,bench,e2e,layouts,compile,profile},"
BENCH_FLAGS=${BENCH_FLAGS:-}  # e.g. --compile: a vectorized column with the step compiled
RUNS=$(mktemp -d)  # run folders (only the log goes to OUT_DIR)
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

step() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }
wanted() { [[ "$STEPS" == *",$1,"* ]]; }

step "install: pydantic from .whl, turnout from this checkout (no dependencies fetched)"
if ! "$PY" -c "import pydantic" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "installing the wheels failed"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
FMNIST=/usr/share/datasets/fashion-mnist
[ -d "$FMNIST" ] || FMNIST=.gpu/fashion-mnist
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch, numpy, pydantic, turnout; print('python', __import__('sys').version.split()[0], '| torch',
torch.__version__, '| CUDA', torch.version.cuda, '|', torch.cuda.get_device_name(0), '| numpy', numpy.__version__,
'| pydantic', pydantic.__version__)"

if wanted smoke; then
step "smoke: the quickstart experiment on cuda, 3 rounds"
timeout 120 "$PY" -m turnout run quickstart --set rounds=3 --set runtime.device=cuda --out "$RUNS/smoke" \
    --quiet 2>&1 | tail -5
fi

if wanted tests; then
step "CUDA tests (every CUDA case; the CPU suite runs in CI)"
timeout "${TEST_TIMEOUT:-240}" "$PY" -m pytest -q -p no:cacheprovider -rfE \
    tests/test_device.py tests/training/test_stacked_sgd.py tests/training/test_device_training.py \
    tests/training/test_sequence_loss.py tests/executors/test_executor_choice.py "tests/executors/test_executor_equivalence.py" -k "cuda or device or gpu" \
    2>&1 | tail -40
fi

if wanted bench; then
step "bench/executors.py --device cuda (GPU columns; CPU ratios against bench/cpu_reference.json)"
timeout "${BENCH_TIMEOUT:-300}" "$PY" bench/executors.py --device cuda --gpu-only --fmnist-path "$FMNIST" $BENCH_FLAGS \
    --models "${MODELS:-logreg,mlp,cnn,cnn_fedavg,resnet18_gn}" --workloads "${WORKLOADS:-W,W100,W1000}" \
    --rounds "${ROUNDS:-3}" \
    --repeats 1
fi

if wanted e2e; then
step "pfl-like end to end: bench/pfl_cifar.yaml (1,500 rounds) — the whole turnout run, timed"
t0=$(date +%s%N)
timeout "${E2E_TIMEOUT:-150}" "$PY" -m turnout run bench/pfl_cifar.yaml --out "$RUNS/e2e" --quiet 2>&1 | tail -4
rc=${PIPESTATUS[0]}
echo "turnout run bench/pfl_cifar.yaml: $(( ($(date +%s%N) - t0) / 1000000 )) ms wall, the whole command (rc $rc)"
if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then
    echo "--- again without torch.compile (executor.compile=false)"
    rm -rf "$RUNS/e2e" "$RUNS/e2e.partial"
    t0=$(date +%s%N)
    timeout "${E2E_TIMEOUT:-150}" "$PY" -m turnout run bench/pfl_cifar.yaml --set executor.compile=false \
        --out "$RUNS/e2e" --quiet 2>&1 | tail -4
    rc=${PIPESTATUS[0]}
    echo "turnout run bench/pfl_cifar.yaml (eager): $(( ($(date +%s%N) - t0) / 1000000 )) ms wall (rc $rc)"
fi
"$PY" - "$RUNS/e2e/summary.json" <<'EOF'
import json, sys
try:
    runs = json.load(open(sys.argv[1]))["runs"]
except (OSError, ValueError, KeyError) as e:
    sys.exit(f"no summary: {e}")
keys = ("rounds", "wall_s", "final_accuracy", "best_accuracy", "aggregation_device", "aggregation_cpu_because",
        "auto_executor", "vectorized_chunk_clients")
for run in runs:
    print({k: run[k] for k in keys if k in run})
EOF

fi

if wanted layouts; then
step "GPU layouts: vmapped chunks against worker processes per GPU (pfl's layout)"
timeout "${LAYOUTS_TIMEOUT:-120}" "$PY" bench/gpu_layouts.py --models cnn_fedavg,resnet18_gn --repeats 2
fi

if wanted compile; then
step "torch.compile of the local and the vmapped step"
timeout "${COMPILE_TIMEOUT:-120}" "$PY" bench/compile_step.py --device cuda --model cnn_fedavg --clients 100 \
    --mode "${COMPILE_MODE:-default}" ${COMPILE_FLAGS:-}
fi

if wanted profile; then
step "where a pfl-like round's time goes (engine phases, then torch.profiler's top operations)"
timeout "${PROFILE_TIMEOUT:-120}" "$PY" bench/profile_round.py bench/pfl_cifar.yaml --warmup 5 --rounds 20
fi

step "done"
