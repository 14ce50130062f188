#!/usr/bin/env bash
# autohet commbench on 4 ranks over small sizes: every operation is measured,
# bus bandwidth follows the nccl-tests factors, every operation gets a
# piecewise alpha-beta fit with its error per size, repetitions with median and
# confidence interval; the OSU and nccl-tests formats print their columns, the
# correctness check finds no wrong element and finds them when the test hook
# corrupts one rank's input; window synchronisation and --pairs; the planner
# reads latency from the small-message regime; --step-factor, --rounds,
# --batch and --statistic p25; bad input exits 2.
set -uo pipefail
BIN="$1"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

$BIN commbench --help | grep -q usage || fail "commbench --help"
timeout 300 mpirun -np 4 --bind-to none "$BIN" commbench --max-size 65536 --iters 20 --json "$TMP/cb.json" \
  >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "commbench run"; }
grep -q "# fit: time" "$TMP/out" || fail "no fit lines in the table"
jq -e '.format == "autohet-comm-profile" and .ranks == 4 and (.results | length) > 0' "$TMP/cb.json" >/dev/null \
  || fail "JSON header"
for op in latency bw allreduce allgather reduce_scatter bcast alltoall; do
  jq -e --arg op $op '[.results[] | select(.op == $op)] | length >= 5' "$TMP/cb.json" >/dev/null \
    || fail "$op: fewer than 5 sizes"
  jq -e --arg op $op '[.fits[] | select(.op == $op)] | length == 1 and
      (.[0].alpha_us >= 0) and (.[0].beta_GBps > 0) and (.[0].max_rel_error >= 0) and
      (.[0].rel_error_per_size | length) >= 5 and (.[0].regimes | length) >= 1 and
      (.[0].regimes[0].min_bytes == .[0].rel_error_per_size[0].bytes) and (.[0].regimes[-1].max_bytes == null) and
      (.[0].max_rel_error == ([.[0].regimes[].max_rel_error] | max)) and
      (.[0].single_line.max_rel_error >= 0)' "$TMP/cb.json" >/dev/null || fail "$op: fit missing or malformed"
done
# statistics: median inside the 95% CI inside [min rep, max rep]; every result checked and right
jq -e 'all(.results[]; (.reps_us | length) == .iters - .invalid_reps and .ci_low_us <= .median_us + 1e-9
       and .median_us <= .ci_high_us + 1e-9 and .ci_low_us >= (.reps_us | min) - 1e-9
       and .ci_high_us <= (.reps_us | max) + 1e-9 and .wrong == 0 and .in_place == false)' "$TMP/cb.json" >/dev/null \
  || fail "median / confidence interval / repetitions / #wrong fields"
jq -e '[.results[] | select(.op == "latency")] | all(.pair == [0, 1] and .link_class == "intra-node")' \
  "$TMP/cb.json" >/dev/null || fail "point-to-point pair of the default --pairs classes on one node"
# the required result fields, and busbw = algbw x factor(op, 4)
jq -e 'all(.results[]; has("op") and has("bytes") and (.avg_us > 0) and (.algbw_GBps > 0) and has("busbw_GBps"))
       and all(.results[]; (.min_us <= .avg_us + 1e-9) and (.avg_us <= .max_us + 1e-9))' "$TMP/cb.json" >/dev/null \
  || fail "result fields or min <= avg <= max"
jq -e 'def f: if .op == "allreduce" then 1.5 elif (.op == "allgather" or .op == "reduce_scatter" or .op == "alltoall")
              then 0.75 else 1 end;
       all(.results[]; ((.busbw_GBps / .algbw_GBps) - f | fabs) < 1e-9)' "$TMP/cb.json" >/dev/null \
  || fail "busbw / algbw does not follow 2(n-1)/n, (n-1)/n, 1"
# algbw = bytes / avg time
jq -e 'all(.results[]; ((.bytes / (.avg_us * 1e3)) / .algbw_GBps - 1 | fabs) < 1e-9)' "$TMP/cb.json" >/dev/null \
  || fail "algbw is not bytes / time"

# the planner and the simulator read the profile instead of datasheet links
beta=$(jq '[.fits[] | select(.op == "bw")][0] | .regimes[-1].beta_GBps' "$TMP/cb.json")
lat=$(jq '[.fits[] | select(.op == "latency")][0] | .regimes[0].alpha_us' "$TMP/cb.json")
"$BIN" plan --model small-gpt --cluster 1x4xcpu --global-batch 16 --seq 128 --tp 1 --comm-profile "$TMP/cb.json" \
  --json "$TMP/p.json" >"$TMP/pout" || fail "plan --comm-profile"
grep -q "Measured links" "$TMP/pout" || fail "plan does not report the measured links"
jq -e --argjson b "$beta" '(.dp_bw_gbs - $b | fabs) < 1e-6 * $b' "$TMP/p.json" >/dev/null \
  || fail "plan's link bandwidth is not the measured one ($beta GB/s)"
grep -q "latency $(printf %.2f "$lat") us" "$TMP/pout" || fail "plan's latency is not the small-message regime's ($lat us)"
"$BIN" simulate "$TMP/p.json" --comm-profile "$TMP/cb.json" --quiet --json "$TMP/s.json" || fail "simulate --comm-profile"
echo '{"format": "something else"}' >"$TMP/bad.json"
"$BIN" plan --model small-gpt --cluster 1x4xcpu --global-batch 16 --comm-profile "$TMP/bad.json" 2>"$TMP/e0" >/dev/null
[ $? -eq 2 ] && grep -q "bad.json: format" "$TMP/e0" || fail "bad comm profile: $(cat "$TMP/e0")"

# nccl-tests columns, out-of-place and in-place, each checked element by element
timeout 300 mpirun -np 4 --bind-to none "$BIN" commbench --format nccl-tests --max-size 4096 --iters 5 \
  --ops allreduce,allgather,reduce_scatter,bcast,alltoall,bw --json "$TMP/nc.json" >"$TMP/nc" 2>&1 \
  || { cat "$TMP/nc"; fail "nccl-tests format run"; }
grep -qE '^#  +size +count +type +redop +root +time +algbw +busbw +#wrong +time +algbw +busbw +#wrong$' "$TMP/nc" \
  || fail "nccl-tests header"
grep -q "out-of-place" "$TMP/nc" && grep -q "in-place" "$TMP/nc" || fail "nccl-tests placement header"
grep -qE '^ +4096 +1024 +float +sum +-1 ' "$TMP/nc" || fail "nccl-tests all-reduce row (count, type, redop, root)"
grep -qE '^ +4096 +1024 +float +none +0 ' "$TMP/nc" || fail "nccl-tests broadcast row (root 0)"
grep -q "# Out of bounds values : 0 OK" "$TMP/nc" || fail "nccl-tests: wrong elements without corruption"
jq -e '([.results[] | select(.in_place)] | length) > 0 and ([.results[] | select(.in_place | not)] | length)
       == ([.results[] | select(.in_place)] | length) and all(.results[]; .wrong == 0)' "$TMP/nc.json" >/dev/null \
  || fail "nccl-tests: in-place results or #wrong"
# the test hook: rank 0 changes one element of its input; every operation must notice
AUTOHET_COMMBENCH_CORRUPT_RANK=0 timeout 300 mpirun -np 4 --bind-to none -x AUTOHET_COMMBENCH_CORRUPT_RANK \
  "$BIN" commbench --format nccl-tests --max-size 256 --iters 3 --ops allreduce,allgather,reduce_scatter,bcast,alltoall,bw \
  --json "$TMP/bad_nc.json" >"$TMP/badnc" 2>&1; rc=$?
[ $rc -ne 0 ] || fail "a corrupted buffer should fail the run"
grep -q "# Out of bounds values : [1-9][0-9]* FAILED" "$TMP/badnc" || fail "corruption not reported"
jq -e 'all(.results[]; .wrong > 0) and ([.results[] | select(.op == "allreduce")] | all(.wrong == 4))' \
  "$TMP/bad_nc.json" >/dev/null || fail "corruption: some result has #wrong = 0 (all-reduce: element 0 on 4 ranks)"
# OSU columns and units: MB/s = bytes / us
timeout 300 mpirun -np 2 --bind-to none "$BIN" commbench --format osu --max-size 1024 --iters 5 --ops latency,bw,allreduce \
  --json "$TMP/osu.json" >"$TMP/osu" 2>&1 || fail "osu format run"
grep -q "^# Size          Latency (us)$" "$TMP/osu" || fail "osu_latency header"
grep -q "^# Size      Bandwidth (MB/s)$" "$TMP/osu" || fail "osu_bw header"
grep -q "^# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations$" "$TMP/osu" || fail "osu collective header"
mbs=$(jq '[.results[] | select(.op == "bw" and .bytes == 1024)][0] | .bytes / .avg_us' "$TMP/osu.json")
grep -qE "^1024 +$(printf %.2f "$mbs")$" "$TMP/osu" || fail "osu_bw row is not bytes/us ($mbs MB/s)"
# ReproMPI window synchronisation
timeout 300 mpirun -np 2 --bind-to none "$BIN" commbench --sync window --max-size 256 --iters 20 --ops latency,allreduce \
  --json "$TMP/win.json" >"$TMP/win" 2>&1 || fail "--sync window run"
jq -e '.sync == "window" and all(.results[]; .invalid_reps >= 0 and .invalid_reps < .iters and .median_us > 0)' \
  "$TMP/win.json" >/dev/null || fail "--sync window: JSON"
# pairs
timeout 300 mpirun -np 3 --bind-to none "$BIN" commbench --pairs all --ops latency --max-size 16 --iters 5 \
  --json "$TMP/pairs.json" >"$TMP/pairs" 2>&1 || fail "--pairs all"
jq -e '[.fits[] | .pair] == [[0,1],[0,2],[1,2]]' "$TMP/pairs.json" >/dev/null || fail "--pairs all: 3 pairs of 3 ranks"
mpirun -np 2 --bind-to none "$BIN" commbench --pairs 0-5 --max-size 16 >/dev/null 2>"$TMP/e3"
[ $? -eq 2 ] && grep -q "pairs: '0-5'" "$TMP/e3" || fail "bad --pairs: $(head -2 "$TMP/e3")"
mpirun -np 2 --bind-to none "$BIN" commbench --format csv --max-size 16 >/dev/null 2>"$TMP/e4"
[ $? -eq 2 ] && grep -q "format 'csv'" "$TMP/e4" || fail "bad --format: $(head -2 "$TMP/e4")"
# sizes as nccl-tests writes them (-b 1K -e 128M: binary suffixes), an unknown suffix refused
timeout 300 mpirun -np 2 --bind-to none "$BIN" commbench --ops allreduce --min-size 1K --max-size 4KiB --iters 3 \
  --json "$TMP/sfx.json" >/dev/null 2>&1 || fail "--min-size 1K --max-size 4KiB"
jq -e '[.results[].bytes] == [1024, 2048, 4096]' "$TMP/sfx.json" >/dev/null \
  || fail "size suffixes: $(jq -c '[.results[].bytes]' "$TMP/sfx.json")"
mpirun -np 2 --bind-to none "$BIN" commbench --max-size 4X >/dev/null 2>"$TMP/e5"
[ $? -eq 2 ] && grep -q "max-size '4X'" "$TMP/e5" || fail "bad size suffix: $(head -2 "$TMP/e5")"

# --step-factor: a root of two keeps every power of two; sizes are whole units of the op
timeout 300 mpirun -np 2 --bind-to none "$BIN" commbench --step-factor 1.414 --max-size 4096 --iters 5 \
  --ops latency,allgather --json "$TMP/step.json" >"$TMP/step" 2>&1 || fail "--step-factor run"
jq -e '[.results[] | select(.op == "latency") | .bytes] as $b | ($b | length) == 21 and $b == ($b | sort | unique)
       and all([4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096][]; . as $p | $b | index($p) != null)
       and ($b | index(6) != null) and ($b | index(2896) != null)' "$TMP/step.json" >/dev/null \
  || fail "--step-factor 1.414: latency sizes $(jq -c '[.results[] | select(.op == "latency") | .bytes]' "$TMP/step.json")"
jq -e '[.results[] | select(.op == "allgather") | .bytes] | length > 11 and all(. % 8 == 0)' "$TMP/step.json" \
  >/dev/null || fail "--step-factor: all-gather sizes are not whole floats per rank"
# --rounds, --statistic p25 and --batch: every size gets its repetitions in rounds (at least one a
# round), the fit is fitted to the lower quartile, point-to-point batches fast sizes, collectives not
timeout 300 mpirun -np 2 --bind-to none "$BIN" commbench --rounds 4 --iters 8 --statistic p25 --max-size 65536 \
  --ops latency,allreduce --json "$TMP/rounds.json" >"$TMP/rounds" 2>&1 || fail "--rounds run"
jq -e 'all(.results[]; .iters >= 4 and (.reps_us | length) == .iters - .invalid_reps
       and .p25_us <= .median_us + 1e-9 and .p25_us >= (.reps_us | min) - 1e-9)
       and all(.fits[]; .statistic == "p25_us")' "$TMP/rounds.json" >/dev/null || fail "--rounds / p25: JSON"
jq -e '.results as $r | all(.fits[]; . as $f | all(.rel_error_per_size[]; . as $e |
         ([$r[] | select(.op == $f.op and .bytes == $e.bytes)][0].p25_us - $e.measured_us | fabs) < 1e-9))' \
  "$TMP/rounds.json" >/dev/null || fail "--statistic p25: the fit is not fitted to p25_us"
grep -q "lower-quartile times" "$TMP/rounds" || fail "--statistic p25: the fit line does not say what it fits"
# (how many auto takes depends on the machine's speed at that moment: only its bounds are checked)
jq -e '([.results[] | select(.op == "latency")] | all(.batch >= 1 and .batch <= 1000))
       and ([.results[] | select(.op == "allreduce")] | all(.batch == 1))' "$TMP/rounds.json" >/dev/null \
  || fail "--batch auto: a point-to-point batch out of 1..1000, or collectives batched"
timeout 300 mpirun -np 2 --bind-to none "$BIN" commbench --batch 7 --max-size 64 --iters 5 --ops latency,allreduce \
  --json "$TMP/b7.json" >/dev/null 2>&1 || fail "--batch 7 run"
jq -e 'all(.results[]; .batch == 7 and (.reps_us | length) == .iters) and all(.fits[]; .statistic == "median_us")' \
  "$TMP/b7.json" >/dev/null || fail "--batch 7: not 7 operations a repetition, collectives included"
for bad in "--step-factor 1:step-factor '1'" "--batch 0:batch '0'" "--statistic mean:statistic 'mean'" \
  "--rounds 0:--rounds"; do
  flag=${bad%%:*} want=${bad#*:}
  mpirun -np 2 --bind-to none "$BIN" commbench $flag --max-size 16 >/dev/null 2>"$TMP/e5"
  [ $? -eq 2 ] && grep -q -- "$want" "$TMP/e5" || fail "bad $flag: $(head -2 "$TMP/e5")"
done

mpirun -np 1 "$BIN" commbench --max-size 64 >/dev/null 2>"$TMP/e1"
[ $? -eq 2 ] && grep -q "at least 2" "$TMP/e1" || fail "1 rank should be refused: $(cat "$TMP/e1")"
mpirun -np 2 --bind-to none "$BIN" commbench --ops allreduce,frob --max-size 64 >/dev/null 2>"$TMP/e2"
[ $? -ne 0 ] && grep -q "unknown operation 'frob'" "$TMP/e2" || fail "unknown op: $(head -2 "$TMP/e2")"
[ $fails -eq 0 ] && echo "cli_commbench: all checks passed"
exit $fails
