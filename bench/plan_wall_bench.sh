#!/usr/bin/env bash
# Wall time of the whole `autohet plan` process (start-up, profile loading, search, output) on the pools
# issue #30 names for the Sailor comparison: OPT-350M, Sailor's A100-40G / V100-16G profiles, 4-GPU nodes,
# global batch 1024, seq 2048; then the issue's 4,096-GPU case. Median of RUNS, one process at a time. Markdown on stdout.
# With --sailor SAILOR (a checkout of eth-easl/sailor with its planner module built; bench/sailor_planner.py), Sailor's
# planner on the same pools in the same run: its search alone and its whole process (Python, its inputs, the search).
#   bench/plan_wall_bench.sh [--build DIR] [--runs N] [--sailor SAILOR]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build RUNS=5 SAILOR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) B="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --sailor) SAILOR="$2"; shift 2 ;;
    *) echo "usage: bench/plan_wall_bench.sh [--build DIR] [--runs N] [--sailor SAILOR]" >&2; exit 2 ;;
  esac
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. bench/lib.sh
if [ -n "$SAILOR" ]; then
  PY=$(python3 -c 'import sys; print(sys.executable)') # the interpreter itself, not a version manager's shim
  "$PY" bench/sailor_planner.py "$SAILOR" A100-40=4 --reps 0 >/dev/null \
    || { echo "plan_wall_bench: --sailor $SAILOR: no Sailor planner to run (bench/sailor_planner.py)" >&2; exit 2; }
  echo "| pool (4-GPU nodes) | GPUs | autohet wall s (median of $RUNS) | its iteration s | Sailor search s | Sailor wall s | Sailor's pick: its own estimate s, PP, micro-batch |"
  echo "|---|---:|---:|---:|---:|---:|---|"
else
  echo "| pool (4-GPU nodes) | GPUs | wall s (median of $RUNS) | iteration s |"
  echo "|---|---:|---:|---:|"
fi
# Sailor's name of each pool: GPUs per type
sailor_pool() { echo "$1" | sed -E 's/([0-9]+)x4x(A100-40|V100-16)G/\2=\1/g' | awk -F, '{ for (i = 1; i <= NF; i++) { split($i, a, "="); printf "%s%s=%d", (i > 1 ? "," : ""), a[1], 4 * a[2] } }'; }
POOLS=(8x4xA100-40G 4x4xA100-40G,4x4xV100-16G 8x4xA100-40G,8x4xV100-16G 64x4xA100-40G,192x4xV100-16G)
# autohet on every pool first, then Sailor: neither times right after the other's processes
for pool in "${POOLS[@]}"; do
  for ((r = 0; r < RUNS; r++)); do
    wall_s "$B/autohet" plan --model opt-350m --cluster "$pool" --profile tests/fixtures/sailor/OPT-350 \
      --global-batch 1024 --seq 2048 --quiet --json "$TMP/p.json"
  done >"$TMP/t"
  printf '| `%s` | %s | %.3f | %.4f |' "$pool" "$(jq '.gpus_total' "$TMP/p.json")" "$(median <"$TMP/t")" \
    "$(jq .iteration_time_s "$TMP/p.json")" >>"$TMP/rows"
  echo >>"$TMP/rows"
done
i=0
while read -r row; do
  if [ -n "$SAILOR" ]; then
    sp=$(sailor_pool "${POOLS[i]}")
    "$PY" bench/sailor_planner.py "$SAILOR" "$sp" --reps "$RUNS" >"$TMP/s.json"
    for ((r = 0; r < RUNS; r++)); do wall_s "$PY" bench/sailor_planner.py "$SAILOR" "$sp" --reps 0; done >"$TMP/ts"
    row+=$(jq -r --arg w "$(median <"$TMP/ts")" \
      '" \(.search_s * 1000 | round / 1000) | \($w | tonumber * 1000 | round / 1000) | \(.best.Tpp_s * 1e4 | round / 1e4), PP \(.best.pp), mb \(.best.micro_batch) |"' "$TMP/s.json")
  fi
  echo "$row"
  i=$((i + 1))
done <"$TMP/rows"
# the issue's largest case: 4,096 GPUs of 6 types (llama2-13b, the analytic profile, global batch 2048)
C4=128x8xA100-40G,64x8xA100-80G,64x8xH800,64x8xH20,128x8xV100-32G,64x8xH100-SXM
for ((r = 0; r < RUNS; r++)); do
  wall_s "$B/autohet" plan --model llama2-13b --cluster "$C4" --global-batch 2048 --quiet --json "$TMP/p.json"
done >"$TMP/t"
echo
echo "The issue's largest case, llama2-13b on \`$C4\`"
printf '(4,096 GPUs of 6 types, 8-GPU nodes, global batch 2048, analytic profile): **%.2f s** wall (median of %s; target <= 1 s), iteration %.4f s.\n' \
  "$(median <"$TMP/t")" "$RUNS" "$(jq .iteration_time_s "$TMP/p.json")"
