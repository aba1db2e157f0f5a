#!/usr/bin/env bash
# Regenerate a seed paper's results page: bash scripts/reproduce.sh SEED
# (SEED: fedgs, fedgs_fmnist, fedsum, adaptive_ou, refl, gluefl)
# Runs experiments/SEED/ in every setting of that paper's table (two settings at a time on two
# cores; results do not depend on that), then writes docs/results/SEED.md from the run folders.
# Run the README's set-up command first (it creates .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
seed="${1:-}"
jobs="${JOBS:-2}"
turnout=".venv/bin/turnout"
[ -x "$turnout" ] || turnout="turnout"
out="runs/reproduce/$seed"
start=$(date +%s)
extra=()

run_settings() {  # "name|config|--set value|--set value" per setting, run $jobs at a time
  rm -rf "$out"; mkdir -p "$out"
  printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c '
    IFS="|" read -r name config rest <<< "{}"
    args=(); IFS="|" read -ra sets <<< "$rest"
    for s in "${sets[@]}"; do [ -n "$s" ] && args+=(--set "$s"); done
    '"$turnout"' run "$config" --quiet --out '"$out"'/"$name" "${args[@]}" > '"$out"'/"$name".log 2>&1 \
      || { echo "setting $name failed, see '"$out"'/$name.log" >&2; exit 255; }
    echo "done: $name"'
}

case "$seed" in
  fedgs)
    run_settings \
      "IDL|experiments/fedgs/synthetic.yaml|availability={name: idl}" \
      "LN-0.5|experiments/fedgs/synthetic.yaml|availability={name: ln, beta: 0.5}" \
      "SLN-0.5|experiments/fedgs/synthetic.yaml|availability={name: sln, beta: 0.5}" \
      "LDF-0.7|experiments/fedgs/synthetic.yaml|availability={name: ldf, beta: 0.7}" \
      "MDF-0.7|experiments/fedgs/synthetic.yaml|availability={name: mdf, beta: 0.7}"
    folders=("$out/IDL" "$out/LN-0.5" "$out/SLN-0.5" "$out/LDF-0.7" "$out/MDF-0.7")
    metrics=(--metric best_loss --metric final_accuracy --metric selection_count_var)
    extra=(--counts LN-0.5)
    title="FedGS Table 2 (Synthetic(0.5, 0.5)) at laptop scale" ;;
  fedgs_fmnist)
    run_settings \
      "IDL|experiments/fedgs/fashion_mnist.yaml|availability={name: idl}" \
      "YMF-0.9|experiments/fedgs/fashion_mnist.yaml|availability={name: ymf, beta: 0.9}" \
      "YC-0.9|experiments/fedgs/fashion_mnist.yaml|availability={name: yc, beta: 0.9}"
    folders=("$out/IDL" "$out/YMF-0.9" "$out/YC-0.9")
    metrics=(--metric best_loss --metric final_accuracy --metric selection_count_var)
    extra=(--counts YMF-0.9)
    title="FedGS Table 2 / Figs. 4-5 (Fashion-MNIST, two labels per client) at laptop scale" ;;
  fedsum)
    run_settings \
      "P1-m10|experiments/fedsum/digits.yaml|availability={name: p1_uniform, m: 10}" \
      "P2-Bernoulli|experiments/fedsum/digits.yaml|availability={name: p2_bernoulli}" \
      "P3-sine|experiments/fedsum/digits.yaml|availability={name: p3_sine}" \
      "Cases-1-4|experiments/fedsum/cases.yaml|"
    folders=("$out/P1-m10" "$out/P2-Bernoulli" "$out/P3-sine" "$out/Cases-1-4")
    metrics=(--metric final_loss --metric final_accuracy --metric best_accuracy --metric tau_max --metric tau_avg
             --metric bytes_down --metric bytes_up)
    title="FedSUM Fig. 1 / App. H (digits, Dirichlet 0.1) at laptop scale" ;;
  adaptive_ou)
    run_settings \
      "N=50|experiments/adaptive_ou/synthetic.yaml|selector.clients_per_round=50" \
      "N=20|experiments/adaptive_ou/synthetic.yaml|selector.clients_per_round=20" \
      "N=10|experiments/adaptive_ou/synthetic.yaml|selector.clients_per_round=10"
    folders=("$out/N=10" "$out/N=20" "$out/N=50")
    metrics=(--metric tail_accuracy --metric tail_accuracy_std --metric bytes_up --percent-of Full)
    curve=accuracy
    title="Adaptive-OU Table 3 / Figs. 4-5 (synthetic logistic regression) at laptop scale" ;;
  refl)
    run_settings \
      "OC-IID|experiments/refl/digits.yaml|" \
      "OC-label|experiments/refl/digits.yaml|data.partition={name: shards, shards_per_client: 2}" \
      "DL-IID|experiments/refl/digits.yaml|round_mode={name: deadline, deadline_s: 100}" \
      "DL-label|experiments/refl/digits.yaml|round_mode={name: deadline, deadline_s: 100}|data.partition={name: shards, shards_per_client: 2}"
    folders=("$out/OC-IID" "$out/OC-label" "$out/DL-IID" "$out/DL-label")
    metrics=(--metric final_accuracy --metric best_accuracy --metric resource_s --metric wasted_s
             --metric sim_time_s)
    curve=accuracy
    title="REFL Figs. 6-10 (digits, trace availability, FLASH devices) at laptop scale" ;;
  gluefl)
    run_settings "main|experiments/gluefl/main.yaml|" "ablations|experiments/gluefl/ablations.yaml|"
    folders=("$out/main" "$out/ablations")
    metrics=(--metric bytes_down_to_target --metric bytes_up_to_target --metric download_time_to_target_s
             --metric sim_time_to_target_s --metric rounds_to_target --metric final_accuracy)
    curve=accuracy
    title="GlueFL Table 2 / Fig. 5 / App. E (Fashion-MNIST, 1,000 clients) at laptop scale" ;;
  *)
    echo "usage: bash scripts/reproduce.sh fedgs|fedgs_fmnist|fedsum|adaptive_ou|refl|gluefl" >&2; exit 2 ;;
esac

"$turnout" report "${folders[@]}" --out "docs/results/$seed.md" "${metrics[@]}" --title "$title" --curve "${curve:-loss}" \
  --command "bash scripts/reproduce.sh $seed" --elapsed-s "$(( $(date +%s) - start ))" \
  --notes "docs/results/notes/$seed.md" "${extra[@]}"
