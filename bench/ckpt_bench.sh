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
# the same checkpoints traced (every 2 steps): the trace's records against the progress line's times, and what
# the diagnosis makes of them
OMP_NUM_THREADS=$(nproc) "$BIN" train "${ARGS[@]}" --ckpt-dir "$CK/t" --ckpt-every 2 --trace "$TMP/t.json" >"$TMP/t.out"
line_s=$(grep '^checkpoint: step' "$TMP/t.out" | sed 's/.*(\([0-9.]*\) s).*/\1/' | median)
rec_s=$(jq '.traceEvents[] | select(.cat == "checkpoint") | .dur / 1e6' "$TMP/t.json" | median)
n_rec=$(jq '[.traceEvents[] | select(.cat == "checkpoint")] | length' "$TMP/t.json")
"$BIN" analyze "$TMP/t.json" --diagnose --json "$TMP/t.an.json" >/dev/null
top=$(jq -r '.findings[0] | "`\(.kind)` (op `\(.op)`): \(.cost_s * 1000 | round / 1000) s, \(.share * 1000 | round / 10)% of the traced wall time, before \(.steps | length) traced step(s)"' "$TMP/t.an.json")
ck_share=$(jq '.ranks[0].checkpoint_s / .ranks[0].wall_s * 100' "$TMP/t.an.json")
echo "  traced: $n_rec checkpoint records, median $rec_s s (progress lines: $line_s s); top finding: $top"
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
  echo "The same run traced (\`--ckpt-every 2 --trace\`; the trace covers steps 2-5): $n_rec \`checkpoint disk\` record(s),"
  printf "median %.3f s each (the progress lines' checkpoint times: median %.3f s); \`analyze\` puts %.1f%% of the\n" \
    "$rec_s" "$line_s" "$ck_share"
  echo "traced wall time in the checkpoint column, and \`analyze --diagnose\`'s top finding is $top"
  echo "(the save after the last step delays no traced step and is left out of the cost)."
  echo
} >>"$OUT"
