#!/usr/bin/env bash
# commbench on this machine (2 ranks = one per core, and 4 ranks oversubscribed), up to 16 MiB:
# the piecewise alpha-beta fits (break points from the data), their largest error per regime, the
# one-line fit's error for comparison, the large-message bus bandwidth, and the noise floor (the same
# size measured in REPEAT separate runs: the spread of their medians).
# usage: bench/commbench.sh BIN OUT.md [MAX_SIZE] [REPEAT]   (bench/run.sh --only comm refreshes BENCHMARKS.md)
set -euo pipefail
BIN="$1"
OUT="$2"
MAX=${3:-67108864}
REPEAT=${4:-5}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{
  echo "Open MPI shared memory on this machine ($(nproc) vCPUs), sizes 4 B - $MAX B, barrier synchronisation,"
  echo "2 ranks bound one per core (\`--bind-to core\`, 1000 repetitions of small sizes), 4 ranks oversubscribed"
  echo "(\`--bind-to none\`, 300), the median of each size's repetitions. Piecewise α-β: time = α + bytes / β per regime, the break points"
  echo "chosen from the data (the fewest regimes, at most 6 of at least 3 sizes, each a minimax line, whose largest relative error"
  echo "is within 10 %, else the count with the smallest error); the one-line fit for comparison."
  echo
  echo "| ranks | op | regimes (bytes: α µs + bytes / β GB/s, max error) | max rel. error, piecewise | one line | busbw GB/s, largest size |"
  echo "|---|---|---|---|---|---|"
} >"$OUT"
for np in 2 4; do
  echo "== commbench, $np ranks =="
  if [ $np = 2 ]; then bind=core iters=1000; else bind=none iters=300; fi
  mpirun -np $np --bind-to $bind "$BIN" commbench --max-size "$MAX" --iters $iters --json "$TMP/cb$np.json" \
    | grep "^# " || true
  jq -r --arg np $np '.results as $r | .fits[] | . as $f |
      ([$r[] | select(.op == $f.op and (.in_place | not))] | max_by(.bytes)) as $big |
      def p(x): (x * 1000 | round / 10 | tostring) + "%";
      def g(x): (x * 100 | round / 100);
      ([.regimes[] | "\(.min_bytes)-\(.max_bytes // "∞"): \(g(.alpha_us)) + b/\(if .beta_GBps > 1e6 then "∞" else g(.beta_GBps) end) (\(p(.max_rel_error)), \(.max_abs_error_us * 1000 | round / 1000) µs)"] | join("; ")) as $reg |
      "| \($np) | \(.op) | \($reg) | \(p(.max_rel_error)) | \(p(.single_line.max_rel_error)) | \($big.busbw_GBps * 1000 | round / 1000) |"' \
    "$TMP/cb$np.json" >>"$OUT"
done
# noise floor: one size per op measured REPEAT times in separate runs on 2 ranks
{
  echo
  echo "Noise floor (2 ranks): the same size measured in $REPEAT separate runs; the largest deviation of a run's"
  echo "median from the median of the runs, and the widest 95 % confidence interval of one run (relative)."
  echo
  echo "| op | bytes | medians µs | largest deviation | widest CI |"
  echo "|---|---|---|---|---|"
} >>"$OUT"
for spec in latency:8 latency:1024 bw:65536 allgather:64 allreduce:65536; do
  op=${spec%%:*} size=${spec##*:}
  for k in $(seq "$REPEAT"); do
    mpirun -np 2 --bind-to core "$BIN" commbench --ops "$op" --min-size "$size" --max-size "$size" --iters 1000 \
      --json "$TMP/n$k.json" >/dev/null || echo "noise run $k of $op failed" >&2
  done
  jq -s -r --arg op "$op" --arg size "$size" '[.[] | .results[0]] as $r | ([$r[].median_us] | sort) as $m |
      ($m[($m | length) / 2 | floor]) as $mid |
      "| \($op) | \($size) | \([$m[] | . * 100 | round / 100] | join(", ")) | \(([$m[] | (. / $mid - 1) | fabs] | max) * 1000 | round / 10)% | \(([$r[] | (.ci_high_us - .ci_low_us) / .median_us] | max) * 1000 | round / 10)% |"' \
    "$TMP"/n*.json >>"$OUT"
  rm -f "$TMP"/n*.json
done
