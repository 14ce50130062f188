#!/usr/bin/env bash
# autohet run across hosts made of network namespaces (tests/tools/netns_hosts.sh; root, as CI runs).
# Every host has a /dev/shm of its own (NETNS_PRIVATE_SHM=1), as separate machines do: its memory tier is
# written, committed and read by its own ranks only, and the controller assigns the recovery from the
# manifests they reported over MPI. A 4-node plan (replica 0: n0 -> n1, replica 1: n2 -> n3) on 4 hosts from
# a hostfile loses host 1 at step 5 (--preempt HOST@STEP): its rank is killed on it through the rsh agent, its
# memory and disk tiers (under a path of its own host) are gone, the next generation runs on the three
# surviving hosts only, one rank on each (a survivor the replan gives no stage serves its layers from a
# recovery server rank on its host), the replicas get the layers they lack from n3's memory tier on another
# host over TCP (MPI one-sided, osc pt2pt), and the run ends on the uninterrupted single-process run's
# parameters (1e-5 relative).
# Every generation's rankfile puts each rank on its plan node's host, and the plans name the hosts, so
# autohet train's start-up check refuses any rank elsewhere. Before that, without namespaces: bad input
# (one line, exit 2); after it, on 3 of the hosts, a 3-node plan (replica 0: n0 -> n1, replica 1: n2 with
# every layer) loses host 1 at step 4 and host 2 at step 8 and ends on host 0
# alone with the same parameters; and with n0 given 2 GPUs and --replan-tp 2 the loss of host 2 leaves n1
# idle, so a recovery server rank on host 1 serves its layers. If the namespaces cannot be made the test fails with the reason.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/tools/netns_hosts.sh"
trap 'netns_down; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 12 --seed 3 --eval-every 3)
cp "$PLANS/tiny-3node-2x1.json" "$TMP/plan.json" # replica 0: n0 -> n1, replica 1: n2 with every layer

bad() { # expected-text args...: exit 2 and one line on stderr that says it
  local want="$1" rc err
  shift
  timeout 60 "$BIN" run --plan "$TMP/plan.json" "${ARGS[@]}" "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"
  rc=$? err=$(cat "$TMP/bad.err")
  [ $rc = 2 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] && [[ "$err" == *"$want"* ]] ||
    fail "run $*: exit $rc and '$err', want exit 2 and one line with '$want'"
}
printf 'ha\nhb\n' >"$TMP/h-two"
printf 'ha\nhb\nha\n' >"$TMP/h-twice"
printf 'ha\nhb\nhc\n' >"$TMP/h-fake"
bad "$TMP/h-two: 2 hosts for the inventory's 3 nodes: node 'n2' (cluster.nodes[2]) has no host" --hostfile "$TMP/h-two"
bad "$TMP/h-twice:3:" --hostfile "$TMP/h-twice"
bad "--preempt hd@5: no node or host named 'hd' in the inventory" --hostfile "$TMP/h-fake" --preempt hd@5
bad "--hostfile" --hostfile "$TMP/missing"
jq '.cluster.nodes[0].gpus = 2 | .replicas[1].stages[0] |= (.node_index = 0 | .gpus = [1])' "$TMP/plan.json" >"$TMP/plan-n0x2.json"
printf 'ha slots=1\nhb\nhc\n' >"$TMP/h-slots"
bad "$TMP/h-slots:1: slots=1: host 'ha' takes 1 rank, the plan puts 2 on node 'n0'" --hostfile "$TMP/h-slots" \
  --plan "$TMP/plan-n0x2.json"
# inside a Slurm allocation the node list is the host list (2 hosts for 3 nodes: refused, naming it)
SLURM_JOB_NODELIST='sa[1-2]' bad "SLURM_JOB_NODELIST: 2 hosts for the inventory's 3 nodes"
SLURM_JOB_NODELIST='sa[1-' bad "SLURM_JOB_NODELIST 'sa[1-'"
"$BIN" run --help >"$TMP/help" || fail "run --help"
grep -q -- "--hostfile FILE" "$TMP/help" || fail "run --help names no --hostfile"

NETNS_PRIVATE_SHM=1 netns_up 4 || { fail "cannot make network-namespace hosts (see above): this test needs root and iproute2"; exit 1; }
H0=${NETNS_HOSTS[0]} H1=${NETNS_HOSTS[1]} H2=${NETNS_HOSTS[2]} H3=${NETNS_HOSTS[3]}
printf '# three namespace hosts\n%s slots=1\n%s slots=1\n%s slots=1\n' "$H0" "$H1" "$H2" >"$TMP/hostfile"
printf '# four namespace hosts\n%s slots=1\n%s slots=1\n%s slots=1\n%s slots=1\n' "$H0" "$H1" "$H2" "$H3" >"$TMP/hostfile4"
# the 4-node plan: two 2-stage pipelines, one rank per host
jq '.cluster.nodes += [{"name": "n3", "gpu_type": "cpu", "gpus": 1}] |
    .replicas[1].stages = [{"node_index": 2, "gpus": [0], "layers": [0, 3]}, {"node_index": 3, "gpus": [0], "layers": [3, 6]}]' \
  "$TMP/plan.json" >"$TMP/plan4.json"
# TCP only, on the namespaces' subnet; the rsh agent enters the namespaces (docs/multi-host.md)
export OMPI_MCA_plm_rsh_agent="$NETNS_AGENT" OMPI_MCA_oob_tcp_if_include="$NETNS_SUBNET" OMPI_MCA_btl=tcp,self
export OMPI_MCA_btl_tcp_if_include="$NETNS_SUBNET"

AUTOHET_DUMP_PARAMS="$TMP/ref.bin" timeout 120 "$BIN" train "${ARGS[@]}" --global-batch 8 --micro-batch 2 --seq 64 \
  >"$TMP/ref.out" 2>&1 || { tail -5 "$TMP/ref.out"; fail "one-process run"; }
RUN="$TMP/mh.run"
# a site wrapper as --launcher: it records its arguments and runs mpirun with them
printf '#!/bin/sh\necho "$*" >>"%s"\nexec "$@"\n' "$TMP/launches" >"$TMP/wrap"
chmod +x "$TMP/wrap"
AUTOHET_DUMP_PARAMS="$TMP/mh.bin" timeout 120 "$BIN" run --plan "$TMP/plan4.json" "${ARGS[@]}" --hostfile "$TMP/hostfile4" \
  --preempt "$H1@5" --run-dir "$RUN" --log "$TMP/mh.log" --report "$TMP/mh.json" --launcher "$TMP/wrap mpirun" \
  >"$TMP/mh.out" 2>&1
rc=$?
[ $rc = 0 ] || { tail -20 "$TMP/mh.out"; fail "autohet run --hostfile: exit $rc"; }
out=$("$CMP" "$TMP/ref.bin" "$TMP/mh.bin" 1e-5) || fail "parameters differ from the uninterrupted run: $out"
echo "4 namespace hosts, $H1 lost at step 5, against one process: parameters $out"
jq -e '.completed and .final_step == 12 and (.generations | length) == 2' "$TMP/mh.json" >/dev/null \
  || fail "report: not completed in 2 generations: $(jq -c '{completed, final_step}' "$TMP/mh.json")"
[ "$(jq -s 'map(.step) | max' "$TMP/mh.log")" = 12 ] || fail "the log does not reach step 12"
# generation 0: every rank on its plan node's host; the plan names them, so train checked it at start
printf 'rank 0=%s slot=0\nrank 1=%s slot=0\nrank 2=%s slot=0\nrank 3=%s slot=0\n' "$H0" "$H1" "$H2" "$H3" >"$TMP/want0"
cmp -s "$TMP/want0" "$RUN/rankfile-0.txt" || { diff "$TMP/want0" "$RUN/rankfile-0.txt"; fail "generation 0: rankfile"; }
[ "$(jq -r '[.cluster.nodes[].host] | join(" ")' "$RUN/plan-0.json")" = "$H0 $H1 $H2 $H3" ] || fail "plan-0 names no hosts"
# the loss: killed on its host through the agent, then the job stopped and replanned
grep -q "autohet run: host $H1: SIGKILL to 1 rank of node n1 through $NETNS_AGENT" "$TMP/mh.out" \
  || fail "the lost host's rank was not killed through the agent"
grep -q "preempt: lost n1 (host $H1) after step" "$TMP/mh.out" || fail "no loss of host $H1 reported"
# generation 1: on the 3 survivors only, one rank on each, its plan checked by train, never the lost host
[ -s "$RUN/rankfile-1.txt" ] || fail "generation 1 has no rankfile"
[ "$(cut -d= -f2 "$RUN/rankfile-1.txt" | cut -d' ' -f1 | sort | tr '\n' ' ')" = "$(printf '%s\n' "$H0" "$H2" "$H3" | sort | tr '\n' ' ')" ] \
  || fail "generation 1 is not one rank on each of the 3 surviving hosts: $(cat "$RUN/rankfile-1.txt")"
[ "$(jq -r '[.cluster.nodes[].host] | sort | join(" ")' "$RUN/plan-1.json")" = "$(printf '%s\n' "$H0" "$H2" "$H3" | sort | paste -sd' ')" ] \
  || fail "plan-1 is not on the 3 surviving hosts: $(jq -c '[.cluster.nodes[].host]' "$RUN/plan-1.json")"
# every survivor works: a node the replan leaves without a stage serves its layers from a server rank
jq -e --slurpfile p "$RUN/plan-1.json" '($p[0] | [.replicas[].stages[].node_index] | unique | length)
  + .generations[1].recovery_servers == 3 and .generations[1].ranks + .generations[1].recovery_servers == 3' \
  "$TMP/mh.json" >/dev/null || fail "generation 1 leaves a survivor idle: $(jq -c '.generations[1].summary' "$TMP/mh.json")"
jq -e --arg h "$H1" '.generations[1].hosts | test($h) | not' "$TMP/mh.json" >/dev/null || fail "report: generation 1 hosts"
# the recovery: nothing lost, layers from a peer on another host over TCP, none from the lost host's paths
jq -e '.recoveries | length == 1 and (.[0] | .steps_lost == 0 and .resumed_step == 5 and .bytes_by_tier.peer > 0
  and .bytes_by_tier.cloud == 0)' "$TMP/mh.json" >/dev/null || { jq -c .recoveries "$TMP/mh.json"; fail "recovery record"; }
jq -e --arg h "$H3" 'any(.shards[]; .tier == "peer" and .holder == "n3" and (.path | contains("/" + $h + "/")))' \
  "$RUN/recover-1.json" >/dev/null || fail "no peer shard from n3's own host path"
jq -e --arg h "$H1" 'all(.shards[]; (.path | contains("/" + $h + "/")) | not)' "$RUN/recover-1.json" >/dev/null \
  || fail "a shard was read from the lost host's tiers"
# host-local tiers: every host has a /dev/shm of its own (NETNS_PRIVATE_SHM), so the controller cannot see
# the memory tiers; the assignment came from the manifests the hosts' ranks reported (RUN/memory/.reported,
# gone with the run) and still took n3's layers from its memory tier (above: peer bytes, no cloud)
[ -e "$(jq -r '[.shards[] | select(.tier == "peer")][0].path' "$RUN/recover-1.json")" ] \
  && fail "a host's memory tier is visible outside its host (the test's hosts share /dev/shm)"
# every generation's launch: its rankfile, the one-sided component that works over TCP
[ "$(wc -l <"$TMP/launches")" = 2 ] || fail "the wrapper did not launch 2 generations: $(cat "$TMP/launches")"
for g in 0 1; do
  grep -q "^mpirun -np [0-9]* --rankfile $RUN/rankfile-$g.txt --mca osc pt2pt " <(sed -n "$((g + 1))p" "$TMP/launches") \
    || fail "generation $g: launched without its rankfile and osc pt2pt: $(sed -n "$((g + 1))p" "$TMP/launches")"
done
# the per-host tiers go with the run (the cloud tier stays)
grep -o "memory /[^ ]*/HOST" "$TMP/mh.out" | head -1 >"$TMP/memroot"
[ -s "$TMP/memroot" ] || fail "the per-host tier paths were not printed"
root=$(sed 's|^memory ||; s|/HOST$||' "$TMP/memroot")
[ -n "$root" ] && [ ! -e "$root" ] || fail "the per-host memory tier $root is left behind"
# (n0's: it trained to the end, and the run joins its last background copy to the cloud before it ends;
# n1's own copy of step 5 races with its loss at step 5, so its directory may never have been made)
[ -s "$RUN/cloud/n0/manifest.json" ] || fail "the cloud tier of n0 is gone: $(ls "$RUN/cloud" 2>&1 | tr '\n' ' ')"

# two hosts lost one after the other: the last generation runs on the one host left
RUN2="$TMP/two.run"
AUTOHET_DUMP_PARAMS="$TMP/two.bin" timeout 120 "$BIN" run --plan "$TMP/plan.json" "${ARGS[@]}" --hostfile "$TMP/hostfile" \
  --preempt "$H1@4,$H2@8" --run-dir "$RUN2" --report "$TMP/two.json" >"$TMP/two.out" 2>&1
rc=$?
[ $rc = 0 ] || { tail -20 "$TMP/two.out"; fail "two losses: exit $rc"; }
out=$("$CMP" "$TMP/ref.bin" "$TMP/two.bin" 1e-5) || fail "two losses: parameters differ from the uninterrupted run: $out"
echo "3 namespace hosts, $H1 lost at step 4 and $H2 at step 8: parameters $out"
jq -e '.completed and .final_step == 12 and (.recoveries | length) == 2 and all(.recoveries[]; .steps_lost == 0)' \
  "$TMP/two.json" >/dev/null || { jq -c '.recoveries' "$TMP/two.json"; fail "two losses: report"; }
grep -q "=$H1 " "$RUN2/rankfile-1.txt" "$RUN2/rankfile-2.txt" && fail "two losses: a rank on $H1 after its loss"
[ "$(cut -d= -f2 "$RUN2/rankfile-2.txt" | cut -d' ' -f1 | sort -u)" = "$H0" ] \
  || fail "two losses: generation 2 is not on $H0 alone: $(cat "$RUN2/rankfile-2.txt")"

# a recovery server on its host: n0 has 2 GPUs; after host 2 is lost the replan at TP 2 fits only n0, so
# n1 (a survivor the plan leaves idle) serves its layers 3-6 from a server rank on its own host, and n0
# reshards them from TP 1 to TP 2
jq '.cluster.nodes[0].gpus = 2' "$TMP/plan.json" >"$TMP/plan-tp.json"
sed 's/slots=1/slots=2/' "$TMP/hostfile" >"$TMP/hostfile2"
RUN3="$TMP/srv.run"
AUTOHET_DUMP_PARAMS="$TMP/srv.bin" timeout 120 "$BIN" run --plan "$TMP/plan-tp.json" "${ARGS[@]}" --replan-tp 2 \
  --hostfile "$TMP/hostfile2" --preempt "$H2@5" --run-dir "$RUN3" --report "$TMP/srv.json" >"$TMP/srv.out" 2>&1
rc=$?
[ $rc = 0 ] || { tail -20 "$TMP/srv.out"; fail "server rank: exit $rc"; }
out=$("$CMP" "$TMP/ref.bin" "$TMP/srv.bin" 1e-5) || fail "server rank: parameters differ from the uninterrupted run: $out"
echo "3 namespace hosts, $H2 lost at step 5, a recovery server on $H1, TP 1 -> 2: parameters $out"
printf 'rank 0=%s slot=0\nrank 1=%s slot=1\nrank 2=%s slot=0\n' "$H0" "$H0" "$H1" >"$TMP/want-srv"
cmp -s "$TMP/want-srv" "$RUN3/rankfile-1.txt" || { diff "$TMP/want-srv" "$RUN3/rankfile-1.txt"; fail "server rank: rankfile"; }
jq -e '.generations[1].recovery_servers == 1 and .recoveries[0].steps_lost == 0 and .recoveries[0].bytes_by_tier.peer > 0' \
  "$TMP/srv.json" >/dev/null || fail "server rank: report: $(jq -c '.generations[1], .recoveries[0].bytes_by_tier' "$TMP/srv.json")"
jq -e 'any(.shards[]; .tier == "peer" and .holder == "n1" and .server == 2)' "$RUN3/recover-1.json" >/dev/null \
  || fail "server rank: no shard served by rank 2 from n1"

[ $fails = 0 ] && echo "cli_run_hosts: all passed"
exit $((fails > 0))
