#!/usr/bin/env bash
# Replanning after a loss (issue #30: "a replan after losing nodes of a running plan <= 100 ms at 1,024 GPUs"):
# the 1,024-GPU, 6-type pool of the planner bench (llama2-13b, global batch 2048) is planned once; then, for
# nodes lost at random (seeded), `autohet replan --fast` (keep the whole replicas, plan the nodes left, deal
# the micro-batches again) against the full search of the survivors (`autohet replan --exact`): wall time
# (median of RUNS) and the iteration time each finds. A markdown table on stdout.
#   bench/replan_bench.sh [--build DIR] [--runs N] [--seed S]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build RUNS=3 SEED=30
while [ $# -gt 0 ]; do
  case "$1" in
    --build) B="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    *) echo "usage: bench/replan_bench.sh [--build DIR] [--runs N] [--seed S]" >&2; exit 2 ;;
  esac
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
C=32x8xA100-40G,16x8xA100-80G,16x8xH800,16x8xH20,32x8xV100-32G,16x8xH100-SXM
"$B/autohet" plan --model llama2-13b --cluster "$C" --global-batch 2048 --quiet --json "$TMP/p.json"
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "| nodes lost | lost (of the plan's used nodes) | fast replan ms (median of $RUNS) | full search s (median of $RUNS) | fast replan iteration s | full search iteration s | fast vs full |"
echo "|---:|---|---:|---:|---:|---:|---:|"
RANDOM=$SEED
for n in 1 2 4 8; do
  # n distinct nodes the plan uses
  jq -r '[.replicas[].stages[].node_index] | unique | .[]' "$TMP/p.json" >"$TMP/used"
  lost=$(awk -v n="$n" -v s="$RANDOM" 'BEGIN { srand(s) } { a[NR] = $1 } END {
           for (i = NR; i > 1; i--) { j = int(rand() * i) + 1; t = a[i]; a[i] = a[j]; a[j] = t }
           for (i = 1; i <= n; i++) print a[i] }' "$TMP/used" |
         while read -r i; do jq -r --argjson i "$i" '.cluster.nodes[$i].name' "$TMP/p.json"; done | paste -sd, -)
  : >"$TMP/fast"
  : >"$TMP/full"
  for ((r = 0; r < RUNS; r++)); do
    "$B/autohet" replan "$TMP/p.json" --lost "$lost" --exact --quiet --json "$TMP/r.json"
    jq -r '.replan.fast_s' "$TMP/r.json" >>"$TMP/fast"
    jq -r '.replan.full_search_s' "$TMP/r.json" >>"$TMP/full"
  done
  jq -r --arg lost "$lost" --arg n "$n" --arg f "$(median <"$TMP/fast")" --arg x "$(median <"$TMP/full")" \
    '.replan | [$n, $lost, ($f | tonumber * 1000), ($x | tonumber), .fast_iteration_time_s, .full_iteration_time_s,
                (.fast_iteration_time_s / .full_iteration_time_s - 1) * 100] | @tsv' "$TMP/r.json" |
    awk -F'\t' '{ printf "| %s | %s | %.1f | %.3f | %.4f | %.4f | %+.1f%% |\n", $1, $2, $3, $4, $5, $6, $7 }'
done
