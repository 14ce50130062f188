#!/usr/bin/env bash
# Goodput over the real AWS P3 spot trace (Bamboo's, 11.4 h): autohet's
# replan + layer-bitmap recovery vs the Varuna-like full reload vs a static
# plan, for GPT-3 2.7B / 6.7B and LLaMA-2 7B. Prints a table, appends it to
# OUT.md and writes the plots into docs/img/.
# Usage: bench/spot_bench.sh BIN OUT.md
set -euo pipefail
BIN="$1"
OUT="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
TRACE="$HERE/../tests/fixtures/spot-traces/aws-p3-bamboo.csv"
IMG="$HERE/../docs/img"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$IMG"
rows=()
ratios=()
case_() { # model node cloud-MB/s [svg]
  local name="$1-$(echo "$2" | tr ',=' '_-')-$3"
  local svg=()
  [ -n "${4:-}" ] && svg=(--svg "$IMG/$4")
  "$BIN" spot-sim --trace "$TRACE" --node "$2" --model "$1" --global-batch 512 --seq 2048 --cloud-bandwidth "$3" \
    --json "$TMP/$name.json" "${svg[@]}" >"$TMP/$name.out"
  # a modelled replay's JSON carries no wall time (it stays reproducible): the table line has it
  local wall
  wall=$(sed -n 's/^replayed in \([0-9.]*\) s.*/\1/p' "$TMP/$name.out")
  rows+=("$(jq -r --arg m "$1" --arg n "$2" --arg c "$3" --arg w "$wall" '
    ($w | tonumber) as $w | (.tp_degrees | map(tostring) | join(",")) as $tp | .policies | to_entries[] | .value as $v
    | "| \($m) | \($n) | \($c) MB/s | \($tp) | \(.key) | \($v.samples / 1e6 | . * 100 | round / 100) M | \($v.avg_samples_per_s | . * 10 | round / 10)"
      + " | \($v.downtime_s / 3600 | . * 100 | round / 100) h | \([$v.downtime_by_cause[] | . / 3600 | . * 100 | round / 100 | tostring] | join(" / "))"
      + " | \($v.lost_samples / 1e3 | round)k | \($v.restarts) | \($w | . * 1000 | round / 1000) s |"' "$TMP/$name.json")")
  ratios+=("$(jq -r --arg m "$1" --arg n "$2" --arg c "$3" '.policies as $p
    | "| \($m) | \($n) | \($c) MB/s | \($p.autohet.samples / $p["full-reload"].samples | . * 100 | round / 100)x | \($p.autohet.samples / $p.static.samples | . * 100 | round / 100)x |"' \
    "$TMP/$name.json")")
  printf "%s\n" "${rows[-1]}" | sed "s/^/  /"
}
echo "== spot-sim: the AWS P3 trace (11.4 h, 344 events), global batch 512 x seq 2048 =="
case_ gpt3-2.7b 8xA100-40G 100 spot-sim-gpt3-2.7b.svg
case_ gpt3-6.7b 8xA100-40G 100 spot-sim-gpt3-6.7b.svg
case_ llama2-7b 8xA100-40G 100 spot-sim-llama2-7b.svg
case_ gpt3-6.7b 8xA100-40G 1000
case_ gpt3-6.7b "8xA100-40G=3,8xV100-16G=1" 100
{
  echo "### Goodput over a real spot trace (\`autohet spot-sim\`, issue #7)"
  echo
  echo "The AWS P3 availability trace published with Bamboo (tests/fixtures/spot-traces, 11.4 h, 344 events,"
  echo "163 changes of the node set, 10-32 nodes); every trace node is an 8-GPU node of the stated type (the"
  echo "mix draws each node's type from its name, 3:1). Global batch 512 x seq 2048, analytic profile, the"
  echo "planner's plan (TP degrees per stage, \`--replan-tp any\`; *TP*: the degrees the plans use) and the"
  echo "simulator's iteration time for every node set. Recovery costs (the recovery"
  echo "benchmark's regime scaled to GPU nodes): detection 5 s, restart 30 s, memory tier 10 GB/s, peers at the"
  echo "node's NIC, cloud at the stated MB/s per node, cloud checkpoints every 50 iterations, 16 B/param of"
  echo "state. *down* splits into detection / planning / restart / transfer / waiting (hours)."
  echo
  echo "| model | node | cloud | TP | policy | samples | samples/s | down | detect / plan / restart / transfer / wait | lost samples | restarts | replay |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "| model | node | cloud | autohet / full-reload (samples) | autohet / static |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${ratios[@]}"
  echo
  echo "![samples/s over the trace, GPT-3 6.7B](docs/img/spot-sim-gpt3-6.7b.svg)"
  echo
  echo "Plots for the other models: [GPT-3 2.7B](docs/img/spot-sim-gpt3-2.7b.svg),"
  echo "[LLaMA-2 7B](docs/img/spot-sim-llama2-7b.svg)."
  echo
} >>"$OUT"
