#!/usr/bin/env bash
# One clock for every rank of a traced run (docs/analyze.md, "Clocks"), on this machine: a traced 4-rank 2x2
# pipeline run records every rank's clock correction against rank 0 (offset, drift, residual = half the best
# ping-pong round trip, 0.4-1.9 us on a quiet machine, bounded at 1 ms under load); analyze reports it (table and JSON) and finds the trace causally
# ordered: no receive before its send, no collective member leaving before the last one entered, every flow
# arrow forward — checked by analyze, by jq on the Chrome trace itself, and by otf2-print on the OTF2
# archive, which carries the ClockProperties and a pair of ClockOffset definitions per location. The same
# checks on a hand-built trace find the violations it was built with, and a malformed clock record exits 2.
# The run across network-namespace hosts with a clock 1000 s away is tests/cli_trace_clock_hosts.sh.
. "$(dirname "$0")/common.sh"
TOOLS="$(cd "$(dirname "$0")" && pwd)/tools"

# hand-built: rank 1 receives at [0,1] what rank 0 sends at [2,3] (1 us before); a 2-rank all-reduce where
# rank 1 leaves at 5 before rank 0 enters at 6; a flow arrow from ts 10 back to ts 4; no clock record
cat >"$TMP/hand.json" <<'J'
{"traceEvents": [
 {"ph": "X", "name": "send_activation mb0", "cat": "communication", "pid": 0, "tid": 2, "ts": 2, "dur": 1,
  "args": {"kind": "send_activation", "site": "send_activation", "peer": 1, "seq": 0, "ranks": 2, "group": 0}},
 {"ph": "X", "name": "recv_activation mb0", "cat": "communication", "pid": 1, "tid": 2, "ts": 0, "dur": 1,
  "args": {"kind": "recv_activation", "site": "recv_activation", "peer": 0, "seq": 0, "ranks": 2, "group": 0}},
 {"ph": "X", "name": "step_sync", "cat": "communication", "pid": 0, "tid": 3, "ts": 6, "dur": 2,
  "args": {"kind": "step_sync", "site": "step_sync", "seq": 0, "ranks": 2, "group": 0}},
 {"ph": "X", "name": "step_sync", "cat": "communication", "pid": 1, "tid": 3, "ts": 4, "dur": 1,
  "args": {"kind": "step_sync", "site": "step_sync", "seq": 0, "ranks": 2, "group": 0}},
 {"ph": "s", "id": 1, "name": "activation", "cat": "p2p", "pid": 0, "tid": 2, "ts": 10},
 {"ph": "f", "bp": "e", "id": 1, "name": "activation", "cat": "p2p", "pid": 1, "tid": 2, "ts": 4}
]}
J
"$BIN" analyze "$TMP/hand.json" --top 0 --json "$TMP/hand.out.json" >"$TMP/hand.out" 2>&1 || { cat "$TMP/hand.out"; fail "hand-built trace"; }
jq -e '.clock.corrected == false and .causality.receives == 1 and .causality.receives_before_send == 1
       and .causality.collective_instances == 1 and .causality.collective_order_violations == 1
       and .causality.flows == 1 and .causality.flows_backward == 1 and .causality.worst_violation_us == 6
       and (.causality | has("uncorrected") | not)' "$TMP/hand.out.json" >/dev/null \
  || fail "hand-built: causality counts $(jq -c .causality "$TMP/hand.out.json")"
grep -q "receives before their send 1 of 1, collective exits before the last entry 1 of 1, flows backwards 1 of 1" \
  "$TMP/hand.out" && grep -q "clocks: no correction recorded" "$TMP/hand.out" || fail "hand-built: causality table"
# a clock record that is not as documented: exit 2, naming the file
jq '.otherData = {"clock": {"origin_s": 1, "rounds": 10, "ranks": [{"rank": 0, "offset_s": "x"}]}}' "$TMP/hand.json" >"$TMP/badclock.json"
"$BIN" analyze "$TMP/badclock.json" >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q "badclock.json: otherData.clock" "$TMP/o"; } || fail "malformed otherData.clock: rc $rc, $(cat "$TMP/o")"

# a traced 4-rank run of 2 replicas x 2 stages
timeout 300 mpirun -np 4 --bind-to none "$BIN" train --model tiny-gpt --data "$FIX/text" --steps 5 --seed 3 \
  --global-batch 8 --micro-batch 2 --seq 64 --plan "$PLANS/tiny-2x2.json" --trace "$TMP/t.json" >"$TMP/train.out" 2>&1 \
  || { tail -5 "$TMP/train.out"; fail "traced training run"; }
. "$(dirname "$0")/tools/clock_checks.sh"
# (the residual is half the best round trip of 200, ~1-2 us on a quiet machine, the issue's target 10 us;
# under load a core may be away for tens of us: the check bounds it at 1 ms, the value is printed)
clock_checks "$TMP/t.json" "one machine" 1e-3
jq -e '.otherData.clock.domain == "CLOCK_MONOTONIC" and (.otherData.clock.ranks | length) == 4
       and all(.otherData.clock.ranks[]; (.offset_s | fabs) < 1e-3)' "$TMP/t.json" >/dev/null \
  || fail "one machine: the offsets of one CLOCK_MONOTONIC should be ~0: $(jq -c .otherData.clock.ranks "$TMP/t.json")"

[ $fails -eq 0 ] && echo "trace clock: all checks passed"
exit $((fails > 0))
