#!/usr/bin/env bash
# `autohet simulate` against Megatron-LM's measured weak-scaling table (issue #30's "Megatron's Table 1"; the data
# and where each figure comes from: bench/megatron-table1/README.md). Every row is planned as Megatron laid it out
# (--baseline megatron with its TP, PP, DP and micro-batch, full recomputation, A100-80G nodes of 8 GPUs) and
# simulated with 1F1B and with the interleaved schedule Megatron ran (the fewest chunks, 2 or 3, dividing a stage's
# blocks). Prints a markdown table with each run's error (simulated / measured - 1), the mean |error| and the worst.
#   bench/megatron_table1.sh [--build DIR] [--out FILE] [--check MEAN,WORST] [--save-rows FILE | --rows FILE]
# --check: exit 1 unless both columns' mean |error| <= MEAN % and every run is within WORST %.
# --save-rows: keep the simulated rows (TSV); --rows: report and check such rows without simulating again.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build OUT="" CHECK="" SAVE="" ROWS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) B="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --check) CHECK="$2"; shift 2 ;;
    --save-rows) SAVE="$2"; shift 2 ;;
    --rows) ROWS="$2"; shift 2 ;;
    *) echo "usage: bench/megatron_table1.sh [--build DIR] [--out FILE] [--check MEAN,WORST] [--save-rows FILE | --rows FILE]" >&2
       exit 2 ;;
  esac
done
DATA=bench/megatron-table1/table1.csv
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# one row: the model config, the plan, both simulations; appends a TSV line to $TMP/rows
run_row() {
  local pb=$1 heads=$2 h=$3 l=$4 tp=$5 pp=$6 n=$7 gb=$8 x=$9 mb=${10}
  local dp=$((n / (tp * pp))) cfg="$TMP/gpt-$pb.json" plan="$TMP/plan-$pb.json" v=1 meas s1 si=""
  printf '{"model_type": "gpt2", "n_embd": %d, "n_head": %d, "n_layer": %d, "vocab_size": 51200, "n_positions": 2048, "tie_word_embeddings": true}\n' \
    "$h" "$heads" "$l" >"$cfg"
  "$B/autohet" plan --model "$cfg" --cluster "$((n / 8))x8xA100-80G" --global-batch "$gb" --seq 2048 --tp "$tp" \
    --pp "$pp" --dp "$dp" --micro-batch "$mb" --recompute full --max-stages 64 --baseline megatron --json "$plan" \
    --quiet >/dev/null 2>"$TMP/err" || { echo "megatron_table1: $pb B: plan: $(cat "$TMP/err")" >&2; exit 1; }
  "$B/autohet" simulate "$plan" --json "$TMP/s.json" --quiet 2>"$TMP/err" \
    || { echo "megatron_table1: $pb B: simulate: $(cat "$TMP/err")" >&2; exit 1; }
  s1=$(jq .iteration_time_s "$TMP/s.json")
  if [ "$pp" -gt 1 ]; then
    for v in 2 3; do [ $((l / pp % v)) -eq 0 ] && break; done
    "$B/autohet" simulate "$plan" --schedule interleaved --virtual-stages "$v" --json "$TMP/s.json" --quiet \
      2>"$TMP/err" || { echo "megatron_table1: $pb B: simulate interleaved: $(cat "$TMP/err")" >&2; exit 1; }
    si=$(jq .iteration_time_s "$TMP/s.json")
  else
    v=1 si=$s1 # one stage: no pipeline to interleave
  fi
  meas=$(awk -v b="$gb" -v l="$l" -v h="$h" -v x="$x" -v n="$n" \
    'BEGIN { s = 2048; V = 51200; printf "%.6f", 96 * b * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / (x * 1e12 * n) }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$pb" "$tp" "$pp" "$dp" "$n" "$gb" "$mb" "$meas" "$s1" "$v" "$si" \
    >>"$TMP/rows"
}

report() {
  echo "| model | TP | PP | DP | GPUs | global batch | micro-batch | measured s | simulated 1F1B s | error | interleaved (chunks) s | error |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  awk -F'\t' '{ printf "| %s B | %s | %s | %s | %s | %s | %s | %.3f | %.3f | %+.1f%% | %.3f (%s) | %+.1f%% |\n",
                $1, $2, $3, $4, $5, $6, $7, $8, $9, ($9 / $8 - 1) * 100, $11, ($10 > 1 ? $10 : "-"), ($11 / $8 - 1) * 100 }' \
    "$TMP/rows"
  echo
  awk -F'\t' '{ a = $9 / $8 - 1; a = a < 0 ? -a : a; b = $11 / $8 - 1; b = b < 0 ? -b : b; ta += a; tb += b
                if (a > ma) ma = a; if (b > mb) mb = b }
    END { printf "**Mean |error| (worst run): 1F1B %.1f%% (%.1f%%); the interleaved schedule Megatron ran %.1f%% (%.1f%%).**\n",
          100 * ta / NR, 100 * ma, 100 * tb / NR, 100 * mb }' "$TMP/rows"
}

if [ -n "$ROWS" ]; then
  cp "$ROWS" "$TMP/rows"
else
  tail -n +2 "$DATA" | while IFS=, read -r pb heads h l tp pp n gb x mb; do
    run_row "$pb" "$heads" "$h" "$l" "$tp" "$pp" "$n" "$gb" "$x" "$mb"
  done
fi
[ -z "$SAVE" ] || cp "$TMP/rows" "$SAVE"
if [ -n "$OUT" ]; then report >"$OUT"; cat "$OUT"; else report; fi
if [ -n "$CHECK" ]; then
  awk -F'\t' -v lim="$CHECK" 'BEGIN { split(lim, L, ",") }
    { for (c = 9; c <= 11; c += 2) { e = $c / $8 - 1; e = e < 0 ? -e : e; t[c] += e
        if (100 * e > L[2]) { printf "megatron_table1: %s B: %.1f%% off (limit %s%%)\n", $1, 100 * e, L[2]; bad = 1 } } }
    END { for (c = 9; c <= 11; c += 2) if (100 * t[c] / NR > L[1]) { printf "megatron_table1: mean %.1f%% (limit %s%%)\n", 100 * t[c] / NR, L[1]; bad = 1 }
          exit bad }' "$TMP/rows" >&2
fi
