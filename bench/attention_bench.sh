#!/usr/bin/env bash
# Causal attention (issue #15): the attention share of a training step with the engine before the
# flash-style kernel (OLD_BIN, e.g. built from the revision before it) and with it (NEW_BIN), side by
# side: every round runs both binaries on every shape, one after the other. GPT-2 124M shape (hidden 768,
# 12 heads of 64) with LAYERS blocks and the byte vocabulary, one rank, the same tokens per step at
# every T (B x T = 1024). Attention share = the attention kernels' time (AUTOHET_PROFILE=1: q.k, softmax,
# P.V and their backward) over the summed step times of the run, every figure over all steps of a run
# (the profile counts them all); medians over the rounds. With
# KERNEL_BENCH (build/attention_bench) the kernel alone is also timed, forward + backward, old vs new.
#   bench/attention_bench.sh OLD_BIN NEW_BIN OUT.md [ROUNDS] [KERNEL_BENCH]
#   ATTN_BENCH_LAYERS (default 4), ATTN_BENCH_THREADS (default nproc), ATTN_BENCH_STEPS (default 4)
set -euo pipefail
OLD=$1
NEW=$2
OUT=$3
ROUNDS=${4:-3}
KBENCH=${5:-}
LAYERS=${ATTN_BENCH_LAYERS:-4}
THREADS=${ATTN_BENCH_THREADS:-$(nproc)}
STEPS=${ATTN_BENCH_STEPS:-4}
for b in "$OLD" "$NEW"; do [ -x "$b" ] || { echo "attention_bench: $b: not an executable" >&2; exit 2; }; done
case "$ROUNDS" in '' | *[!0-9]* | 0) echo "attention_bench: ROUNDS: expected a positive integer" >&2; exit 2 ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
DATA="$HERE/../tests/fixtures/text"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
CPU_MODEL="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') (family $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '))"
echo "{\"model_type\": \"gpt2\", \"n_embd\": 768, \"n_layer\": $LAYERS, \"n_head\": 12, \"n_positions\": 1024, \"vocab_size\": 256}" \
  >"$TMP/gpt2-shape.json"
shapes=("1024 1" "256 4" "64 16") # T and micro-batch: 1024 tokens per step

: >"$TMP/rows" # T which share attention_s_per_step step_s
for round in $(seq "$ROUNDS"); do
  for sh in "${shapes[@]}"; do
    read -r T B <<<"$sh"
    for which in old new; do
      bin=$OLD
      [ "$which" = new ] && bin=$NEW
      AUTOHET_PROFILE=1 OMP_NUM_THREADS=$THREADS "$bin" train --model "$TMP/gpt2-shape.json" --data "$DATA" \
        --seq "$T" --global-batch "$B" --micro-batch "$B" --steps "$STEPS" --eval-every 0 --log "$TMP/log" \
        >"$TMP/out" 2>&1 || { tail -5 "$TMP/out" >&2; echo "attention_bench: $which run failed (T $T)" >&2; exit 1; }
      att=$(grep -o 'attention [0-9.]*' "$TMP/out" | tail -1 | awk '{ print $2 }')
      [ -n "$att" ] || { echo "attention_bench: no engine profile line ($which, T $T)" >&2; exit 1; }
      total=$(jq -s 'map(.step_s) | add' "$TMP/log")
      step=$(echo "$total / $STEPS" | bc -l)
      echo "$T $which $(echo "$att / $total" | bc -l) $(echo "$att / $STEPS" | bc -l) $step" >>"$TMP/rows"
      printf "  round %d  T %4d  %s: attention %.1f%% of the step, %.3f s/step; step %.3f s\n" "$round" "$T" \
        "$which" "$(echo "100 * $att / $total" | bc -l)" "$(echo "$att / $STEPS" | bc -l)" "$step" >&2
    done
  done
done
col() { awk -v t="$1" -v w="$2" -v c="$3" '$1 == t && $2 == w { print $c }' "$TMP/rows" | median; }
{
  echo "CPU: $CPU_MODEL, $THREADS threads (OpenMP), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}. GPT-2 124M"
  echo "shape (hidden 768, 12 heads of 64) with $LAYERS blocks, byte vocabulary, one rank, B x T = 1024 tokens per"
  echo "step, $STEPS steps per run; median of $ROUNDS rounds, each running the engine before the flash-style"
  echo "kernel (\`$(basename "$OLD")\` of the base revision) and with it, one after the other. Attention share ="
  echo "the attention kernels' time (\`AUTOHET_PROFILE=1\`) / the summed step times; attention and step times are"
  echo "the means over the $STEPS steps of a run (the profile counts every step)."
  echo
  echo "| T | micro-batch | attention share before | after | share drop | attention s/step before | after | attention speed-up | step s before | after | step time change |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for sh in "${shapes[@]}"; do
    read -r T B <<<"$sh"
    so=$(col "$T" old 3) sn=$(col "$T" new 3) ao=$(col "$T" old 4) an=$(col "$T" new 4)
    to=$(col "$T" old 5) tn=$(col "$T" new 5)
    printf "| %d | %d | %.1f%% | %.1f%% | %.0f%% | %.3f | %.3f | %.2fx | %.3f | %.3f | %+.0f%% |\n" "$T" "$B" \
      "$(echo "100 * $so" | bc -l)" "$(echo "100 * $sn" | bc -l)" "$(echo "100 * (1 - $sn / $so)" | bc -l)" \
      "$ao" "$an" "$(echo "$ao / $an" | bc -l)" "$to" "$tn" "$(echo "100 * ($tn / $to - 1)" | bc -l)"
  done
  echo
} >"$OUT"
if [ -n "$KBENCH" ]; then
  echo "== the kernel alone" >&2
  {
    echo "The kernel alone (\`build/attention_bench\`): forward + backward of one layer's attention, B 1, 12 heads"
    echo "of 64, the engine's earlier attention (kept as the tests' reference) against the flash-style kernel,"
    echo "rounds alternating, median of 5; max rel diff = the largest norm-relative difference of out, dq, dk, dv."
    echo
    echo "| threads | T | earlier ms | flash ms | speed-up | max rel diff |"
    echo "|---|---|---|---|---|---|"
    for th in 1 "$THREADS"; do
      OMP_NUM_THREADS=$th "$KBENCH" --runs 5 >"$TMP/k"
      awk -v th="$th" '!/^#/ { printf "| %s | %s | %.2f | %.2f | %.2fx | %s |\n", th, $1, $2, $3, $4, $5 }' "$TMP/k"
      [ "$THREADS" = 1 ] && break
    done
    echo
    echo "Kernel: $(grep -o 'kernel [a-z0-9]*' "$TMP/k" | head -1 | cut -d' ' -f2) (chosen from the CPU's features)."
    echo
  } >>"$OUT"
fi
cat "$OUT"
