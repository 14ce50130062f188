#!/usr/bin/env bash
# Leave-one-type-out validation of the calibrated GEMM cost model against the
# Sailor profiles (docs/calibration.md). Builds calib_bench in BUILD_DIR
# (default build-calib) and prints the markdown tables; with --out FILE also
# writes them there. The figures are model errors, not timings.
#   bench/calib_bench.sh [--build DIR] [--data SAILOR_DIR] [--out FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-calib"
data=/work/shared/data/profiles/sailor
[ -d "$data" ] || data="$root/tests/fixtures/sailor"
out=""
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "calib_bench.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -d "$data" ] || { echo "calib_bench.sh: no Sailor profile directory '$data'" >&2; exit 2; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target calib_bench -j2 >/dev/null
if [ -n "$out" ]; then
    "$build/calib_bench" "$data" | tee "$out"
else
    "$build/calib_bench" "$data"
fi
