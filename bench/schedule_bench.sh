#!/usr/bin/env bash
# Pipeline schedules side by side on one 4-stage plan (small-gpt, 8 micro-batches,
# emulated quarter-speed devices so that 4 ranks fit on few cores: each op
# computes, then waits 3x its time): for 1F1B, GPipe and interleaved 1F1B (V = 2)
# the simulator's iteration time and the measured step time (median of steps 2..N
# over several runs, schedules alternated), and the pipeline bubble per rank that
# `autohet analyze` finds in a traced run. Ideal with free communication:
# (m + S - 1)(f + b) for 1F1B and GPipe, (m + (S - 1) / V)(f + b) interleaved.
# usage: bench/schedule_bench.sh BIN OUT.md [RUNS]
set -euo pipefail
BIN="$1"
OUT="$2"
RUNS="${3:-3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
PLAN="$HERE/plans/small-gpt-4stage.json"
DATA="$HERE/../tests/fixtures/text"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
SCHEDS="1f1b gpipe interleaved"
train() { # schedule log [more flags]
  local s="$1" log="$2"; shift 2
  mpirun -np 4 --bind-to none "$BIN" train --model small-gpt --data "$DATA" --plan "$PLAN" --steps 5 \
    --eval-every 0 --schedule "$s" --log "$log" "$@" >/dev/null
}
for s in $SCHEDS; do
  "$BIN" simulate "$PLAN" --schedule "$s" --quiet --json "$TMP/sim-$s.json"
done
for r in $(seq "$RUNS"); do
  for s in $SCHEDS; do
    echo "== run $r: $s" >&2
    train "$s" "$TMP/$s-$r.log"
  done
done
for s in $SCHEDS; do
  train "$s" "$TMP/tr-$s.log" --steps 3 --trace "$TMP/trace-$s.json"
  "$BIN" analyze "$TMP/trace-$s.json" --json "$TMP/an-$s.json" >/dev/null
done
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') (model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '))"
base_meas=$(cat "$TMP"/1f1b-*.log | jq -s 'group_by(.step) | .[1:] | map(.[].step_s) | .[]' | median)
base_sim=$(jq .iteration_time_s "$TMP/sim-1f1b.json")
{
  echo "### Pipeline schedules (\`train --schedule\`, \`simulate --schedule\`)"
  echo
  echo "$(date -u +%Y-%m-%d), $cpu, $(nproc --all) cores. One replica of 4 stages (small-gpt, layers 2+2+2+2),"
  echo "8 micro-batches of 2 x 128 tokens, 4 MPI ranks on emulated \`cpu-quarter\` devices (each op waits 3x"
  echo "its compute time, so the pipeline's shape and not the shared cores sets the step time). Measured:"
  echo "median step time of steps 2-5 over $RUNS runs per schedule, schedules alternated. Bubble: the mean"
  echo "over ranks of \`autohet analyze\`'s pipeline bubble (blocking receives not overlapped), per step,"
  echo "in a traced run; simulated: the mean idle time per GPU (neither computing nor communicating)."
  echo
  echo "| schedule | simulated iteration | vs 1F1B | measured step | vs 1F1B | measured bubble / step | simulated idle / step | ideal vs 1F1B |"
  echo "|---|---|---|---|---|---|---|---|"
  for s in $SCHEDS; do
    sim=$(jq .iteration_time_s "$TMP/sim-$s.json")
    meas=$(cat "$TMP"/$s-*.log | jq -s 'group_by(.step) | .[1:] | map(.[].step_s) | .[]' | median)
    bub=$(jq '([.ranks[].bubble_s] | add / length) / ((.steps // 1) | if . < 1 then 1 else . end)' "$TMP/an-$s.json")
    sbub=$(jq '[.gpus[].idle_s] | add / length' "$TMP/sim-$s.json")
    ideal=$([ "$s" = interleaved ] && echo "(8 + 3/2) / 11 = 0.864" || echo "1")
    printf "| %s | %.4f s | %.3f | %.4f s | %.3f | %.4f s | %.4f s | %s |\n" "$s" "$sim" \
      "$(echo "$sim / $base_sim" | bc -l)" "$meas" "$(echo "$meas / $base_meas" | bc -l)" "$bub" "$sbub" "$ideal"
  done
  echo
  echo "The simulator prices the plan with the analytic profile of the catalog's \`cpu\` device, not this"
  echo "machine's measured speed, so its seconds are not the measured ones: compare the ratios."
  echo
} >"$OUT"
cat "$OUT"
