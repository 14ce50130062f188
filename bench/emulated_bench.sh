#!/usr/bin/env bash
# The simulator against the engine on emulated pipelines (issue #30: "settle the disputed plans by measurement"):
# the plans of bench/emulated_plans.py (2-16 stages, uneven micro-batches, mixed devices and per-stage TP, up
# to 16 ranks) trained by `autohet train --emulate analytic` -- every compute op lasts the analytic model's
# time on its emulated device (bench/emu-devices.json), so the ranks sleep most of the time and 16 of them fit
# on 2 cores with their real 1F1B schedule, MPI sends and all-reduces -- next to `autohet simulate` of the same
# plan with the same model. Prints markdown on stdout.
# Usage: bench/emulated_bench.sh BIN FIXTURES [STEPS]
set -uo pipefail
BIN="$(realpath "$1")" FIX="$(realpath "$2")" STEPS="${3:-6}"
HERE="$(cd "$(dirname "$0")" && pwd)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
DEV="$HERE/emu-devices.json"
python3 "$HERE/emulated_plans.py" "$TMP/plans" >"$TMP/names" || exit 1
echo "| plan | ranks | stages per replica | micro-batches | simulated step | measured step (median of steps 3-$STEPS) | error | ops over their time | the others late, mean |"
echo "|---|---|---|---|---|---|---|---|---:|"
: >"$TMP/errs"
while read -r name; do
  p="$TMP/plans/$name.json"
  n=$(jq '[.replicas[].stages[].tp] | add' "$p")
  "$BIN" simulate "$p" --devices "$DEV" --quiet --json "$TMP/$name.sim" >"$TMP/$name.simout" 2>&1 ||
    { echo "emulated_bench: simulate $name failed: $(cat "$TMP/$name.simout")" >&2; continue; }
  sim=$(jq .iteration_time_s "$TMP/$name.sim")
  mpirun -np "$n" --bind-to none "$BIN" train --model "$HERE/emu-gpt-16l.json" --data "$FIX/text" --plan "$p" \
    --devices "$DEV" --emulate analytic --steps "$STEPS" --eval-every 0 --log "$TMP/$name.log" </dev/null >"$TMP/$name.out" 2>&1 ||
    { echo "emulated_bench: train $name failed: $(tail -3 "$TMP/$name.out")" >&2; continue; }
  meas=$(jq -s '.[2:] | map(.step_s) | .[]' "$TMP/$name.log" | median)
  over=$(grep -o 'compute ops, [0-9]* computed longer' "$TMP/$name.out" | grep -o '[0-9]*' | head -1)
  ops=$(grep -o '[0-9]* compute ops' "$TMP/$name.out" | grep -o '^[0-9]*')
  late=$(grep -o 'ended [0-9.]* us late' "$TMP/$name.out" | grep -o '[0-9.]*')
  err=$(echo "($sim / $meas - 1) * 100" | bc -l)
  echo "$err" >>"$TMP/errs"
  printf "| %s | %d | %s | %s | %.4f s | %.4f s | %+.1f%% | %s of %s | %s us |\n" "$name" "$n" \
    "$(jq -r '[.replicas[] | (.stages | length | tostring)] | join(" + ")' "$p")" \
    "$(jq -r '[.replicas[].micro_batches | tostring] | join(" + ")' "$p")" "$sim" "$meas" "$err" "${over:-?}" "${ops:-?}" \
    "${late:-?}"
  printf "  %-18s ranks %2d  simulated %.4f s  measured %.4f s  %+.1f%%\n" "$name" "$n" "$sim" "$meas" "$err" >&2
done <"$TMP/names"
echo
awk '{ a = $1 < 0 ? -$1 : $1; s += a; if (a > w) w = a; if (a <= 5) k++; n++ }
     END { printf "%d plans: mean |error| %.1f%%, worst %.1f%%, %d of %d within 5%%.\n", n, s / n, w, k, n }' "$TMP/errs"
