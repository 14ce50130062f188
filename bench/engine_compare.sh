#!/usr/bin/env bash
# Engine throughput of two builds side by side: the same runs alternated
# between an old and a new `autohet` binary, RUNS times each; per run the
# median tokens/s of steps 2..5; reported: the median over runs and new/old.
# (1) one rank, one thread, small-gpt; (2) 4 MPI ranks, tests/plans/small-2x2.json;
# (3) 4 ranks, a 4-stage pipeline (bench/plans/small-gpt-4stage.json on plain cpu devices).
# usage: bench/engine_compare.sh OLD_BIN NEW_BIN OUT.md [RUNS] [OLD_LABEL]
set -euo pipefail
OLD="$1"
NEW="$2"
OUT="$3"
RUNS="${4:-5}"
LABEL="${5:-old}"
HERE="$(cd "$(dirname "$0")" && pwd)"
DATA="$HERE/../tests/fixtures/text"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
sed 's/"cpu-quarter"/"cpu"/' "$HERE/plans/small-gpt-4stage.json" >"$TMP/pipe4.json"
case_run() { # bin case log
  local bin="$1" c="$2" log="$3"
  case "$c" in
    one) "$bin" train --model small-gpt --data "$DATA" --seq 128 --global-batch 8 --micro-batch 4 --steps 5 \
           --eval-every 0 --log "$log" >/dev/null ;;
    dp2x2) mpirun -np 4 --bind-to none "$bin" train --model small-gpt --data "$DATA" --steps 5 --eval-every 0 \
             --plan "$HERE/../tests/plans/small-2x2.json" --log "$log" >/dev/null ;;
    pipe4) mpirun -np 4 --bind-to none "$bin" train --model small-gpt --data "$DATA" --steps 5 --eval-every 0 \
             --plan "$TMP/pipe4.json" --log "$log" >/dev/null ;;
  esac
}
CASES="one dp2x2 pipe4"
for r in $(seq "$RUNS"); do
  for c in $CASES; do
    for side in old new; do
      bin=$OLD; [ $side = new ] && bin=$NEW
      case_run "$bin" "$c" "$TMP/$c-$side-$r.log"
      jq -s '.[1:] | map(.tokens_per_s) | .[]' "$TMP/$c-$side-$r.log" | median >"$TMP/$c-$side-$r.tps"
    done
  done
done
cpu="$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed "s/^ *//") (model $(grep -m1 "^model\s" /proc/cpuinfo | cut -d: -f2 | tr -d " "))"
{
  echo "### Engine throughput, $LABEL vs this build (issue #12: the program runner, backend and transport seams)"
  echo
  echo "$(date -u +%Y-%m-%d), $cpu, $(nproc --all) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, one thread per"
  echo "rank. The same runs alternated between the two binaries, $RUNS times; per run the median tokens/s of"
  echo "steps 2-5; the table gives the median over runs."
  echo
  echo "| run | $LABEL tokens/s | new tokens/s | new / $LABEL |"
  echo "|---|---|---|---|"
  for c in $CASES; do
    o=$(cat "$TMP"/$c-old-*.tps | median)
    n=$(cat "$TMP"/$c-new-*.tps | median)
    desc=$c
    [ $c = one ] && desc="small-gpt, 1 rank"
    [ $c = dp2x2 ] && desc="small-gpt, 4 ranks (tests/plans/small-2x2.json)"
    [ $c = pipe4 ] && desc="small-gpt, 4 ranks, 4-stage pipeline, 8 micro-batches"
    printf "| %s | %.0f | %.0f | %.3f |\n" "$desc" "$o" "$n" "$(echo "$n / $o" | bc -l)"
  done
  echo
} >"$OUT"
cat "$OUT"
