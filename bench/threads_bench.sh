#!/usr/bin/env bash
# Threads per rank: the wall time of `autohet run` (4 virtual nodes, one rank each, the README's 2x2 plan of
# tiny-gpt, 30 steps) and of `mpirun -np 4 --bind-to none autohet train` of the same plan, with every rank
# running a thread per core (OMP_NUM_THREADS=nproc: what each rank did before ah_blas_share_cores) and with no
# thread variable (each rank its share of the cores). Runs alternate; medians. Writes a markdown section.
# usage: bench/threads_bench.sh BIN OUT.md [RUNS]
set -euo pipefail
BIN="$1"
OUT="$2"
RUNS="${3:-5}"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS
PLAN="$HERE/../tests/plans/tiny-4node-2x2.json"
ARGS=(--model tiny-gpt --data "$HERE/../tests/fixtures/text" --steps 30 --seed 3)
CORES=$(nproc)
run_job() { # kind threads-or-empty
  local env=(env) d
  [ -n "$2" ] && env=(env OMP_NUM_THREADS="$2")
  if [ "$1" = run ]; then
    d=$(mktemp -d -p "$TMP")
    wall_s "${env[@]}" "$BIN" run --plan "$PLAN" "${ARGS[@]}" --run-dir "$d/r"
  else
    wall_s "${env[@]}" mpirun -np 4 --bind-to none "$BIN" train --plan "$PLAN" "${ARGS[@]}"
  fi
}
for kind in run train; do
  for r in $(seq "$RUNS"); do
    run_job $kind "$CORES" >>"$TMP/$kind-percore.t"
    run_job $kind "" >>"$TMP/$kind-share.t"
  done
done
{
  echo "| launch (4 ranks on $CORES cores, 30 steps of tiny-gpt) | a thread per core in every rank (before) | each rank its share (now) | speedup |"
  echo "|---|---:|---:|---:|"
  for kind in run train; do
    a=$(median <"$TMP/$kind-percore.t") b=$(median <"$TMP/$kind-share.t")
    label=$([ $kind = run ] && echo '`autohet run --plan tiny-4node-2x2`' || echo '`mpirun -np 4 --bind-to none autohet train`')
    printf '| %s | %.2f s | %.2f s | %.1fx |\n' "$label" "$a" "$b" "$(echo "$a / $b" | bc -l)"
  done
  echo
  echo "Medians of $RUNS alternated runs each, whole command wall (MPI start-up included). \"Before\" is"
  echo "\`OMP_NUM_THREADS=$CORES\` given to every rank, what each rank ran without the variable until"
  echo "\`ah_blas_share_cores\` (docs/engine.md, \"Threads per rank\"); \"now\" is no thread variable at all."
} >"$OUT"
cat "$OUT" >&2
