#!/usr/bin/env bash
# The overlapped data-parallel all-reduce (`train --overlap-dp`) against the blocking one on the engine:
# small-gpt on asymmetric replicas (bench/plans/small-gpt-asym*.json: one rank with the whole model beside
# a 2-stage replica, so rank 0's last backward is cut at the two buckets and the top bucket's all-reduce
# can run while the bottom half computes), at two shapes (more compute per step; one small micro-batch,
# where the all-reduce weighs most), runs alternated blocking / overlapped, the median step time of
# steps 2..N of each, the median of the per-pair ratios, and the simulator's two iteration times of the
# same plan (the analytic `cpu` device: compare the ratios, not the seconds).
# usage: bench/overlap_bench.sh BIN OUT.md [PAIRS]
set -euo pipefail
BIN="$1"
OUT="$2"
PAIRS="${3:-15}"
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA="$HERE/../tests/fixtures/text"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
STEPS=10
train() { # plan log [flags]
  local plan="$1" log="$2"; shift 2
  mpirun -np 3 --bind-to none "$BIN" train --model small-gpt --data "$DATA" --plan "$plan" --steps $STEPS \
    --eval-every 0 --log "$log" "$@" >/dev/null
}
steps() { jq -s '.[1:] | .[].step_s' "$@"; } # steps 2..N of one or more logs
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') (model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '))"
{
  echo "### Overlapped all-reduce (\`train --overlap-dp\`)"
  echo
  echo "$(date -u +%Y-%m-%d), $cpu, $(nproc --all) cores, Open MPI 4.1 over shared memory. small-gpt (6 blocks,"
  echo "hidden 256, 20 MB of fp32 gradients) on asymmetric replicas: replica 0 holds all 8 layers on one rank,"
  echo "replica 1 splits them 4 + 4 over two, so the buckets are [0,4) and [4,8) and rank 0's last backward is"
  echo "cut between them: with \`--overlap-dp\` the top bucket's all-reduce (with replica 1's second stage, done"
  echo "by then) is started before rank 0 computes the bottom half. 3 MPI ranks; $PAIRS runs of $STEPS steps per"
  echo "program, alternated; measured: the median step time of steps 2-$STEPS over all runs, and per pair the"
  echo "ratio of the two runs' medians. Simulated: the same plan on the catalog's analytic \`cpu\` device"
  echo "(compare the ratios, not the seconds)."
  echo
  echo "| plan | program | measured step (median) | vs blocking | per-pair ratio: median (range) | simulated iteration | vs blocking |"
  echo "|---|---|---|---|---|---|---|"
} >"$OUT"
for name in small-gpt-asym small-gpt-asym-comm; do
  PLAN="$HERE/plans/$name.json"
  for mode in blocking overlap; do
    flag=(); [ $mode = overlap ] && flag=(--overlap-dp)
    "$BIN" simulate "$PLAN" "${flag[@]}" --quiet --json "$TMP/sim-$name-$mode.json"
  done
  for r in $(seq "$PAIRS"); do
    echo "== $name pair $r" >&2
    train "$PLAN" "$TMP/$name-blocking-$r.log"
    train "$PLAN" "$TMP/$name-overlap-$r.log" --overlap-dp
  done
  mb=$(steps "$TMP"/$name-blocking-*.log | median)
  mo=$(steps "$TMP"/$name-overlap-*.log | median)
  ratios=$(for r in $(seq "$PAIRS"); do
    b=$(steps "$TMP/$name-blocking-$r.log" | median) o=$(steps "$TMP/$name-overlap-$r.log" | median)
    echo "$o / $b" | bc -l
  done)
  sb=$(jq .iteration_time_s "$TMP/sim-$name-blocking.json")
  so=$(jq .iteration_time_s "$TMP/sim-$name-overlap.json")
  shape=$(jq -r '"seq \(.train.seq), \(.replicas[0].micro_batches) x \(.micro_batch) per replica"' "$PLAN")
  {
    printf "| \`%s\` (%s) | blocking (default) | %.4f s | 1.000 | | %.4f s | 1.000 |\n" "$name" "$shape" "$mb" "$sb"
    printf "| | \`--overlap-dp\` | %.4f s | %.3f | %.3f (%.3f-%.3f) | %.4f s | %.3f |\n" "$mo" \
      "$(echo "$mo / $mb" | bc -l)" "$(echo "$ratios" | median)" "$(echo "$ratios" | sort -g | head -1)" \
      "$(echo "$ratios" | sort -g | tail -1)" "$so" "$(echo "$so / $sb" | bc -l)"
  } >>"$OUT"
done
cat "$OUT"
