#!/usr/bin/env bash
# autohet run under faults it does not stage itself, injected from outside the process (issue #26):
#  1. kill -9 of one rank (its pid from RUN/pids-G/rank-R) once step 8 is logged: a membership change; the
#     node is lost (cause "signal: lost n2"), detection is timed from the death, at most one step is lost,
#     and the run ends on the uninterrupted run's parameters
#  1b. the same on a 4-stage pipeline (each layer on one node): buddy copies on the next node, 0-1 step lost
#  1c. the same with --mem-copies 3 and kill -9 of two nodes' ranks at once: still 0-1 step lost, no cloud
#  1d. a plan with replans computed ahead (`plan --replans 1`): kill -9 of one rank, then of another in the next
#     generation: the first loss is looked up in the table ("computed ahead"), the second, deeper than the
#     table, is its entry repaired ("computed ahead, repaired"); the run ends on the same parameters
#  2. kill -9 of the controller, then `autohet run --resume RUN` (no other flags): the old job is gone with
#     its controller, the resumed run ends on the same parameters, nothing is left in /dev/shm or running;
#     a second controller of a live run is refused (exit 2, one line); its relative --trace lands where it started
#  2b. every node lost in one change: exit 1 with a line saying how the run goes on; --resume ends on the
#     same parameters
#  3. a bug: every rank fails the same way at the same step (a learning rate that makes the gradient norm
#     NaN at step 2): restarted --max-restarts times, then the run stops with the rank's own message, exit 1
#  4. across 3 network-namespace hosts, host 1's link loses 3 of 4 of its UDP datagrams once step 3 is logged
#     (its heartbeats squeezed through a 300 bit/s class of one packet's queue: one in ~1.9 s passes, so it is
#     never silent for the 3 s timeout): the other hosts lose none, so it is dropped as a failing "link",
#     detection timed from when the losses began, and the run ends on the same parameters. (A link throttled
#     to 1 kbit/s as a whole is tests/chaos.sh kind 4: silent or lossy, by chance.)
#  5. the same hosts, host 1's link cut once step 3 is logged: its ranks still run but
#     are unheard (heartbeats travel the training network), so it is dropped as "partition" and the run
#     ends on the survivors with the uninterrupted run's parameters
# Each waits for what it needs (a logged step, a pid file), never for a fixed time.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/tools/netns_hosts.sh"
trap 'netns_down; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 30 --seed 3 --eval-every 0)
AUTOHET_DUMP_PARAMS="$TMP/ref.bin" timeout 300 "$BIN" train "${ARGS[@]}" --global-batch 8 --micro-batch 2 --seq 64 \
  >"$TMP/ref.out" 2>&1 || { cat "$TMP/ref.out"; fail "reference run"; }
# (30 steps of another plan's reduction order: 1e-4, as tests/cli_run.sh)
TOL=1e-4

logged() { # log-file step: the job has logged step >= STEP
  [ -s "$1" ] && [ "$(jq -s 'map(.step) | max' "$1" 2>/dev/null || echo 0)" -ge "$2" ] 2>/dev/null
}
wait_logged() { # log-file step (60 s at most)
  local k
  for ((k = 0; k < 6000; k++)); do logged "$1" "$2" && return 0; sleep 0.01; done
  return 1
}
no_leftovers() { # name run-dir
  local k
  for ((k = 0; k < 100; k++)); do pgrep -f -- "$2" >/dev/null || break; sleep 0.05; done
  pgrep -af -- "$2" | grep -v pgrep && fail "$1: processes of the run are left"
  ls /dev/shm | grep -q "autohet-$(basename "$2")-" && fail "$1: its memory tier is left in /dev/shm"
  return 0
}

# start_run NAME PLAN STEP [FLAGS...]: autohet run of PLAN in the background (RUN=$TMP/NAME.run, its parameters in
# $TMP/NAME.bin, report $TMP/NAME.json, output $TMP/NAME.out), then waits until it has logged STEP
start_run() {
  local name=$1 plan=$2 step=$3
  shift 3
  RUN="$TMP/$name.run"
  AUTOHET_DUMP_PARAMS="$TMP/$name.bin" timeout 300 "$BIN" run --plan "$plan" "${ARGS[@]}" "$@" --run-dir "$RUN" \
    --report "$TMP/$name.json" >"$TMP/$name.out" 2>&1 &
  job=$!
  wait_logged "$RUN/gen-0.log" "$step" || { head -30 "$TMP/$name.out"; fail "$name: step $step never logged"; }
}
# end_run NAME: the run ends with exit 0 on the uninterrupted run's parameters
end_run() { # (REF: the uninterrupted run of a longer run)
  wait $job || { local rc=$?; tail -20 "$TMP/$1.out"; fail "$1: exit $rc"; }
  out=$("$CMP" "${REF:-$TMP/ref.bin}" "$TMP/$1.bin" $TOL) || fail "$1: parameters differ from the uninterrupted run: $out"
}

# 1. kill -9 of one rank
start_run kill "$PLANS/tiny-4node-2x2.json" 8 --log "$TMP/kill.log"
victim=$(cut -d' ' -f1 "$RUN/pids-0/rank-2")
kill -9 "$victim"
end_run kill
jq -e '.completed and .final_step == 30 and (.recoveries | length) == 1 and (.recoveries[0] |
  (.cause | startswith("signal: lost n2")) and .steps_lost <= 1 and .detection_s >= 0 and .detection_s < 5)' \
  "$TMP/kill.json" >/dev/null || fail "kill: report: $(jq -c '.recoveries' "$TMP/kill.json")"
# --log: every step at most once, in order, to the last (a step lost to the kill and trained again is not
# logged twice)
jq -e -s 'map(.step) as $s | $s[-1] == 30 and all(range(1; $s | length); $s[.] > $s[. - 1])' "$TMP/kill.log" \
  >/dev/null || fail "kill: --log steps $(jq -s -c 'map(.step)' "$TMP/kill.log")"
no_leftovers kill "$RUN"

# 1b. a 4-stage pipeline, whose every layer lives on one node: their memory snapshots also go to the next
#     node (--mem-copies 2, the default), so kill -9 of n2's rank loses at most the step in flight and n2's
#     layers come from n3's buddy copies, not the cloud
start_run pipe "$PLANS/tiny-4node-pipe.json" 8
kill -9 "$(cut -d' ' -f1 "$RUN/pids-0/rank-2")"
end_run pipe
jq -e '.recoveries[0] | .steps_lost <= 1 and .bytes_by_tier.cloud == 0 and (.layers_by_tier.peer | index(3) != null)' \
  "$TMP/pipe.json" >/dev/null || fail "pipe: report: $(jq -c '.recoveries' "$TMP/pipe.json")"
grep -q "memory snapshots also go to the next node" "$TMP/pipe.out" || fail "pipe: the buddy copies are not said"

# 1c. the same pipeline with --mem-copies 3 (every layer in 3 nodes' memory), kill -9 of n1's and n2's ranks
#     at once: a double fault; n1's and n2's layers both come from n3's (and n0's) copies, not the cloud
start_run pipe3 "$PLANS/tiny-4node-pipe.json" 8 --mem-copies 3
kill -9 "$(cut -d' ' -f1 "$RUN/pids-0/rank-1")" "$(cut -d' ' -f1 "$RUN/pids-0/rank-2")"
end_run pipe3
jq -e '(.recoveries | length) == 1 and (.recoveries[0] | (.cause | test("lost n1.*lost n2|lost n2.*lost n1"))
       and .steps_lost <= 1 and .bytes_by_tier.cloud == 0)' "$TMP/pipe3.json" >/dev/null \
  || fail "pipe3: report: $(jq -c '.recoveries' "$TMP/pipe3.json")"
grep -q "memory snapshots also go to the next nodes at every snapshot (--mem-copies 3)" "$TMP/pipe3.out" \
  || fail "pipe3: the buddy copies are not said"

# 1d. replans computed ahead: the recovery path looks the loss up instead of searching
"$BIN" plan --model tiny-gpt --cluster 4x1xcpu --global-batch 8 --micro-batch 2 --seq 64 --replans 1 --quiet \
  --json "$TMP/ahead.plan.json" || fail "ahead: plan --replans 1"
start_run ahead "$TMP/ahead.plan.json" 8
kill -9 "$(cut -d' ' -f1 "$RUN/pids-0/rank-2")"
wait_logged "$RUN/gen-1.log" 16 || { tail -5 "$TMP/ahead.out"; fail "ahead: step 16 never logged after the first loss"; }
kill -9 "$(cut -d' ' -f1 "$RUN/pids-1/rank-0")"
end_run ahead
jq -e '.completed and (.recoveries | length) == 2 and (.recoveries[0] | (.cause | startswith("signal: lost cpu-2"))
       and .replan == "computed ahead") and (.recoveries[1].replan == "computed ahead, repaired")' \
  "$TMP/ahead.json" >/dev/null || fail "ahead: report: $(jq -c '[.recoveries[] | {cause, replan}]' "$TMP/ahead.json")"
grep -q "replan [0-9.]* (computed ahead)" "$TMP/ahead.out" || fail "ahead: the recovery line does not say how it replanned"

# 2. kill -9 of the controller, then --resume (from another directory: the run started in $TMP with a
#    relative --trace, which lands there)
RUN="$TMP/ctl.run"
ABIN=$(realpath "$BIN") AFIX=$(realpath "$FIX")
(cd "$TMP" && AUTOHET_DUMP_PARAMS="$TMP/ctl.bin" exec timeout 300 "$ABIN" run --plan "$PLANS/tiny-4node-2x2.json" \
  --model tiny-gpt --data "$AFIX/text" --steps 30 --seed 3 --eval-every 0 --run-dir "$RUN" --log "$TMP/ctl.log" \
  --report "$TMP/ctl.json" --trace ctl-trace.json >"$TMP/ctl.out" 2>&1) &
job=$!
wait_logged "$RUN/gen-0.log" 6 || fail "controller: step 6 never logged"
"$BIN" run --resume "$RUN" >"$TMP/two.out" 2>"$TMP/two.err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$TMP/two.err")" = 1 ] && grep -q "still runs" "$TMP/two.err" \
  || fail "a second controller of a live run: exit $rc, $(cat "$TMP/two.err")"
ctl=$(head -1 "$RUN/.controller.lock") # the controller's pid (not timeout's)
kill -9 "$ctl"
wait $job 2>/dev/null
AUTOHET_DUMP_PARAMS="$TMP/ctl.bin" timeout 300 "$BIN" run --resume "$RUN" >"$TMP/ctl2.out" 2>&1 \
  || { rc=$?; tail -20 "$TMP/ctl2.out"; fail "controller: resume exit $rc"; }
out=$("$CMP" "$TMP/ref.bin" "$TMP/ctl.bin" $TOL) || fail "controller: parameters differ from the uninterrupted run: $out"
jq -e '.completed and .final_step == 30 and (.recoveries | length) == 1 and
  (.recoveries[0] | (.cause | startswith("controller:")) and .steps_lost <= 1)' "$TMP/ctl.json" >/dev/null \
  || fail "controller: report: $(jq -c '.recoveries' "$TMP/ctl.json")"
[ "$(jq -s 'map(.step) | max' "$TMP/ctl.log")" = 30 ] || fail "controller: --log does not reach step 30"
# every step logged once, but for a step committed in the instant between its checkpoint and its log line
# (the job died there: the report's resumed_step is then above last_step_before)
jq -s --slurpfile r "$TMP/ctl.json" '($r[0].recoveries[0]) as $c | (map(.step) | unique) as $have
  | [range(1; 31)] - $have | all(. > $c.last_step_before and . <= $c.resumed_step)' "$TMP/ctl.log" | grep -q true \
  || fail "controller: --log misses steps: $(jq -s -c 'map(.step)' "$TMP/ctl.log")"
"$BIN" analyze "$TMP/ctl-trace.json" >"$TMP/ctl-trace.out" 2>&1 && grep -q "^Trace .*: 4 ranks" "$TMP/ctl-trace.out" \
  || fail "controller: the resumed run's --trace: $(head -2 "$TMP/ctl-trace.out")"
no_leftovers controller "$RUN"

# 2b. every node lost at once: the run stops (exit 1) saying how it goes on, keeps its durable tiers, and
#     `autohet run --resume` continues on the inventory's nodes to the same parameters. (The four nodes are
#     preempted together at step 6, so that all four are lost in one change; kill -9 of every rank from
#     outside may instead count the ranks whose watchers record their end after the controller's stop as
#     part of that stop, and the run goes on with them, as on a loaded machine it did.)
start_run all "$PLANS/tiny-4node-2x2.json" 2 --ckpt-every 4 --preempt n0@6,n1@6,n2@6,n3@6
wait $job
rc=$?
[ $rc = 1 ] || { tail -5 "$TMP/all.out"; fail "all ranks lost: exit $rc, want 1"; }
grep -q "every node is lost; .*autohet run --resume $RUN" "$TMP/all.out" \
  || { tail -5 "$TMP/all.out"; fail "all ranks lost: no line saying how the run goes on"; }
AUTOHET_DUMP_PARAMS="$TMP/all.bin" timeout 300 "$BIN" run --resume "$RUN" >"$TMP/all2.out" 2>&1 \
  || { rc=$?; tail -20 "$TMP/all2.out"; fail "all ranks lost: resume exit $rc"; }
out=$("$CMP" "$TMP/ref.bin" "$TMP/all.bin" $TOL) || fail "all ranks lost: parameters differ after the resume: $out"
jq -e '.completed and .final_step == 30 and (.recoveries[-1].cause | test("every node had been lost"))' \
  "$TMP/all.json" >/dev/null || fail "all ranks lost: report: $(jq -c '[.recoveries[].cause]' "$TMP/all.json")"
no_leftovers all "$RUN"

# 3. a bug, not a fault
# (12 steps: ARGS with its --steps value replaced, never a "30" inside a path such as the checkout's)
"$BIN" run --plan "$PLANS/tiny-4node-2x2.json" "${ARGS[@]:0:4}" --steps 12 "${ARGS[@]:6}" --lr 1e30 --max-restarts 2 --run-dir "$TMP/bug.run" \
  --report "$TMP/bug.json" >"$TMP/bug.out" 2>"$TMP/bug.err"
rc=$?
[ $rc = 1 ] || fail "bug: exit $rc, expected 1"
grep -q "gradient norm is .*nan" "$TMP/bug.err" && grep -q "the same failure 3 times in a row" "$TMP/bug.err" \
  || { tail -5 "$TMP/bug.err"; fail "bug: the stop does not say the rank's error"; }
jq -e '(.completed | not) and (.recoveries | length) == 2' "$TMP/bug.json" >/dev/null \
  || fail "bug: report: $(jq -c '[.completed, (.recoveries | length)]' "$TMP/bug.json")"
no_leftovers bug "$TMP/bug.run"

# 3b. every copy is a fallback: the newest cloud checkpoint's layer 0 corrupt on n0 and layer 1 on n2 (each
#     has a good copy on the other node), then a rank killed: full-reload recovery reads the cloud only, and
#     whichever copy it reads first, one of the two layers must fall back to the other copy
start_run copy "$PLANS/tiny-4node-2x2.json" 12 --recovery full-reload --ckpt-every 5
ranks=$(cut -d' ' -f1 "$RUN"/pids-0/rank-*)
kill -STOP $ranks # (the job frozen: no newer checkpoint while the copies are spoiled)
s=$(jq '[.shards[].step] | max' "$RUN/cloud/n0/manifest.json")
flip() { printf '\x55' | dd of="$1" bs=1 seek=$(($(stat -c %s "$1") - 7)) conv=notrunc status=none; }
flip "$RUN/cloud/n0/L000-tp0-s$s.safetensors" && flip "$RUN/cloud/n2/L001-tp0-s$s.safetensors" \
  || fail "copy: no cloud shards of step $s to spoil"
kill -9 "$(cut -d' ' -f1 "$RUN/pids-0/rank-1")"
kill -CONT $ranks 2>/dev/null
end_run copy
grep -q "checksum mismatch.*trying the next copy (cloud" "$TMP/copy.out" || fail "copy: no fallback to the other copy"
jq -e --argjson s "$s" '.completed and (.recoveries[0] | .resumed_step == $s and .fallbacks >= 1)' "$TMP/copy.json" \
  >/dev/null || fail "copy: report: $(jq -c '.recoveries' "$TMP/copy.json")"

# 3c. no good copy at all: both cloud copies of layer 0 spoiled. The recovery fails naming the layer, notes
#     the bad copies, and the next assignment leaves them out: no step is complete without them, so the run
#     restarts from the initialisation and still ends on the uninterrupted run's parameters
start_run none "$PLANS/tiny-4node-2x2.json" 12 --recovery full-reload --ckpt-every 5
ranks=$(cut -d' ' -f1 "$RUN"/pids-0/rank-*)
kill -STOP $ranks
s=$(jq '[.shards[].step] | max' "$RUN/cloud/n0/manifest.json")
flip "$RUN/cloud/n0/L000-tp0-s$s.safetensors" && flip "$RUN/cloud/n2/L000-tp0-s$s.safetensors" \
  || fail "none: no cloud shards of step $s to spoil"
kill -9 "$(cut -d' ' -f1 "$RUN/pids-0/rank-1")"
kill -CONT $ranks 2>/dev/null
end_run none
grep -q "layer 0 (TP rank 0) at step $s: no good copy of 2" "$TMP/none.out" || fail "none: the failure does not name the layer"
jq -e '.completed and (.recoveries | length) == 2 and .recoveries[1].resumed_step == 0' "$TMP/none.json" >/dev/null \
  || fail "none: report: $(jq -c '[.recoveries[] | {cause, resumed_step}]' "$TMP/none.json")"

# bad input
"$BIN" run --resume "$TMP/kill.run" --steps 5 >/dev/null 2>"$TMP/bad.err"
[ $? = 2 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] || fail "--resume with other flags: $(cat "$TMP/bad.err")"
"$BIN" run --resume "$TMP/nowhere" >/dev/null 2>"$TMP/bad.err"
[ $? = 2 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] && grep -q "not a run directory" "$TMP/bad.err" \
  || fail "--resume of no run: $(cat "$TMP/bad.err")"

# 4 and 5: across namespace hosts
NETNS_PRIVATE_SHM=1 netns_up 3 || { fail "cannot make network-namespace hosts (see above): this test needs root"; exit 1; }
printf '%s slots=1\n%s slots=1\n%s slots=1\n' "${NETNS_HOSTS[@]}" >"$TMP/hostfile"
export OMPI_MCA_plm_rsh_agent="$NETNS_AGENT" OMPI_MCA_oob_tcp_if_include="$NETNS_SUBNET" OMPI_MCA_btl=tcp,self
export OMPI_MCA_btl_tcp_if_include="$NETNS_SUBNET"
# 4. a lossy link; first, as the partitioned host's processes of 5 linger until their link is back and they
# learn that their job is gone
# Only the heartbeats' UDP is dropped, so the run goes on at full speed: the check needs the run to outlive
# the losses until their share shows. The throttle lets one beat (~100 bytes at 300 bit/s) through every ~2.7 s
# and drops the rest, so the loss window ending at a beat heard shows half its beats lost from the second beat
# that got through, ~5.5 s after the losses began: the run trains 60 steps (27 more steps took 5-9 s after the
# losses began on a loaded machine, which a loss window fixed from the run's start missed). A run that ends
# sooner than 7 s after its link became lossy (steps of 35 ms where they usually take 230 ms; a busy machine
# that applies the loss late) decides nothing: it is run again, at most 3 times, as is one that was not caught
# (under load the other hosts' beats may be late as well); the third that is not caught fails.
lossy() { ip netns exec "${NETNS_NS[1]}" tc "$@" 2>>"$TMP/tc.err"; }
# its reference: the same plan uninterrupted on this host (over 60 steps AdamW carries the plan's reduction order
# 9.5e-4 away from a single process's; the run that loses n1 ends on the uninterrupted plan's parameters)
AUTOHET_DUMP_PARAMS="$TMP/ref60.bin" timeout 300 "$BIN" run --plan "$PLANS/tiny-3node-2x1.json" "${ARGS[@]}" --steps 60 \
  --run-dir "$TMP/ref60.run" >"$TMP/ref60.out" 2>&1 || { tail "$TMP/ref60.out"; fail "60-step reference run"; }
for attempt in 1 2 3; do
  REF="$TMP/ref60.bin"
  start_run link$attempt "$PLANS/tiny-3node-2x1.json" 3 --hostfile "$TMP/hostfile" --heartbeat-timeout 3 --steps 60
  lossy qdisc add dev eth0 root handle 1: htb default 10 &&
    lossy class add dev eth0 parent 1: classid 1:10 htb rate 1gbit &&
    lossy class add dev eth0 parent 1: classid 1:20 htb rate 300bit ceil 300bit burst 100 cburst 100 &&
    lossy qdisc add dev eth0 parent 1:20 handle 20: pfifo limit 1 &&
    lossy filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff flowid 1:20 \
    || fail "link: cannot make host 1's link lossy: $(grep -v Warning "$TMP/tc.err")"
  t_lossy=$(date +%s.%N)
  end_run link$attempt
  lasted=$(awk -v a="$t_lossy" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  lossy qdisc del dev eth0 root
  LINK="$TMP/link$attempt"
  grep -q "autohet run: link: rank [0-9]* of node n1, host ${NETNS_HOSTS[1]} lost [0-9]*% of its heartbeats" \
    "$LINK.out" && break
  if awk -v s="$lasted" 'BEGIN { exit !(s < 7) }' && [ $attempt -lt 3 ]; then
    echo "link: the run ended $lasted s after its link became lossy, before a loss window could close: again"
    continue
  fi
  # On a loaded machine (ctest -j beside the chaos harness) the other hosts' beats arrive late too, and a loss
  # that is not one node's alone is rightly not blamed on its link: that run decides nothing either. A detector
  # that never names the lossy link fails all three runs.
  if [ $attempt -lt 3 ]; then
    echo "link: not detected in $lasted s (run $attempt of 3; other hosts' beats late under load?): again"
    continue
  fi
  tail -20 "$LINK.out"
  fail "link: not detected as a failing link (the run lasted $lasted s after its link became lossy)"
  break
done
REF=""
grep "autohet run: link:" "$LINK.out"
jq -e '.completed and (.recoveries[0] | (.cause | startswith("link: lost n1")) and .detection_s > 0)' \
  "$LINK.json" >/dev/null || fail "link: report: $(jq -c '.recoveries' "$LINK.json")"

# 5. a partition: host 1's link cut
start_run part "$PLANS/tiny-3node-2x1.json" 3 --hostfile "$TMP/hostfile" --heartbeat-timeout 3
ip link set "${NETNS_VETH[1]}" down || fail "partition: cannot cut host 1's link"
end_run part
ip link set "${NETNS_VETH[1]}" up
grep -q "autohet run: partition: rank [0-9]* of node n1, host ${NETNS_HOSTS[1]} silent for" "$TMP/part.out" \
  || { tail -20 "$TMP/part.out"; fail "partition: not detected as a partition"; }
jq -e '.completed and (.recoveries[0] | (.cause | startswith("partition: lost n1")) and .detection_s >= 3)' \
  "$TMP/part.json" >/dev/null || fail "partition: report: $(jq -c '.recoveries' "$TMP/part.json")"

[ $fails -eq 0 ] && echo "cli_run_faults: all checks passed"
exit $((fails > 0))
