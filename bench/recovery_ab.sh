#!/usr/bin/env bash
# Before/after of the recovery path: two autohet binaries (A = before, B = after)
# run the 1-of-4 scenario of bench/recovery_bench.sh (38M GPT, preempted after
# step 4, checkpoints every 3 steps, cloud at 100 MB/s per node), both recovery
# policies, interleaved A-bitmap, B-bitmap, A-full, B-full in each of RUNS
# rounds (this machine is shared and noisy); prints the median of each phase.
# Usage: bench/recovery_ab.sh BIN_A BIN_B [RUNS]   (BIN_A "-": B alone)
set -uo pipefail
A="$1" B="$2" RUNS="${3:-3}"
HERE="$(cd "$(dirname "$0")" && pwd)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
CLOUD="${RECOVERY_BENCH_CLOUD_MBS:-100}"
one() { # bin label mode round
  local out="$TMP/$2-$3-$4"
  timeout 900 "$1" run --plan "$HERE/plans/gpt-38m-4node.json" --model "$HERE/gpt-38m-bytes.json" \
    --data "$HERE/../tests/fixtures/text" --steps 6 --seed 1 --eval-every 0 --ckpt-every 3 --preempt n1@4 \
    --recovery "$3" --cloud-bandwidth "$CLOUD" --run-dir "$out.run" --report "$out.json" >"$out.out" 2>&1 \
    || { tail -20 "$out.out"; echo "recovery_ab: $2 $3 failed" >&2; exit 1; }
  rm -rf "$out.run"
}
for ((r = 1; r <= RUNS; r++)); do
  for mode in layer-bitmap full-reload; do
    [ "$A" = - ] || one "$A" A "$mode" "$r"
    one "$B" B "$mode" "$r"
  done
done
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc --all) cores; cloud $CLOUD MB/s; median of $RUNS"
echo "| binary | recovery | detection s | replan+assign s | relaunch s | restore s | memory s | peer s | cloud s | recovery s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
med() { sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'; }
for mode in layer-bitmap full-reload; do
  for bin in A B; do
    [ "$bin" = A ] && [ "$A" = - ] && continue
    f=("$TMP/$bin-$mode-"*.json)
    col() { for j in "${f[@]}"; do jq ".recoveries[0] | $1" "$j"; done | med; }
    echo "| $bin | $mode | $(col .detection_s) | $(col '.replan_s + .assign_s') | $(col .relaunch_s) | $(col .restore_s) | $(col .seconds_by_tier.memory) | $(col .seconds_by_tier.peer) | $(col .seconds_by_tier.cloud) | $(col .seconds) |"
  done
done
for bin in A B; do
  [ "$bin" = A ] && [ "$A" = - ] && continue
  ratios=$(for ((r = 1; r <= RUNS; r++)); do
    echo "$(jq '.recoveries[0].seconds' "$TMP/$bin-full-reload-$r.json") / $(jq '.recoveries[0].seconds' "$TMP/$bin-layer-bitmap-$r.json")" | bc -l
  done | sort -g | tr '\n' ' ')
  echo "$bin: full-reload / layer-bitmap per round (sorted): $ratios"
done
