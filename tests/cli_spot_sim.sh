#!/usr/bin/env bash
# autohet spot-sim: replay of spot traces. A burst of removals at one
# timestamp is one change; an interval without nodes is waiting time for every
# policy; time is conserved (running + down = the trace's span); on the real
# AWS trace layer-bitmap recovery beats the full reload; a mixed-degree
# recovery from the cloud moves every layer at its stages' degrees;
# malformed traces and options are one-line errors with exit 2.
# Small node sets wherever an assertion does not need the real trace: each
# distinct node set is a planner search (docs/spot-sim.md).
. "$(dirname "$0")/common.sh"
SIM=("$BIN" spot-sim --model gpt3-2.7b --global-batch 256 --seq 2048 --node 8xA100-40G)

# 4 nodes; a burst removes 2 at 1 h; all gone from 2 h to 3 h; back at 3 h; end at 4 h
cat >"$TMP/t.csv" <<'T'
# time_ms,event,node
0,add,a
0,add,b
0,add,c
0,add,d
3600000,remove,a
3600000,remove,b
7200000,remove,c
7200000,remove,d
10800000,add,e
10800000,add,f
10800000,add,g
14400000,remove,e
T
"${SIM[@]}" --trace "$TMP/t.csv" --json "$TMP/t.json" --svg "$TMP/t.svg" >"$TMP/t.out" 2>&1 || { cat "$TMP/t.out"; fail "small trace: exit"; }
jq -e '.trace.changes == 5 and .trace.events == 12 and .trace.duration_s == 14400 and .trace.max_nodes == 4
       and .trace.min_nodes == 2' "$TMP/t.json" >/dev/null || fail "small trace: change points $(jq -c .trace "$TMP/t.json")"
for p in autohet full-reload static; do
  jq -e --arg p "$p" '.policies[$p] as $r
    | ($r.downtime_by_cause.waiting >= 3600 - 1e-6)
    and ([$r.timeline[] | .[1] - .[0]] | add | (. > 14400 - 1e-3 and . < 14400 + 1e-3))
    and ((([$r.timeline[] | select(.[2] > 0) | .[1] - .[0]] | add) + $r.downtime_s - 14400) | fabs < 1e-3)' \
    "$TMP/t.json" >/dev/null || fail "$p: waiting / time conservation: $(jq -c --arg p "$p" '.policies[$p] | del(.timeline)' "$TMP/t.json")"
done
# the burst is one change: autohet restarts once for it (start, burst, return, last removal = 4; the
# empty interval is waiting, not a restart)
jq -e '.policies.autohet.restarts == 4' "$TMP/t.json" >/dev/null \
  || fail "autohet restarts: $(jq '.policies.autohet.restarts' "$TMP/t.json") (expected 4)"
# static is sized for the fewest nodes (2) and never needs to wait for the burst
jq -e '.static_nodes == 2' "$TMP/t.json" >/dev/null || fail "static size"
head -c 5 "$TMP/t.svg" | grep -q "<svg" && tail -1 "$TMP/t.svg" | grep -q "</svg>" || fail "svg"
grep -q "samples/s" "$TMP/t.svg" || fail "svg axis"
# one panel per policy, each headed by its numbers; the panels do not overlap
[ "$(grep -c 'fill="none" stroke="#ccc"' "$TMP/t.svg")" -eq 3 ] || fail "svg: not one panel per policy"
for p in autohet full-reload static; do
  grep -q ">$p</tspan>: [0-9.e+]* samples/s on average, [0-9]* samples, [0-9.]* h down, [0-9]* restarts" "$TMP/t.svg" \
    || fail "svg: $p panel lacks its numbers"
done
python3 - "$TMP/t.svg" <<'PY' || fail "svg: panels overlap"
import re, sys
frames = sorted((float(y), float(y) + float(h)) for y, h in
                re.findall(r'<rect x="[0-9.]+" y="([0-9.]+)" width="[0-9.]+" height="([0-9.]+)" fill="none"', open(sys.argv[1]).read()))
sys.exit(any(a[1] + 12 > b[0] for a, b in zip(frames, frames[1:])))
PY

# deterministic by default: two identical runs write byte-identical JSON; measured planning on request
"${SIM[@]}" --trace "$TMP/t.csv" --json "$TMP/t2.json" >/dev/null 2>&1 || fail "second run: exit"
cmp -s "$TMP/t.json" "$TMP/t2.json" || fail "two identical runs differ: $(diff <(jq -S . "$TMP/t.json") <(jq -S . "$TMP/t2.json") | head -5)"
jq -e '.costs.planning == "modelled" and (has("replay_wall_s") | not)
       and .policies.autohet.downtime_by_cause.planning > 0' "$TMP/t.json" >/dev/null || fail "modelled planning"
"${SIM[@]}" --trace "$TMP/t.csv" --json "$TMP/tm.json" --measure-planning >/dev/null 2>&1 || fail "--measure-planning: exit"
jq -e '.costs.planning == "measured" and .replay_wall_s > 0' "$TMP/tm.json" >/dev/null || fail "--measure-planning"

# the real AWS trace: layer-bitmap recovery gets more done than the full reload (TP held at 2, the
# first plan's degree: 23 node sets to plan instead of searching every degree set for each)
"${SIM[@]}" --trace "$FIX/spot-traces/aws-p3-bamboo.csv" --replan-tp 2 --json "$TMP/aws.json" >"$TMP/aws.out" 2>&1 \
  || { cat "$TMP/aws.out"; fail "aws trace: exit"; }
jq -e '.trace.changes > 100 and .policies.autohet.samples > .policies["full-reload"].samples
       and .policies.autohet.downtime_s < .policies["full-reload"].downtime_s
       and .policies.autohet.bytes_by_tier.peer > 0 and .policies["full-reload"].bytes_by_tier.peer == 0
       and (.policies | keys | sort) == ["autohet", "full-reload", "static"]
       and .tp == 2 and .tp_degrees == [2]' "$TMP/aws.json" >/dev/null \
  || fail "aws: $(jq -c '[.policies[] | {samples, downtime_s}]' "$TMP/aws.json")"
grep -q "^autohet " "$TMP/aws.out" && grep -q "TP 2;" "$TMP/aws.out" || fail "aws: no table"

# a mixed inventory drawn from the node names (a: 8xA100-40G; e, h, node1, node2: two of each) and
# per-stage TP degrees: every node of the running plan is replaced in one burst after the first
# cloud checkpoint, so autohet restores everything from the cloud, which holds each layer at the
# degrees of the stages that wrote it. Each node then needs every layer its stages hold, whole
# (its own degree's shards, or all shards of another degree to reshard from): as many cloud bytes
# as the full reload reads. (Cloud shards sized at the largest degree, or recorded without a
# degree, come out short for the TP-1 stages.) The trace ends at the burst: its recovery is the last.
{
  printf '0,add,%s\n' a b c d
  printf '3600000,remove,%s\n' a b c d
  printf '3600000,add,%s\n' e h node1 node2
} >"$TMP/swap.csv"
MIX=("${SIM[@]}" --node 8xA100-40G,4xV100-16G --trace "$TMP/swap.csv")
"${MIX[@]}" --json "$TMP/mix.json" >"$TMP/mix.out" 2>&1 || { cat "$TMP/mix.out"; fail "mix: exit"; }
jq -e '.tp == 0 and (.tp_degrees | length) >= 2' "$TMP/mix.json" >/dev/null \
  || fail "mix: expected plans of several TP degrees, got $(jq -c .tp_degrees "$TMP/mix.json")"
jq -e '.policies.autohet.bytes_by_tier as $a | .policies["full-reload"].bytes_by_tier as $f
       | $a.peer == 0 and $a.cloud > 0 and ($a.cloud - $f.cloud | fabs) <= 1e-9 * $f.cloud
       and .policies.autohet.restarts == 2' "$TMP/mix.json" >/dev/null \
  || fail "mix: autohet's cloud bytes differ from the full reload's: $(jq -c '[.policies[] | .bytes_by_tier]' "$TMP/mix.json")"
grep -q "TP any (" "$TMP/mix.out" || fail "mix: header: $(head -1 "$TMP/mix.out")"
# --replan-tp holds every stage of every plan at one degree; --policy replays one policy
"${MIX[@]}" --replan-tp 2 --policy autohet --json "$TMP/mix2.json" >/dev/null 2>&1 || fail "mix --replan-tp 2: exit"
jq -e '.tp == 2 and .tp_degrees == [2] and (.policies | keys) == ["autohet"] and .policies.autohet.samples > 0
       and .policies.autohet.bytes_by_tier.cloud > 0' "$TMP/mix2.json" >/dev/null \
  || fail "mix --replan-tp 2: $(jq -c '{tp, tp_degrees, p: (.policies | keys)}' "$TMP/mix2.json")"

# bad input
bad() { # expected-substring args...
  local want=$1
  shift
  "$BIN" spot-sim "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "spot-sim $*: exit $rc, expected 2"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "$want" "$TMP/err" || { cat "$TMP/err"; fail "spot-sim $*: message"; }
}
printf '0,add,a\n12,oops,a\n' >"$TMP/bad1.csv"
bad "bad1.csv:2:" "${SIM[@]:2}" --trace "$TMP/bad1.csv"
printf '0,add,a\nabc,add,b\n' >"$TMP/bad2.csv"
bad "bad2.csv:2:" "${SIM[@]:2}" --trace "$TMP/bad2.csv"
printf '100,add,a\n50,remove,a\n' >"$TMP/bad3.csv"
bad "goes back" "${SIM[@]:2}" --trace "$TMP/bad3.csv"
printf '0,add,a\n0,remove,a\n' >"$TMP/bad4.csv"
bad "never has a node" "${SIM[@]:2}" --trace "$TMP/bad4.csv"
# a time must be a finite decimal number of ms within 10 years (1e400 was inf h of NaN samples, 0x10 hex), a
# line has 3 fields (a 4th was taken into the node name), and the trace must not contradict itself: an add
# of a node it has, a remove of one it has not
badtrace() { # expected-message line...
  local want=$1
  shift
  printf '%s\n' "$@" >"$TMP/bt.csv"
  bad "$want" "${SIM[@]:2}" --trace "$TMP/bt.csv"
}
for t in 1e400 1e18 315360000001 0x10 nan inf -5 +5 '5 ' 5ms; do
  badtrace "bt.csv:2: time '$t': expected milliseconds" 0,add,a "$t,remove,a"
done
badtrace "bt.csv:1: expected <time_ms>,<add|remove>,<node> (3 fields)" 0,add,a,extra
badtrace "bt.csv:3: add of node 'a', which line 1 added" 0,add,a 5,add,b 10,add,a
badtrace "bt.csv:2: remove of node 'c', which is not available" 0,add,a 1000,remove,c
badtrace "bt.csv:3: remove of node 'a', which is not available" 0,add,a 0,remove,a 5,remove,a
badtrace "bt.csv:1: line longer than 510" "0,add,$(head -c 600 /dev/zero | tr '\0' x)"
# ... while a fraction, an exponent within the bound, CRLF line ends, a node back after its removal load
printf '0.5,add,a\r\n1.5e3,remove,a\r\n2000,add,a\r\n315360000000,remove,a\r\n' >"$TMP/ok.csv"
"${SIM[@]}" --replan-tp 2 --trace "$TMP/ok.csv" --json "$TMP/ok.json" >/dev/null 2>&1 || fail "ok.csv: exit"
jq -e '.trace.events == 4 and .trace.duration_s == 315359999.9995' "$TMP/ok.json" >/dev/null \
  || fail "ok.csv: $(jq -c .trace "$TMP/ok.json")"
bad "--policy" "${SIM[@]:2}" --trace "$TMP/t.csv" --policy sometimes
bad "expected GPUSxTYPE" --model gpt3-2.7b --global-batch 256 --seq 2048 --node 8xZZZ --trace "$TMP/t.csv"
bad "has no data for GPU 'H800'" --model opt-350m --global-batch 256 --seq 2048 --node 8xH800 --trace "$TMP/t.csv" \
  --profile "$FIX/sailor/OPT-350"
bad "required" --trace "$TMP/t.csv"
# what stops every search alike stops the replay (not a trace-long wait with exit 0): a profile taken at
# another seq, a seq the model cannot take; the same profile at its own seq replays
"$BIN" profile --model tiny-gpt --out "$TMP/p64.json" --tp 1 --mb 1,2 --reps 1 --seq 64 >/dev/null 2>&1 || fail "profile"
TINY=(--trace "$TMP/t.csv" --node 1xcpu --model tiny-gpt --global-batch 8 --profile "$TMP/p64.json" --replan-tp 1)
bad "measured profile was taken at seq 64, training uses seq 128" "${TINY[@]}" --seq 128
"$BIN" spot-sim "${TINY[@]}" --seq 64 --json "$TMP/p64.out.json" >/dev/null 2>&1 || fail "profile at its seq: exit"
jq -e '.policies.autohet.samples > 0' "$TMP/p64.out.json" >/dev/null || fail "profile at its seq: no samples"
bad "--seq 100000 exceeds the 2048 learned positions" "${SIM[@]:2:4}" --seq 100000 --node 8xA100-40G --trace "$TMP/t.csv"
# ... while too few nodes for the model is waiting: gpt3-6.7b's state does not fit one 4xV100-16G node
printf '0,add,a\n3600000,add,b\n3600000,add,c\n3600000,add,d\n7200000,remove,d\n' >"$TMP/fit.csv"
"$BIN" spot-sim --trace "$TMP/fit.csv" --node 4xV100-16G --model gpt3-6.7b --global-batch 64 --seq 2048 --replan-tp 4 \
  --policy autohet --json "$TMP/fit.json" >/dev/null 2>&1 || fail "too few nodes: exit"
jq -e '.policies.autohet | .downtime_by_cause.waiting == 3600 and .samples > 0' "$TMP/fit.json" >/dev/null \
  || fail "too few nodes: $(jq -c '.policies.autohet | del(.timeline)' "$TMP/fit.json")"
bad "--replan-tp '3': expected any or 1, 2, 4 or 8" "${SIM[@]:2}" --trace "$TMP/t.csv" --replan-tp 3
bad "--replan-tp 8: no node type" --model gpt3-2.7b --global-batch 256 --seq 2048 --node 4xV100-16G \
  --trace "$TMP/t.csv" --replan-tp 8

[ $fails -eq 0 ] && echo "cli_spot_sim: all checks passed"
exit $((fails > 0))
