#!/usr/bin/env bash
# Closed form vs simulation on plans whose stages have different TP degrees
# (tests/plans/sim-mixtp-*.json: replicas of different degrees in one bucket,
# pipelines whose stages change degree, misaligned stage boundaries). OPT-350M
# plans use Sailor's measured profiles and GCP links (the `an-` ones the
# analytic model and the datasheet catalog), 1F1B, both p2p modes. Prints a
# markdown table and the worst |closed form / simulated - 1|.
# usage: bench/mixtp_bench.sh BIN [OUT.md]
set -euo pipefail
BIN="$1"
OUT="${2:-/dev/stdout}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SAILOR=(--profile "$ROOT/tests/fixtures/sailor/OPT-350" --devices "$ROOT/bench/peer-plans/gcp-devices.json")
{
  echo "| plan | model | replicas | stage degrees | p2p | closed form s | simulated s | error | DP tail s |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for plan in "$ROOT"/tests/plans/sim-mixtp-*.json; do
    name=$(basename "$plan" .json)
    name=${name#sim-mixtp-}
    flags=()
    case "$name" in an-*) ;; *) flags=("${SAILOR[@]}") ;; esac
    for p2p in overlapped blocking; do
      "$BIN" simulate "$plan" "${flags[@]}" --p2p "$p2p" --overlap-dp --quiet --json "$TMP/s.json" # the planner's program
      jq -r --arg n "$name" --arg p "$p2p" '[$n, .model, (.replicas | length),
          ([.stages[].tp] | unique | map(tostring) | join(",")), $p, .closed_form_s, .iteration_time_s,
          100 * .model_error, .dp_allreduce_tail_s] | @tsv' "$TMP/s.json" |
        awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %.4f | %.4f | %+.2f%% | %.3f |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
      jq -r '.model_error | fabs' "$TMP/s.json" >>"$TMP/err"
    done
  done
  echo
  echo "Worst |closed form / simulated - 1|: $(sort -g "$TMP/err" | tail -1 | awk '{printf "%.2f%%", 100 * $1}')"
} >"$OUT"
