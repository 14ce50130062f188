#!/usr/bin/env bash
# End-to-end checks of `autohet simulate`: a plan from `autohet plan` is
# simulated; the JSON has the fields acceptance scripts read, the trace is a
# valid trace-event file (every event complete, durations >= 0, events on one
# track nested or disjoint), the SVG is an SVG; bad input exits 2.
set -uo pipefail
BIN="$1"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

$BIN simulate --help | grep -q usage || fail "simulate --help"
$BIN plan --model gpt3-2.7b --cluster 2x8xA100-40G,1x8xH800 --global-batch 64 --quiet --json "$TMP/p.json" \
  || fail "plan"
# (the plan is made for 1F1B's memory: GPipe, holding every micro-batch, does not fit; see below)
for sched in 1f1b gpipe; do
  $BIN simulate "$TMP/p.json" --schedule $sched --trace "$TMP/t.json" --svg "$TMP/t.svg" --json "$TMP/s.json" \
    --ignore-memory >"$TMP/out" || fail "simulate --schedule $sched"
  grep -q "Iteration time" "$TMP/out" || fail "$sched: no summary"
  jq -e --slurpfile p "$TMP/p.json" '
      (.iteration_time_s > 0) and (.gpus | length) == $p[0].gpus_used and
      all(.gpus[]; (.compute_s >= 0) and (.exposed_comm_s >= 0) and (.idle_s >= 0) and
                   (.peak_memory_bytes > 0) and (.capacity_bytes > 0))' \
    "$TMP/s.json" >/dev/null || fail "$sched: simulation JSON lacks required per-GPU fields"
  # compute + exposed comm + idle add up to the simulated iteration time on every GPU
  jq -e '.iteration_time_s as $T | all(.gpus[]; ((.compute_s + .exposed_comm_s + .idle_s) - $T | fabs) < 1e-6 * $T)' \
    "$TMP/s.json" >/dev/null || fail "$sched: per-GPU breakdown does not add up to the iteration time"
  # trace-event validation
  jq -e '
      (.traceEvents | type) == "array" and
      all(.traceEvents[]; has("ph") and has("pid") and has("name")) and
      all(.traceEvents[] | select(.ph == "X"); (.ts >= 0) and (.dur >= 0) and has("tid")) and
      ([.traceEvents[] | select(.ph == "X")] | length) > 0 and
      ([.traceEvents[] | select(.ph == "X")] | group_by([.pid, .tid]) |
        all(.[]; sort_by(.ts) | . as $e |
            [range(1; length) | $e[.].ts >= $e[. - 1].ts + $e[. - 1].dur - 0.001 or
                                ($e[.].ts + $e[.].dur <= $e[. - 1].ts + $e[. - 1].dur + 0.001)] | all))' \
    "$TMP/t.json" >/dev/null || fail "$sched: trace is not a valid trace-event file"
  jq -e '[.traceEvents[] | select(.ph == "M" and .name == "process_name")] | length >= 2' "$TMP/t.json" >/dev/null \
    || fail "$sched: trace lacks one process per node"
  head -c 200 "$TMP/t.svg" | grep -q "<svg" || fail "$sched: SVG does not start with <svg"
  grep -q "<rect" "$TMP/t.svg" || fail "$sched: SVG has no bars"
done
# GPipe keeps every micro-batch in flight: its peak memory is never below 1F1B's
$BIN simulate "$TMP/p.json" --quiet --json "$TMP/a.json" || fail "simulate 1f1b"
jq -e 'all(.gpus[]; .peak_memory_bytes <= .capacity_bytes)' "$TMP/a.json" >/dev/null || fail "1f1b: over memory"
# a plan over memory in the simulation: the outputs are written, then one line naming the GPU, exit 2
$BIN simulate "$TMP/p.json" --quiet --schedule gpipe --json "$TMP/b.json" 2>"$TMP/gp.err"
rc=$?
[ $rc -eq 2 ] || fail "gpipe over memory: exit $rc, expected 2"
[ "$(wc -l <"$TMP/gp.err")" -eq 1 ] && grep -q "replicas\[[0-9]*\]\.stages\[[0-9]*\] on [A-Z0-9-]* peaks at [0-9.]* GiB per GPU under gpipe .* GiB usable: the plan does not fit" "$TMP/gp.err" \
  || fail "gpipe over memory: message: $(cat "$TMP/gp.err")"
jq -e 'any(.gpus[]; .peak_memory_bytes > .capacity_bytes)' "$TMP/b.json" >/dev/null || fail "gpipe: JSON not written or fits"
jq -e --slurpfile g "$TMP/b.json" '[.gpus[].peak_memory_bytes] as $a | [$g[0].gpus[].peak_memory_bytes] as $b |
      all(range(0; $a | length); $b[.] >= $a[.])' "$TMP/a.json" >/dev/null || fail "gpipe peak memory below 1f1b"

expect_error() {
  local pat="$1"; shift; shift
  "$@" >"$TMP/o" 2>"$TMP/e"
  local rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $*"
  [ "$(wc -l <"$TMP/e")" -eq 1 ] || fail "expected one stderr line: $* => $(cat "$TMP/e")"
  grep -q -- "$pat" "$TMP/e" || fail "stderr lacks '$pat': $(cat "$TMP/e")"
}
expect_error "missing.json" -- $BIN simulate "$TMP/missing.json"
head -c 300 "$TMP/p.json" >"$TMP/cut.json"
expect_error "cut.json" -- $BIN simulate "$TMP/cut.json"
expect_error "schedule" -- $BIN simulate "$TMP/p.json" --schedule zigzag
expect_error "\-\-precision" -- $BIN simulate "$TMP/p.json" --precision fp8
expect_error "\-\-p2p" -- $BIN simulate "$TMP/p.json" --p2p eventually
$BIN simulate --help | grep -q -- "--p2p" || fail "--help lists --p2p"
$BIN simulate --help | grep -q -- "--precision" || fail "--help lists --precision"
# blocking sends can only slow the same plan down
$BIN simulate "$TMP/p.json" --quiet --json "$TMP/ov.json" || fail "simulate overlapped"
$BIN simulate "$TMP/p.json" --quiet --p2p blocking --json "$TMP/bl.json" || fail "simulate --p2p blocking"
jq -e '.iteration_time_s >= input.iteration_time_s' "$TMP/bl.json" "$TMP/ov.json" >/dev/null \
  || fail "blocking sends simulated faster than overlapped ones"
expect_error "PLAN.json" -- $BIN simulate
# interleaved 1F1B (virtual stages): runs on a plan that can interleave, says why on one that cannot
PL="$(dirname "$0")/plans"
$BIN simulate "$PL/tiny-2s-interleave.json" --schedule interleaved --virtual-stages 3 --quiet --json "$TMP/il.json" \
  || fail "simulate --schedule interleaved"
jq -e '.schedule == "interleaved" and .iteration_time_s > 0' "$TMP/il.json" >/dev/null || fail "interleaved JSON"
expect_error "one stage, nothing to interleave" -- $BIN simulate "$PL/tiny-2x1.json" --schedule interleaved
expect_error "fewer than the 4 virtual stages" -- $BIN simulate "$PL/tiny-2s-interleave.json" --schedule interleaved \
  --virtual-stages 4
expect_error "virtual-stages" -- $BIN simulate "$PL/tiny-2s-interleave.json" --virtual-stages 1
# without the interleaved schedule it is refused, not ignored (as train refuses it)
expect_error "--virtual-stages goes with --schedule interleaved" -- $BIN simulate "$PL/tiny-2s-interleave.json" \
  --virtual-stages 3
# a version-2 plan whose stages have different TP degrees (1 -> 2 -> 4 pipelines beside TP-1 replicas;
# Sailor's OPT-350M profiles and GCP links): played, each stage's degree in the JSON and the trace
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
$BIN simulate "$PL/sim-mixtp-pipe-1-2-4.json" --profile "$ROOT/tests/fixtures/sailor/OPT-350" \
  --devices "$ROOT/bench/peer-plans/gcp-devices.json" --json "$TMP/mx.json" --trace "$TMP/mx-trace.json" >"$TMP/mx.out" \
  || fail "simulate a mixed-TP plan"
jq -e '.iteration_time_s > 0 and .tp == 0 and ([.stages[].tp] == [1, 2, 4, 1, 2, 4, 1, 1]) and
       (.gpus | length) == 16 and ([.buckets[].slices] == [1, 2, 4]) and
       ((.closed_form_s / .iteration_time_s - 1) | fabs) < 0.03' "$TMP/mx.json" >/dev/null \
  || fail "mixed-TP simulation JSON: iteration time, stages' tp, GPUs, bucket slices or closed-form agreement"
jq -e '.otherData.stage_tp == "1,2,4,1,2,4,1,1" and
       ([.traceEvents[] | select(.ph == "M" and .name == "process_name")] | length) == 16' "$TMP/mx-trace.json" \
  >/dev/null || fail "mixed-TP trace: stage_tp or one process per GPU"
grep -q "Iteration time" "$TMP/mx.out" || fail "mixed-TP: no summary"
[ $fails -eq 0 ] && echo "cli_simulate: all checks passed"
exit $fails
