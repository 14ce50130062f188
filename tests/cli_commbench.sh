#!/usr/bin/env bash
# autohet commbench on 4 ranks over small sizes: every operation is measured,
# bus bandwidth follows the nccl-tests factors, every operation gets an
# alpha-beta fit with its error; bad input exits 2.
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
      (.[0].rel_error_per_size | length) >= 5' "$TMP/cb.json" >/dev/null || fail "$op: fit missing or malformed"
done
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
beta=$(jq '[.fits[] | select(.op == "bw")][0] | (.regimes[1].beta_GBps // .beta_GBps)' "$TMP/cb.json")
"$BIN" plan --model small-gpt --cluster 1x4xcpu --global-batch 16 --seq 128 --tp 1 --comm-profile "$TMP/cb.json" \
  --json "$TMP/p.json" >"$TMP/pout" || fail "plan --comm-profile"
grep -q "Measured links" "$TMP/pout" || fail "plan does not report the measured links"
jq -e --argjson b "$beta" '(.dp_bw_gbs - $b | fabs) < 1e-6 * $b' "$TMP/p.json" >/dev/null \
  || fail "plan's link bandwidth is not the measured one ($beta GB/s)"
"$BIN" simulate "$TMP/p.json" --comm-profile "$TMP/cb.json" --quiet --json "$TMP/s.json" || fail "simulate --comm-profile"
echo '{"format": "something else"}' >"$TMP/bad.json"
"$BIN" plan --model small-gpt --cluster 1x4xcpu --global-batch 16 --comm-profile "$TMP/bad.json" 2>"$TMP/e0" >/dev/null
[ $? -eq 2 ] && grep -q "bad.json: format" "$TMP/e0" || fail "bad comm profile: $(cat "$TMP/e0")"

mpirun -np 1 "$BIN" commbench --max-size 64 >/dev/null 2>"$TMP/e1"
[ $? -eq 2 ] && grep -q "at least 2" "$TMP/e1" || fail "1 rank should be refused: $(cat "$TMP/e1")"
mpirun -np 2 --bind-to none "$BIN" commbench --ops allreduce,frob --max-size 64 >/dev/null 2>"$TMP/e2"
[ $? -ne 0 ] && grep -q "unknown operation 'frob'" "$TMP/e2" || fail "unknown op: $(head -2 "$TMP/e2")"
[ $fails -eq 0 ] && echo "cli_commbench: all checks passed"
exit $fails
