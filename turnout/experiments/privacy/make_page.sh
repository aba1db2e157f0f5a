#!/usr/bin/env bash
# The privacy results page (docs/results/privacy.md) from a clean clone, after the README's set-up with the
# privacy extra (`pip install -c constraints.txt -e '.[privacy]'`; the test extra has it):
#   bash experiments/privacy/make_page.sh            # runs into runs/privacy/ (must not exist), then the page
#   REPORT_ONLY=1 bash experiments/privacy/make_page.sh   # the page from run folders already there
# Each section is `turnout run` of one experiment file (the secure-aggregation one once per round mode) and
# `turnout report` of its run folders; the page is the notes (docs/results/notes/privacy.md) and the three reports.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
T="${TURNOUT:-.venv/bin/turnout}"
R="${RUNS:-runs/privacy}"
OUT="${OUT:-docs/results/privacy.md}"
start=$(date +%s)
if [ "${REPORT_ONLY:-0}" = 1 ]; then  # the run folders exist: only the page (ELAPSED_S: the runs' wall-clock)
  start=$(( start - ${ELAPSED_S:-0} ))
else
if [ -e "$R" ]; then echo "$R exists: move it away, or set RUNS=another/folder" >&2; exit 2; fi
$T run experiments/privacy/adaptive_ou.yaml --jobs 2 --quiet --out "$R/adaptive_ou"
$T run experiments/privacy/refl_world.yaml --jobs 2 --quiet --out "$R/refl_world"
$T run experiments/privacy/secagg.yaml --jobs 2 --quiet --out "$R/wait_all"
$T run experiments/privacy/secagg.yaml --jobs 2 --quiet --out "$R/DL100" \
  --set round_mode.name=deadline --set round_mode.deadline_s=100
$T run experiments/privacy/secagg.yaml --jobs 2 --quiet --out "$R/DL60" \
  --set round_mode.name=deadline --set round_mode.deadline_s=60
$T run experiments/privacy/secagg.yaml --jobs 2 --quiet --out "$R/OC1.3" \
  --set round_mode.name=over_commit --set round_mode.oc=1.3
fi
elapsed=$(( $(date +%s) - start ))
$T report "$R/adaptive_ou" --out "$R/a.md" --title "(a) Adaptive-OU's question: clipping and noise against a norm-based rule" \
  --metric final_accuracy --metric tail_accuracy --metric bytes_up --metric dp_clipped_frac --metric dp_norm_median \
  --metric dp_epsilon --metric dp_epsilon_client_max --percent-of FedAvg --curve "" >/dev/null
$T report "$R/refl_world" --out "$R/b.md" --title "(b) REFL's world: the standard ε against each client's ε" \
  --metric dp_epsilon --metric dp_epsilon_client_max --metric dp_epsilon_client_median \
  --metric dp_epsilon_over_budget --metric dp_epsilon_amplified_max --metric final_accuracy \
  --baseline "uniform, trace" --paired final_accuracy --curve "" >/dev/null
$T report "$R/wait_all" "$R/DL100" "$R/DL60" "$R/OC1.3" --out "$R/c.md" \
  --title "(c) Secure aggregation against the deadline and over-commitment" \
  --metric secagg_failed_rounds --metric reports_aggregated --metric secagg_s --metric sim_time_s --metric bytes_up \
  --metric wasted_s --percent-of "no secure aggregation" --curve "" >/dev/null
"${PYTHON:-.venv/bin/python}" - "$R" "$OUT" "$elapsed" <<'PY'
import pathlib
import sys

runs, out, elapsed = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
page = ["# Privacy under realistic participation", "",
        "Regenerate (from a clean clone, after the README's set-up with the privacy extra):", "", "```",
        "bash experiments/privacy/make_page.sh", "```", ""]
versions = (runs / "a.md").read_text().splitlines()[2].split("; ")
page += [f"{versions[0]}; {versions[1]}; wall-clock {elapsed / 60:.1f} min for the whole page on this machine.", ""]
page += [pathlib.Path("docs/results/notes/privacy.md").read_text().rstrip(), ""]
for part in "abc":
    lines = (runs / f"{part}.md").read_text().splitlines()
    cpu = lines[2].split("; ")[-1]
    page += ["#" + lines[0], "", cpu[0].upper() + cpu[1:], ""]
    page += ["#" + line if line.startswith("#") else line for line in lines[3:]]
out.write_text("\n".join(page).rstrip() + "\n")
print(f"wrote {out}")
PY
