#!/usr/bin/env bash
# Checkpoint benchmark: the cost of a layer checkpoint (`autohet train --ckpt-dir`)
# next to the step it follows, for the GPT-2-124M-shaped model on one rank, and
# the time to resume from it. Writes a markdown section.
# usage: bench/ckpt_bench.sh BIN OUT.md [CKPT_PARENT_DIR]
set -euo pipefail
BIN="$1"
OUT="$2"
PARENT="${3:-/tmp}"
TMP=$(mktemp -d)
CK=$(mktemp -d -p "$PARENT")
trap 'rm -rf "$TMP" "$CK"' EXIT
DATA="$(dirname "$0")/../tests/fixtures/text"
MODEL="$(dirname "$0")/gpt2-124m-bytes.json"
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
ARGS=(--model "$MODEL" --data "$DATA" --seq 128 --global-batch 4 --micro-batch 4 --steps 5 --eval-every 0 --lr 3e-4)

echo "== checkpoint: GPT-2 124M shape, one rank, $(nproc) threads, every step to $(df --output=fstype "$CK" | tail -1) =="
OMP_NUM_THREADS=$(nproc) "$BIN" train "${ARGS[@]}" --ckpt-dir "$CK" --ckpt-every 1 --log "$TMP/ck.log" >"$TMP/ck.out"
save=$(grep '^checkpoint: step' "$TMP/ck.out" | tail -4 | sed 's/.*(\([0-9.]*\) s).*/\1/' | median)
step=$(jq -s '.[1:] | map(.step_s) | .[]' "$TMP/ck.log" | median)
bytes=$(du -sb "$CK" | cut -f1)
params=$(jq '[.shards[]] | length' "$CK"/*/manifest.json | head -1)
start=$(date +%s.%N)
OMP_NUM_THREADS=$(nproc) "$BIN" train "${ARGS[@]}" --resume "$CK" >"$TMP/res.out"
resume_line=$(grep '^resumed from' "$TMP/res.out" | sed 's/.*(\([0-9.]*\) s).*/\1/')
printf "  step %.3f s, checkpoint %.3f s (%.1f%% of a step), %.1f MB in %d shards, %.0f MB/s; restore %.3f s\n" \
  "$step" "$save" "$(echo "100 * $save / $step" | bc -l)" "$(echo "$bytes / 1000000" | bc -l)" "$params" \
  "$(echo "$bytes / 1000000 / $save" | bc -l)" "$resume_line"
{
  echo "### Layer checkpoints (\`autohet train --ckpt-dir --ckpt-every 1\`, \`--resume\`)"
  echo
  echo "GPT-2 124M shape (byte vocabulary), one rank with all $(nproc) cores, global batch 4 x seq 128; a"
  echo "checkpoint (parameters + both AdamW moments of every layer, safetensors + XXH64, fsync + rename)"
  echo "after every step into \`$(df --output=fstype "$CK" | tail -1)\`; medians of steps 2-5."
  echo
  echo "| step | checkpoint (synchronous) | share of a step | state written | write rate | restore (read + verify) |"
  echo "|---|---|---|---|---|---|"
  printf "| %.3f s | %.3f s | %.1f%% | %.1f MB in %d shards | %.0f MB/s | %.3f s |\n" "$step" "$save" \
    "$(echo "100 * $save / $step" | bc -l)" "$(echo "$bytes / 1000000" | bc -l)" "$params" \
    "$(echo "$bytes / 1000000 / $save" | bc -l)" "$resume_line"
  echo
  echo "The checkpoint is written synchronously after the step; checkpoints every K steps cost 1/K of this"
  echo "share. The memory-tier snapshot of \`autohet run\` and its cost per step are in the recovery section."
  echo
} >>"$OUT"
