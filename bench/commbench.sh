#!/usr/bin/env bash
# commbench on this machine (2 ranks = one per core, and 4 ranks oversubscribed), up to 64 MiB:
# the piecewise alpha-beta fits (break points from the data), their largest error per regime, the
# one-line fit's error for comparison, the large-message bus bandwidth, the same fit repeated in
# RUNS separate runs (2 ranks), and the noise floor (one size measured in REPEAT separate runs: the
# spread of their medians).
# usage: bench/commbench.sh BIN OUT.md [MAX_SIZE] [REPEAT] [RUNS]   (bench/run.sh --only comm refreshes BENCHMARKS.md)
set -euo pipefail
BIN="$1"
OUT="$2"
MAX=${3:-67108864}
REPEAT=${4:-5}
RUNS=${5:-3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
{
  echo "Open MPI shared memory on this machine ($(nproc) vCPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
  echo "sizes 4 B - $MAX B, barrier synchronisation, each size's repetitions taken in rounds over all sizes, every"
  echo "round in its own order (\`--rounds\`: a slow phase of the machine falls on every size alike), point-to-point"
  echo "timed in batches of ~20 µs (\`--batch auto\`, as osu_latency), message buffers on transparent huge pages."
  echo "2 ranks bound one per core (\`--bind-to core\`, 1000 repetitions of small sizes in 30 rounds), 4 ranks"
  echo "oversubscribed (\`--bind-to none\`, 300 in 10 rounds); the median of each size's repetitions. Piecewise α-β:"
  echo "time = α + bytes / β per regime, the break points chosen from the data (the fewest regimes, at most 8 of at"
  echo "least 3 sizes, each a minimax line, whose largest relative error is within 10 %, else the count with the"
  echo "smallest error); the one-line fit for comparison."
  echo
  echo "| ranks | op | regimes (bytes: α µs + bytes / β GB/s, max error) | max rel. error, piecewise | one line | busbw GB/s, largest size |"
  echo "|---|---|---|---|---|---|"
} >"$OUT"
run_bench() { # NP JSON: 2 ranks one per core, 4 oversubscribed
  local bind=none args="--iters 300 --rounds 10"
  [ "$1" = 2 ] && bind=core args="--iters 1000 --rounds 30"
  # shellcheck disable=SC2086
  mpirun -np "$1" --bind-to $bind "$BIN" commbench --max-size "$MAX" $args --json "$2" | grep "^# " || true
}
for np in 2 4; do
  echo "== commbench, $np ranks =="
  run_bench $np "$TMP/cb$np.json"
  jq -r --arg np $np '.results as $r | .fits[] | . as $f |
      ([$r[] | select(.op == $f.op and (.in_place | not))] | max_by(.bytes)) as $big |
      def p(x): (x * 1000 | round / 10 | tostring) + "%";
      def g(x): (x * 100 | round / 100);
      ([.regimes[] | "\(.min_bytes)-\(.max_bytes // "∞"): \(g(.alpha_us)) + b/\(if .beta_GBps > 1e6 then "∞" else g(.beta_GBps) end) (\(p(.max_rel_error)), \(.max_abs_error_us * 1000 | round / 1000) µs)"] | join("; ")) as $reg |
      "| \($np) | \(.op) | \($reg) | \(p(.max_rel_error)) | \(p(.single_line.max_rel_error)) | \($big.busbw_GBps * 1000 | round / 1000) |"' \
    "$TMP/cb$np.json" >>"$OUT"
done
# the 2-rank fit again in separate runs: its largest error per operation, run by run
for k in $(seq 2 "$RUNS"); do
  echo "== commbench, 2 ranks, run $k of $RUNS =="
  run_bench 2 "$TMP/rep$k.json" >/dev/null
done
cp "$TMP/cb2.json" "$TMP/rep1.json"
{
  echo
  echo "The 2-rank fit in $RUNS separate runs (the first is the table's): the largest relative error per operation,"
  echo "the worst regime's sizes and its absolute miss."
  echo
  echo "| op | $(seq -s ' | ' 1 "$RUNS" | sed 's/[0-9]\+/run &/g') | runs within 10 % |"
  echo "|---|$(for k in $(seq "$RUNS"); do printf -- '---|'; done)---|"
} >>"$OUT"
jq -s -r 'def p(x): (x * 1000 | round / 10 | tostring) + "%";
    [.[] | .fits] as $runs | $runs[0] | map(.op) | .[] as $op |
    [$runs[] | .[] | select(.op == $op)] as $f |
    "| \($op) | \([$f[] | (.regimes | max_by(.max_rel_error)) as $w |
        "\(p(.max_rel_error)) (\($w.min_bytes)-\($w.max_bytes // "∞") B, \($w.max_abs_error_us * 1000 | round / 1000) µs)"] | join(" | ")) | \([$f[] | select(.max_rel_error <= 0.10)] | length) of \($f | length) |"' \
  $(for k in $(seq "$RUNS"); do echo "$TMP/rep$k.json"; done) >>"$OUT"
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
# modes within one run: one size, many repetitions, the median of every tenth of them in order
{
  echo
  echo "Within one run (2 ranks): one size, 20000 repetitions (a ping-pong: batches), the median of each tenth"
  echo "of them in measurement order (µs) — the machine changes speed while a run lasts."
  echo
  echo "| op | bytes | medians of the tenths, in order |"
  echo "|---|---|---|"
} >>"$OUT"
for spec in latency:8 allreduce:65536; do
  op=${spec%%:*} size=${spec##*:}
  mpirun -np 2 --bind-to core "$BIN" commbench --ops "$op" --min-size "$size" --max-size "$size" --iters 20000 \
    --json "$TMP/m.json" >/dev/null || echo "modes run of $op failed" >&2
  jq -r --arg op "$op" --arg size "$size" '.results[0].reps_us as $x | ($x | length / 10 | floor) as $w |
      "| \($op) | \($size) | \([range(0; 10) as $k | ($x[$k * $w:($k + 1) * $w] | sort | .[$w / 2 | floor]) | . * 100 | round / 100] | join(", ")) |"' \
    "$TMP/m.json" >>"$OUT"
done
