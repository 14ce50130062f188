#!/usr/bin/env bash
# The engine's tensor memory against the cost model's stage memory (issue #11,
# docs/engine.md "Memory"): `autohet train` runs a few plans for 2 steps and
# its end-of-run summary reports, per rank, the high-water mark of backend
# tensors and what the planner predicts for the same layers, degree,
# micro-batch and schedule. Writes a markdown table to OUT.
#   bench/memory_bench.sh BIN OUT
set -euo pipefail
BIN=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
DATA="$ROOT/tests/fixtures/text"

# label | ranks | model | extra arguments
runs=(
  "small-gpt, one rank|1|small-gpt|--global-batch 16 --micro-batch 2 --seq 128"
  "small-gpt, 4 stages, 1F1B|4|small-gpt|--plan $HERE/plans/small-gpt-4stage.json"
  "small-gpt, 4 stages, GPipe|4|small-gpt|--plan $HERE/plans/small-gpt-4stage.json --schedule gpipe"
  "GPT 38M, one rank|1|$HERE/gpt-38m-bytes.json|--global-batch 8 --micro-batch 2 --seq 256"
  "GPT 38M, 4-node plan|4|$HERE/gpt-38m-bytes.json|--plan $HERE/plans/gpt-38m-4node.json"
)
{
  echo "| run | ranks | measured peak MiB per rank | cost model MiB per rank | furthest rank off |"
  echo "|---|---|---|---|---|"
} >"$OUT"
for r in "${runs[@]}"; do
  IFS='|' read -r label ranks model extra <<<"$r"
  # shellcheck disable=SC2086
  if [ "$ranks" -eq 1 ]; then
    "$BIN" train --model "$model" --data "$DATA" --steps 2 $extra >"$TMP/out" 2>&1
  else
    timeout 600 mpirun -np "$ranks" --bind-to none "$BIN" train --model "$model" --data "$DATA" --steps 2 $extra \
      >"$TMP/out" 2>&1
  fi
  line=$(grep 'tensor memory peak' "$TMP/out" | tail -1)
  [ -n "$line" ] || { cat "$TMP/out" >&2; echo "memory_bench: no memory figure for $label" >&2; exit 1; }
  python3 - "$label" "$ranks" "$line" >>"$OUT" <<'PY'
import re, sys
label, ranks, line = sys.argv[1], sys.argv[2], sys.argv[3]
m = re.search(r"tensor memory peak ([0-9.]+)(?:-([0-9.]+))? MiB(?: per rank)? \(cost model ([0-9.]+)(?:-([0-9.]+))? MiB[;,] (?:furthest )?([-+0-9.]+)%(?: on rank ([0-9]+))?", line)
if not m:
    sys.exit("memory_bench: cannot read: " + line)
lo, hi, plo, phi, err, rank = m.groups()
meas = lo if hi is None else f"{lo} - {hi}"
pred = plo if phi is None else f"{plo} - {phi}"
where = f"{err}% (rank {rank})" if rank else f"{err}%"
print(f"| {label} | {ranks} | {meas} | {pred} | {where} |")
PY
done
cat "$OUT"
