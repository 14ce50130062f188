#!/usr/bin/env bash
# Replanning after a loss (issue #30: "a replan after losing nodes of a running plan <= 100 ms at 1,024 GPUs"):
# the 1,024-GPU, 6-type pool of the planner bench (llama2-13b, global batch 2048) is planned once with its
# replans computed ahead (`plan --replans DEPTH`); then, for RUNS trials of n nodes lost at random (seeded),
# the survivors are replanned three ways: looked up in the plan's replans (losses of up to DEPTH nodes), the
# fast replan (keep the whole replicas, plan the nodes left, deal the micro-batches again) and the full search
# of the survivors (`autohet replan --exact`): their times and the iteration time each finds; and the wall time
# of the whole `autohet replan --fast` command (process start to exit, the plan document read). Markdown on stdout.
#   bench/replan_bench.sh [--build DIR] [--runs N] [--seed S] [--depth D]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build RUNS=5 SEED=30 DEPTH=4
while [ $# -gt 0 ]; do
  case "$1" in
    --build) B="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --depth) DEPTH="$2"; shift 2 ;;
    *) echo "usage: bench/replan_bench.sh [--build DIR] [--runs N] [--seed S] [--depth D]" >&2; exit 2 ;;
  esac
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
C=32x8xA100-40G,16x8xA100-80G,16x8xH800,16x8xH20,32x8xV100-32G,16x8xH100-SXM
. bench/lib.sh
plan_s=$(wall_s "$B/autohet" plan --model llama2-13b --cluster "$C" --global-batch 2048 --quiet --json "$TMP/p0.json")
"$B/autohet" plan --model llama2-13b --cluster "$C" --global-batch 2048 --replans "$DEPTH" --quiet --json "$TMP/p.json"
echo "Plan alone: $(printf %.2f "$plan_s") s wall; with \`--replans $DEPTH\`: $(jq '.replans.entries | length' "$TMP/p.json") losses" \
  "planned ahead in $(jq '.replans.build_s * 10 | round / 10' "$TMP/p.json") s, the plan document $(($(stat -c %s "$TMP/p.json") / 1024)) KiB" \
  "($(($(stat -c %s "$TMP/p0.json") / 1024)) KiB without)."
echo
echo "| nodes lost | trials | replan command wall ms: median (max) | computed ahead: ms, median (max) | computed ahead vs full | fast replan ms: median (max) | fast vs full: median (range) | full search s: median |"
echo "|---:|---:|---:|---|---|---:|---:|---:|"
jq -r '[.replicas[].stages[].node_index] | unique | .[]' "$TMP/p.json" >"$TMP/used"
pct() { printf '%+.1f%% (%+.1f%% to %+.1f%%)' "$(median <"$1")" "$(sort -g "$1" | head -1)" "$(sort -g "$1" | tail -1)"; }
ms() { printf '%.1f (%.1f)' "$(median <"$1" | awk '{ print $1 * 1000 }')" "$(sort -g "$1" | tail -1 | awk '{ print $1 * 1000 }')"; }
for n in 1 2 4 8; do
  for f in fast full gap ahead wall same near neargap; do : >"$TMP/$f"; done
  for ((t = 0; t < RUNS; t++)); do
    # n distinct nodes the plan uses, drawn with a seed of their own (bash reseeds $RANDOM in subshells)
    lost=$(awk -v n="$n" -v s="$((SEED * 1000 + n * 10 + t))" 'BEGIN { srand(s) } { a[NR] = $1 } END {
             for (i = NR; i > 1; i--) { j = int(rand() * i) + 1; x = a[i]; a[i] = a[j]; a[j] = x }
             for (i = 1; i <= n; i++) print a[i] }' "$TMP/used" |
           while read -r i; do jq -r --argjson i "$i" '.cluster.nodes[$i].name' "$TMP/p.json"; done | paste -sd, -)
    wall_s "$B/autohet" replan "$TMP/p.json" --lost "$lost" --fast --quiet >>"$TMP/wall"
    "$B/autohet" replan "$TMP/p.json" --lost "$lost" --exact --quiet --json "$TMP/r.json"
    jq -r '.replan | .fast_s' "$TMP/r.json" >>"$TMP/fast"
    jq -r '.replan | .full_search_s' "$TMP/r.json" >>"$TMP/full"
    jq -r '.replan | (.fast_iteration_time_s / .full_iteration_time_s - 1) * 100' "$TMP/r.json" >>"$TMP/gap"
    jq -r '.replan | select(has("ahead_s")) | .ahead_s' "$TMP/r.json" >>"$TMP/ahead"
    jq -r '.replan | select(has("ahead_s")) |
           if .ahead_search_value_ns == .full_search_value_ns and .ahead_iteration_time_s == .full_iteration_time_s
           then "same" else "differs" end' "$TMP/r.json" >>"$TMP/same"
    jq -r '.replan | select(has("ahead_repair_s")) | .ahead_repair_s' "$TMP/r.json" >>"$TMP/near"
    jq -r '.replan | select(has("ahead_repair_s")) | (.ahead_repair_iteration_time_s / .full_iteration_time_s - 1) * 100' \
      "$TMP/r.json" >>"$TMP/neargap"
  done
  if [ -s "$TMP/ahead" ]; then
    ahead="lookup $(ms "$TMP/ahead")" same="$(grep -c '^same$' "$TMP/same" || true) of $(wc -l <"$TMP/same") the same plan"
  elif [ -s "$TMP/near" ]; then
    ahead="$DEPTH of them looked up, the rest repaired: $(ms "$TMP/near")" same="$(pct "$TMP/neargap")"
  else
    ahead="not held (depth $DEPTH)" same="-"
  fi
  printf '| %d | %d | %s | %s | %s | %s | %s | %.2f |\n' "$n" "$RUNS" "$(ms "$TMP/wall" | sed 's/\.[0-9]//g')" "$ahead" "$same" \
    "$(ms "$TMP/fast")" "$(pct "$TMP/gap")" "$(median <"$TMP/full")"
done
