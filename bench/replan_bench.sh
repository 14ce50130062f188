#!/usr/bin/env bash
# Replanning after a loss (issue #30: "a replan after losing nodes of a running plan <= 100 ms at 1,024 GPUs"):
# the 1,024-GPU, 6-type pool of the planner bench (llama2-13b, global batch 2048) is planned once; then, for
# RUNS trials of n nodes lost at random (seeded), the fast replan (keep the whole replicas, plan the nodes
# left, deal the micro-batches again) against the full search of the survivors (`autohet replan --exact`):
# their times and the iteration time each finds. A markdown table on stdout.
#   bench/replan_bench.sh [--build DIR] [--runs N] [--seed S]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build RUNS=5 SEED=30
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
. bench/lib.sh
echo "| nodes lost | trials | fast replan ms: median (max) | full search s: median | fast vs full: median (range) |"
echo "|---:|---:|---:|---:|---:|"
jq -r '[.replicas[].stages[].node_index] | unique | .[]' "$TMP/p.json" >"$TMP/used"
for n in 1 2 4 8; do
  : >"$TMP/fast"
  : >"$TMP/full"
  : >"$TMP/gap"
  for ((t = 0; t < RUNS; t++)); do
    # n distinct nodes the plan uses, drawn with a seed of their own (bash reseeds $RANDOM in subshells)
    lost=$(awk -v n="$n" -v s="$((SEED * 1000 + n * 10 + t))" 'BEGIN { srand(s) } { a[NR] = $1 } END {
             for (i = NR; i > 1; i--) { j = int(rand() * i) + 1; x = a[i]; a[i] = a[j]; a[j] = x }
             for (i = 1; i <= n; i++) print a[i] }' "$TMP/used" |
           while read -r i; do jq -r --argjson i "$i" '.cluster.nodes[$i].name' "$TMP/p.json"; done | paste -sd, -)
    "$B/autohet" replan "$TMP/p.json" --lost "$lost" --exact --quiet --json "$TMP/r.json"
    jq -r '.replan | .fast_s' "$TMP/r.json" >>"$TMP/fast"
    jq -r '.replan | .full_search_s' "$TMP/r.json" >>"$TMP/full"
    jq -r '.replan | (.fast_iteration_time_s / .full_iteration_time_s - 1) * 100' "$TMP/r.json" >>"$TMP/gap"
  done
  printf '| %d | %d | %.1f (%.1f) | %.2f | %+.1f%% (%+.1f%% to %+.1f%%) |\n' "$n" "$RUNS" \
    "$(median <"$TMP/fast" | awk '{ print $1 * 1000 }')" "$(sort -g "$TMP/fast" | tail -1 | awk '{ print $1 * 1000 }')" \
    "$(median <"$TMP/full")" "$(median <"$TMP/gap")" "$(sort -g "$TMP/gap" | head -1)" "$(sort -g "$TMP/gap" | tail -1)"
done
