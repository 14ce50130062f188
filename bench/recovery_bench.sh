#!/usr/bin/env bash
# Recovery after a spot preemption: autohet's layer-bitmap recovery vs a
# Varuna-like full reload from the cloud tier, same run, same tier settings.
# A 38M-parameter GPT (455 MB of parameters + AdamW moments), 2 data-parallel
# replicas of 2 stages on 4 virtual nodes (one lost) and of 4 stages on 8 (two
# lost, one per replica); `autohet run` replans for the survivors and resumes.
# Usage: bench/recovery_bench.sh BIN OUT.md
set -uo pipefail
BIN="$1"
OUT="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MODEL="$HERE/gpt-38m-bytes.json"
DATA="$HERE/../tests/fixtures/text"
STEPS=6
K=3 # disk + cloud checkpoint every K steps (the full reload restarts from the last one)
BWS="${RECOVERY_BENCH_CLOUD_MBS:-100 400}"
RUNS="${RECOVERY_BENCH_RUNS:-3}" # each configuration RUNS times; its row is the run of median recovery time
ARGS=(--model "$MODEL" --data "$DATA" --steps $STEPS --seed 1 --eval-every 0 --ckpt-every $K)

run_once() { # name plan preempt mode cloud-MB/s
  timeout 900 "$BIN" run --plan "$HERE/plans/$2.json" "${ARGS[@]}" --preempt "$3" --recovery "$4" \
    --cloud-bandwidth "$5" --run-dir "$TMP/$1.run" --log "$TMP/$1.log" --report "$TMP/$1.json" >"$TMP/$1.out" 2>&1 \
    || { tail -20 "$TMP/$1.out"; echo "recovery_bench: run $1 failed" >&2; exit 1; }
  rm -rf "$TMP/$1.run"
}
run() { # name plan preempt mode cloud-MB/s: RUNS runs; NAME.json/.log = the median one's
  local r
  for ((r = 1; r <= RUNS; r++)); do run_once "$1-r$r" "${@:2}"; done
  local med
  med=$(for ((r = 1; r <= RUNS; r++)); do echo "$(jq '.recoveries[0].seconds' "$TMP/$1-r$r.json") $r"; done \
    | sort -g | sed -n "$(((RUNS + 1) / 2))p" | cut -d' ' -f2)
  cp "$TMP/$1-r$med.json" "$TMP/$1.json"
  cp "$TMP/$1-r$med.log" "$TMP/$1.log"
}
row() { # label name
  jq -r --arg lab "$1" --slurpfile log "$TMP/$2.log" '
    ([$log[] | .step_s] | add / length) as $step | .recoveries[0] as $r
    | [$lab, .recovery, (.cloud_bandwidth_mbs | tostring) + " MB/s",
       ($r.detection_s | . * 1000 | round / 1000 | tostring), ($r.replan_s | . * 1000 | round / 1000 | tostring),
       ($r.relaunch_s | . * 1000 | round / 1000 | tostring), ($r.restore_s | . * 1000 | round / 1000 | tostring),
       ($r.bytes_by_tier | [.memory, .disk, .peer, .cloud] | map(. / 1e6 | round | tostring) | join(" / ")),
       ($r.seconds | . * 1000 | round / 1000 | tostring), ($r.resumed_step | tostring), ($r.steps_lost | tostring),
       ($r.seconds + $r.steps_lost * $step | . * 1000 | round / 1000 | tostring)] | "| " + join(" | ") + " |"' \
    "$TMP/$2.json"
}
secs() { jq '.recoveries[0].seconds' "$TMP/$1.json"; }
lost() { jq --slurpfile log "$TMP/$1.log" '([$log[] | .step_s] | add / length) as $s | .recoveries[0] | .seconds + .steps_lost * $s' "$TMP/$1.json"; }

echo "== recovery: 38M-parameter GPT, preempted at step 4, checkpoints to disk + cloud every $K steps =="
rows=()
ratios=()
for sc in "4node n1@4 1-of-4" "8node n1@4,n6@4 2-of-8"; do
  read -r nodes pre label <<<"$sc"
  run "$nodes-bitmap" "gpt-38m-$nodes" "$pre" layer-bitmap 100
  rows+=("$(row "$label" "$nodes-bitmap")")
  for bw in $BWS; do
    run "$nodes-full-$bw" "gpt-38m-$nodes" "$pre" full-reload "$bw"
    rows+=("$(row "$label" "$nodes-full-$bw")")
    ratios+=("| $label | $bw MB/s | $(echo "$(secs "$nodes-full-$bw") / $(secs "$nodes-bitmap")" | bc -l | xargs printf '%.2f')x | $(echo "$(lost "$nodes-full-$bw") / $(lost "$nodes-bitmap")" | bc -l | xargs printf '%.2f')x |")
  done
  printf '  %s\n' "${rows[@]: -$((1 + $(wc -w <<<"$BWS")))}"
done

# the price of the memory tier: the same 4-node job with and without a snapshot every step
snap() { # name extra-args (wall seconds of a 5-step 4-node job)
  local t0 t1
  t0=$(date +%s.%N)
  mpirun -np 4 --bind-to none "$BIN" train --plan "$HERE/plans/gpt-38m-4node.json" "${ARGS[@]}" --steps 5 --ckpt-every 100 \
    --ckpt-dir "$TMP/snap-$1" "${@:2}" >"$TMP/snap-$1.out" 2>&1 || { tail "$TMP/snap-$1.out"; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
median3() { sort -g | sed -n 2p; }
# each configuration 3 times, interleaved, the median (this machine is shared and noisy)
for r in 1 2 3; do
  snap plain >>"$TMP/plain.t"
  snap mem1 --ckpt-mem /dev/shm/autohet-bench-$$ --mem-every 1 >>"$TMP/mem1.t"
  rm -rf /dev/shm/autohet-bench-$$
  snap plain8 --steps 8 >>"$TMP/plain8.t"
  snap mem4 --ckpt-mem /dev/shm/autohet-bench-$$ --mem-every 4 --steps 8 >>"$TMP/mem4.t"
  rm -rf /dev/shm/autohet-bench-$$
done
plain=$(median3 <"$TMP/plain.t")
mem1=$(median3 <"$TMP/mem1.t")
plain8=$(median3 <"$TMP/plain8.t")
mem4=$(median3 <"$TMP/mem4.t")
over1=$(echo "100 * ($mem1 - $plain) / $plain" | bc -l)
over4=$(echo "100 * ($mem4 - $plain8) / $plain8" | bc -l)
printf '  memory snapshot every step: %.1f s vs %.1f s for 5 steps (+%.1f%%); every 4th: %.1f s vs %.1f s for 8 (+%.1f%%)\n' \
  "$mem1" "$plain" "$over1" "$mem4" "$plain8" "$over4"

{
  echo "### Recovery after a preemption (\`autohet run\`, issue #6)"
  echo
  echo "A 38M-parameter GPT (12 layers, hidden 512, byte vocabulary: 455 MB of parameters and AdamW moments),"
  echo "global batch 8 x seq 64, 2 data-parallel replicas of 2 stages on 4 virtual nodes and of 4 stages on 8,"
  echo "one rank per node, all on this machine's $(nproc --all) cores. The run is preempted after step 4 (SIGKILL of the"
  echo "node's ranks, its memory and disk tiers wiped); the controller stops the job, replans for the survivors"
  echo "and resumes. Disk and cloud checkpoints every $K steps; layer-bitmap keeps a memory-tier snapshot (/dev/shm)"
  echo "every step. Tier bandwidths: memory and local disk as this machine gives them (tmpfs, ext4 page cache),"
  echo "peers over Open MPI shared memory (one-sided gets from the holder's RMA window), the cloud tier paced to"
  echo "the stated MB/s per node (shared by the node's reading ranks). Recovery = from the kill to the restored"
  echo "state (detection + replan + relaunch + restore); *with lost work* adds the steps lost times the mean step."
  echo "Each row is the run of median recovery time among $RUNS runs of its configuration."
  echo
  echo "| scenario | recovery | cloud | detection s | replan s | relaunch s | restore s | MB memory / disk / peer / cloud | recovery s | resumed at | steps lost | with lost work s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "| scenario | cloud | full-reload / layer-bitmap (recovery) | (with lost work) |"
  echo "|---|---|---|---|"
  printf '%s\n' "${ratios[@]}"
  echo
  printf 'Memory-tier snapshot (synchronous, safetensors + XXH64 into /dev/shm) of the 4-node job, medians of 3\n'
  printf 'interleaved runs: every step %.1f s vs %.1f s for 5 steps (+%.1f%%); every 4th step (`--mem-every 4`)\n' "$mem1" "$plain" "$over1"
  printf '%.1f s vs %.1f s for 8 steps (+%.1f%%). Wall time of whole jobs, start-up included.\n' \
    "$mem4" "$plain8" "$over4"
  echo
} >>"$OUT"
