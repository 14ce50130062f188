#!/usr/bin/env bash
# A host that dies silently: on two hosts made of network namespaces (tests/tools/netns_hosts.sh; root), a
# 2-replica plan (n0 and n1, every layer each) runs under autohet run --hostfile --heartbeat-timeout 3;
# once step 3 is logged the test stops host 1's rank with SIGSTOP (no process ends, no signal reaches the
# controller, the job would hang). Its heartbeat falls silent; within the timeout (+ 1 s of polling) the
# controller declares node n1 lost, kills its rank on its host, and the next generation runs on host 0
# alone from the last committed step, ending on the uninterrupted one-process run's parameters (1e-5).
# Bad input: --heartbeat-timeout -1 is one line, exit 2. If the namespaces cannot be made the test fails
# with the reason.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/tools/netns_hosts.sh"
trap 'netns_down; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 10 --seed 3 --eval-every 0)
cat >"$TMP/plan.json" <<'EOF2'
{"format": "autohet-plan", "version": 1, "model": {"name": "tiny-gpt"}, "train": {"seq": 64},
 "cluster": {"nodes": [{"name": "n0", "gpu_type": "cpu", "gpus": 1}, {"name": "n1", "gpu_type": "cpu", "gpus": 1}]},
 "tp": 1, "micro_batch": 2, "global_batch": 8,
 "replicas": [
  {"micro_batches": 2, "stages": [{"node_index": 0, "gpus": [0], "layers": [0, 6]}]},
  {"micro_batches": 2, "stages": [{"node_index": 1, "gpus": [0], "layers": [0, 6]}]}]}
EOF2
"$BIN" run --plan "$TMP/plan.json" "${ARGS[@]}" --heartbeat-timeout -1 >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] && grep -q -- "--heartbeat-timeout '-1'" "$TMP/bad.err" \
  || fail "--heartbeat-timeout -1: exit $rc, $(cat "$TMP/bad.err")"
"$BIN" run --help >"$TMP/help" && grep -q -- "--heartbeat-timeout" "$TMP/help" || fail "run --help names no --heartbeat-timeout"

NETNS_PRIVATE_SHM=1 netns_up 2 || { fail "cannot make network-namespace hosts (see above): this test needs root and iproute2"; exit 1; }
H0=${NETNS_HOSTS[0]} H1=${NETNS_HOSTS[1]}
printf '%s slots=1\n%s slots=1\n' "$H0" "$H1" >"$TMP/hostfile"
export OMPI_MCA_plm_rsh_agent="$NETNS_AGENT" OMPI_MCA_oob_tcp_if_include="$NETNS_SUBNET" OMPI_MCA_btl=tcp,self
export OMPI_MCA_btl_tcp_if_include="$NETNS_SUBNET"
AUTOHET_DUMP_PARAMS="$TMP/ref.bin" timeout 120 "$BIN" train "${ARGS[@]}" --global-batch 8 --micro-batch 2 --seq 64 \
  >"$TMP/ref.out" 2>&1 || { tail -5 "$TMP/ref.out"; fail "one-process run"; }
RUN="$TMP/hb.run"
AUTOHET_DUMP_PARAMS="$TMP/hb.bin" timeout 150 "$BIN" run --plan "$TMP/plan.json" "${ARGS[@]}" --hostfile "$TMP/hostfile" \
  --heartbeat-timeout 3 --run-dir "$RUN" --log "$TMP/hb.log" --report "$TMP/hb.json" >"$TMP/hb.out" 2>&1 &
job=$!
# once step 3 is logged: stop (not kill) host 1's rank
stopped=""
for ((k = 0; k < 1200; k++)); do
  [ -n "$stopped" ] && break
  sleep 0.1
  [ -s "$TMP/hb.log" ] && [ "$(jq -s 'map(.step) | max' "$TMP/hb.log" 2>/dev/null)" -ge 3 ] 2>/dev/null || continue
  for f in "$RUN"/pids-0/rank-*; do
    read -r pid node _ <"$f"
    [ "$node" = n1 ] && kill -STOP "$pid" && stopped=$pid
  done
done
[ -n "$stopped" ] || fail "never saw step 3 and n1's rank to stop"
wait $job
rc=$?
[ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null # (it was killed: nothing is left to continue)
[ $rc = 0 ] || { tail -20 "$TMP/hb.out"; fail "autohet run with a silent host: exit $rc"; }
line=$(grep "autohet run: heartbeat: rank [0-9]* of node n1, host $H1 silent for" "$TMP/hb.out")
[ -n "$line" ] || { tail -20 "$TMP/hb.out"; fail "the silent host was not detected by its heartbeat"; }
silent=$(sed 's/.*silent for \([0-9.]*\) s.*/\1/' <<<"$line")
awk -v s="$silent" 'BEGIN { exit !(s >= 3 && s < 4.5) }' || fail "detected after $silent s of silence, want 3-4.5 s"
echo "$line"
out=$("$CMP" "$TMP/ref.bin" "$TMP/hb.bin" 1e-5) || fail "parameters differ from the uninterrupted run: $out"
echo "2 namespace hosts, $H1's rank stopped after step 3: parameters $out"
jq -e '.completed and .final_step == 10 and (.recoveries | length) == 1 and (.recoveries[0].cause | test("heartbeat"))' \
  "$TMP/hb.json" >/dev/null || fail "report: $(jq -c '{completed, final_step, recoveries: [.recoveries[] | .cause]}' "$TMP/hb.json")"
[ "$(cut -d= -f2 "$RUN/rankfile-1.txt" | cut -d' ' -f1 | sort -u)" = "$H0" ] \
  || fail "generation 1 is not on $H0 alone: $(cat "$RUN/rankfile-1.txt")"
for ((k = 0; k < 50; k++)); do proc_running "$stopped" || break; sleep 0.1; done # (a zombie is dead)
proc_running "$stopped" && fail "the stopped rank $stopped is still there: $(grep '^State' "/proc/$stopped/status")"
[ $fails = 0 ] && echo "cli_run_heartbeat: all passed"
exit $((fails > 0))
