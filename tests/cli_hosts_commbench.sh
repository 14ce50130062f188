#!/usr/bin/env bash
# commbench between every pair of hosts in one run (--pairs hosts), across three hosts made of network
# namespaces (tests/tools/netns_hosts.sh; root, as CI runs), the third host's link throttled to 10 Mbit/s
# (tc tbf): the comm profile's links{} matrix names the hosts, has a latency and a bandwidth for every pair of
# hosts and for the hosts with two ranks, none for the host with one, and shows both links of the throttled
# host at under half the bandwidth (10 Mbit/s against veth: 100x apart on a quiet machine, 4x seen under
# load) of the unthrottled one; two flows at once across the throttled link carry what one does (the shared
# links); that profile given to autohet plan moves a pipeline off the throttled host's links. If the namespaces cannot be made the test fails with the reason.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/tools/netns_hosts.sh"
trap 'netns_down; [ -n "${KEEP:-}" ] && cp "$TMP/cb.json" "$KEEP"; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM

netns_up 3 || { fail "cannot make network-namespace hosts (see above): this test needs root and iproute2"; exit 1; }
netns_throttle 2 10mbit || { fail "cannot throttle a host's link (see above)"; exit 1; }
H0=${NETNS_HOSTS[0]} H1=${NETNS_HOSTS[1]} H2=${NETNS_HOSTS[2]}
# ranks 0 and 1 on H0, rank 2 on H1, ranks 3 and 4 on H2; the ranks outside a pair yield the cores while
# they wait (5 ranks on 2 cores); a 64 KiB message takes about 50 ms each way over the throttled link
timeout 120 mpirun -np 5 --host "$H0:2,$H1:1,$H2:2" --bind-to none --mca plm_rsh_agent "$NETNS_AGENT" \
  --mca mpi_yield_when_idle 1 \
  --mca oob_tcp_if_include "$NETNS_SUBNET" --mca btl tcp,self --mca btl_tcp_if_include "$NETNS_SUBNET" \
  "$BIN" commbench --pairs hosts --ops latency --min-size 1024 --max-size 65536 --iters 10 --json "$TMP/cb.json" >"$TMP/cb.out" 2>&1 \
  || { tail -20 "$TMP/cb.out"; fail "commbench --pairs hosts across 3 hosts"; exit 1; }
grep '^# ' "$TMP/cb.out" | tail -5

jq -e --arg a "$H0" --arg b "$H1" --arg c "$H2" '.hosts == [$a, $b, $c] and .links.hosts == [$a, $b, $c]' \
  "$TMP/cb.json" >/dev/null || fail "the profile does not name the 3 hosts in order"
jq -e '[.fits[] | .pair] == [[0,1],[3,4],[0,2],[0,3],[2,3]]' "$TMP/cb.json" >/dev/null \
  || fail "--pairs hosts: not H0's and H2's two ranks, then H0-H1, H0-H2, H1-H2: $(jq -c '[.fits[] | .pair]' "$TMP/cb.json")"
jq -e '.links as $l | [range(0; 3) as $a | range(0; 3) as $b | select($a != $b) |
         ($l.latency_us[$a][$b] >= 0) and ($l.bandwidth_GBps[$a][$b] > 0) and
         $l.latency_us[$a][$b] == $l.latency_us[$b][$a] and ($l.max_rel_error[$a][$b] >= 0)] | all' \
  "$TMP/cb.json" >/dev/null || fail "links: a pair of hosts without a latency (>= 0) and a positive bandwidth, both symmetric"
jq -e '.links.latency_us[0][0] >= 0 and .links.pairs[0][0] == [0,1] and .links.latency_us[1][1] == null and
       .links.pairs[2][2] == [3,4] and .links.pairs[1][2] == [2,3]' "$TMP/cb.json" >/dev/null \
  || fail "links: the diagonal (H0's and H2's two ranks measured, H1 has one) or the pairs are wrong"
# the shared links: H0 and H2 have two ranks each, so two flows stream across the throttled link at once and
# carry what one flow does (one token bucket: 0.5-1.4x, not the 2x of two links; the throttle and not the
# machine sets both, and a rank late to start by 0.2 s of a 0.44 s repetition still reads 0.7x); H1 has
# one rank, so its pairs have no shared measurement
jq -e '.links | .shared_flows[0][2] == 2 and .shared_flows[2][0] == 2 and .shared_flows[0][1] == null
       and .shared_flows[1][2] == null and .shared_bandwidth_GBps[0][1] == null
       and (.shared_bandwidth_GBps[0][2] / .shared_one_flow_GBps[0][2]) as $r | $r > 0.5 and $r < 1.4
       and .shared_message_bytes == 65536' "$TMP/cb.json" >/dev/null \
  || fail "shared links: $(jq -c '.links | {shared_flows, shared_bandwidth_GBps, shared_one_flow_GBps}' "$TMP/cb.json")"
grep -q "^# shared links" "$TMP/cb.out" || fail "commbench --pairs hosts printed no shared links"
jq -e '.links.bandwidth_GBps as $b | $b[0][2] < $b[0][1] / 2 and $b[1][2] < $b[0][1] / 2' "$TMP/cb.json" \
  >/dev/null || fail "links: the throttled host's links are not the slow ones: $(jq -c .links.bandwidth_GBps "$TMP/cb.json")"
grep -q "^# links between hosts" "$TMP/cb.out" || fail "commbench --pairs hosts printed no link matrix"
echo "link bandwidths (GB/s): $(jq -c .links.bandwidth_GBps "$TMP/cb.json"), latencies (us): $(jq -c .links.latency_us "$TMP/cb.json")"

# the measured links change the plan: three 1-GPU nodes, n0 on the throttled host H2, n1 on H0, n2 on H1; a
# 2-stage pipeline. Without the links{} matrix every inter-node pair costs the class's fit and the planner
# keeps its first pair n0 -> n1 (across the throttled link); with the measured matrix it moves the pipeline to
# n1, n2 (H0-H1), which is faster whenever the throttled host's link measures slower than H0-H1's at all (a
# much weaker condition than the 4x above, so the load of the machine cannot turn it). The planner needs a bw
# fit per class too: a short second run measures it on the unthrottled pairs (H0's two ranks, H0-H1).
timeout 60 mpirun -np 4 --host "$H0:2,$H1:1,$H2:1" --bind-to none --mca plm_rsh_agent "$NETNS_AGENT" \
  --mca mpi_yield_when_idle 1 \
  --mca oob_tcp_if_include "$NETNS_SUBNET" --mca btl tcp,self --mca btl_tcp_if_include "$NETNS_SUBNET" \
  "$BIN" commbench --pairs 0-1,0-2 --ops bw --min-size 1024 --max-size 65536 --iters 5 --json "$TMP/bw.json" \
  >"$TMP/bw.out" 2>&1 || { tail -20 "$TMP/bw.out"; fail "commbench --ops bw on the unthrottled pairs"; }
jq --slurpfile bw "$TMP/bw.json" '.fits += [$bw[0].fits[] | select(.op == "bw")]' "$TMP/cb.json" >"$TMP/measured.json"
jq 'del(.links)' "$TMP/measured.json" >"$TMP/nolinks.json"
cat >"$TMP/inv.json" <<EOF
{"nodes": [{"name": "n0", "gpu": "A100-40G", "gpus": 1, "host": "$H2"},
           {"name": "n1", "gpu": "A100-40G", "gpus": 1, "host": "$H0"},
           {"name": "n2", "gpu": "A100-40G", "gpus": 1, "host": "$H1"}]}
EOF
for p in measured nolinks; do
  "$BIN" plan --model gpt3-1.3b --cluster "$TMP/inv.json" --global-batch 16 --pp 2 --dp 1 --quiet \
    --comm-profile "$TMP/$p.json" --json "$TMP/plan-$p.json" >"$TMP/plan-$p.out" 2>&1 \
    || { cat "$TMP/plan-$p.out"; fail "plan --comm-profile $p.json"; }
done
nodes() { jq -c '[.replicas[].stages[].node_index] | sort' "$TMP/plan-$1.json"; }
[ "$(nodes nolinks)" = "[0,1]" ] || fail "without the links the plan is not on n0, n1 (across $H2): $(nodes nolinks)"
[ "$(nodes measured)" = "[1,2]" ] || fail "with the measured links the plan still crosses $H2's link: $(nodes measured)"
# the plan without the links, timed on the measured links, is the slower one
for p in measured nolinks; do
  "$BIN" simulate "$TMP/plan-$p.json" --comm-profile "$TMP/measured.json" --json "$TMP/sim-$p.json" --quiet \
    >"$TMP/sim.out" 2>&1 || { cat "$TMP/sim.out"; fail "simulate plan-$p on the measured links"; }
done
a=$(jq .iteration_time_s "$TMP/sim-measured.json") b=$(jq .iteration_time_s "$TMP/sim-nolinks.json")
awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b > a) }' \
  || fail "simulated on the measured links: the plan across $H2 takes $b s, the plan off it $a s"
echo "plans: without links $(nodes nolinks) ($b s on the measured links), with them $(nodes measured) ($a s)"

[ $fails = 0 ] && echo "cli_hosts_commbench: all passed"
exit $((fails > 0))
