#!/usr/bin/env bash
# Wall time of the whole `autohet plan` process (start-up, profile loading, search, output) on the pools
# issue #30 names for the Sailor comparison: OPT-350M, Sailor's A100-40G / V100-16G profiles, 4-GPU nodes,
# global batch 1024, seq 2048; then the issue's 4,096-GPU case. Median of RUNS, one process at a time. Markdown on stdout.
#   bench/plan_wall_bench.sh [--build DIR] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build RUNS=5
while [ $# -gt 0 ]; do
  case "$1" in
    --build) B="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    *) echo "usage: bench/plan_wall_bench.sh [--build DIR] [--runs N]" >&2; exit 2 ;;
  esac
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. bench/lib.sh
echo "| pool (4-GPU nodes) | GPUs | wall s (median of $RUNS) | iteration s |"
echo "|---|---:|---:|---:|"
for pool in 8x4xA100-40G 4x4xA100-40G,4x4xV100-16G 8x4xA100-40G,8x4xV100-16G 64x4xA100-40G,192x4xV100-16G; do
  for ((r = 0; r < RUNS; r++)); do
    wall_s "$B/autohet" plan --model opt-350m --cluster "$pool" --profile tests/fixtures/sailor/OPT-350 \
      --global-batch 1024 --seq 2048 --quiet --json "$TMP/p.json"
  done >"$TMP/t"
  printf '| `%s` | %s | %.3f | %.4f |\n' "$pool" "$(jq '.gpus_total' "$TMP/p.json")" "$(median <"$TMP/t")" \
    "$(jq .iteration_time_s "$TMP/p.json")"
done
# the issue's largest case: 4,096 GPUs of 6 types (llama2-13b, the analytic profile, global batch 2048)
C4=128x8xA100-40G,64x8xA100-80G,64x8xH800,64x8xH20,128x8xV100-32G,64x8xH100-SXM
for ((r = 0; r < RUNS; r++)); do
  wall_s "$B/autohet" plan --model llama2-13b --cluster "$C4" --global-batch 2048 --quiet --json "$TMP/p.json"
done >"$TMP/t"
echo
echo "The issue's largest case, llama2-13b on \`$C4\`"
printf '(4,096 GPUs of 6 types, 8-GPU nodes, global batch 2048, analytic profile): **%.2f s** wall (median of %s; target <= 1 s), iteration %.4f s.\n' \
  "$(median <"$TMP/t")" "$RUNS" "$(jq .iteration_time_s "$TMP/p.json")"
