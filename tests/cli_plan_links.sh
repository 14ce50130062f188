#!/usr/bin/env bash
# Per-link alpha-beta from a comm profile's links{} matrix (commbench --pairs hosts): three 1-GPU nodes on
# hosts ha, hb, hc; a 2-stage pipeline. With every pair at the inter-node class's figures the plan, its
# closed form and its simulation equal the class-only profile's; with the pair ha-hb slow (0.125 GB/s,
# 500 us) a pipeline on n0 -> n1 takes over 1.5x longer in the closed form and in the simulator (the two
# within 3% of each other), while the planner moves the pipeline off that pair at the class-only time (and
# a slow pair it never uses changes nothing). A 3-replica data-parallel ring crosses every pair: with
# ha-hb slow its all-reduce runs at that pair's bandwidth, in the simulator and the closed form alike; a
# 2-replica ring on n0, n2 is untouched. Bad matrices: one line naming the field, exit 2.
. "$(dirname "$0")/common.sh"
cat >"$TMP/inv.json" <<'EOF'
{"nodes": [{"name": "n0", "gpu": "A100-40G", "gpus": 1, "host": "ha"},
           {"name": "n1", "gpu": "A100-40G", "gpus": 1, "host": "hb"},
           {"name": "n2", "gpu": "A100-40G", "gpus": 1, "host": "hc"}]}
EOF
FITS='"fits": [{"op": "latency", "link_class": "intra-node", "alpha_us": 2, "beta_GBps": 50},
  {"op": "bw", "link_class": "intra-node", "alpha_us": 2, "beta_GBps": 50},
  {"op": "latency", "link_class": "inter-node", "alpha_us": 20, "beta_GBps": 5},
  {"op": "bw", "link_class": "inter-node", "alpha_us": 20, "beta_GBps": 5}]'
echo "{\"format\": \"autohet-comm-profile\", \"version\": 1, $FITS}" >"$TMP/class.json"
profile() { # out slow-a slow-b (-1 -1: every pair at the class's figures)
  jq --argjson a "$2" --argjson b "$3" '. + {links: {hosts: ["ha", "hb", "hc"],
      latency_us: [range(3) as $i | [range(3) as $j | if $i == $j then null
        elif ([$i, $j] | sort) == ([$a, $b] | sort) then 500 else 20 end]],
      bandwidth_GBps: [range(3) as $i | [range(3) as $j | if $i == $j then null
        elif ([$i, $j] | sort) == ([$a, $b] | sort) then 0.125 else 5 end]]}}' "$TMP/class.json" >"$1"
}
profile "$TMP/even.json" -1 -1
profile "$TMP/slow01.json" 0 1
profile "$TMP/slow02.json" 0 2
PLAN=(--model gpt3-1.3b --cluster "$TMP/inv.json" --global-batch 16 --pp 2 --dp 1 --quiet)
for p in class even slow01 slow02; do
  "$BIN" plan "${PLAN[@]}" --comm-profile "$TMP/$p.json" --json "$TMP/plan-$p.json" >"$TMP/plan-$p.out" 2>&1 \
    || { cat "$TMP/plan-$p.out"; fail "plan with $p.json"; }
done
nodes() { jq -c '[.replicas[].stages[].node_index]' "$1"; }
t() { jq '.iteration_time_s' "$1"; }
[ "$(nodes "$TMP/plan-class.json")" = "[0,1]" ] || fail "the class-only plan is not n0 -> n1: $(nodes "$TMP/plan-class.json")"
[ "$(t "$TMP/plan-even.json")" = "$(t "$TMP/plan-class.json")" ] && [ "$(nodes "$TMP/plan-even.json")" = "[0,1]" ] \
  || fail "links at the class's figures changed the plan: $(t "$TMP/plan-even.json") vs $(t "$TMP/plan-class.json")"
[ "$(nodes "$TMP/plan-slow02.json")" = "[0,1]" ] && [ "$(t "$TMP/plan-slow02.json")" = "$(t "$TMP/plan-class.json")" ] \
  || fail "a slow pair the pipeline does not cross changed the plan: $(nodes "$TMP/plan-slow02.json")"
jq -e '[.replicas[].stages[].node_index] | sort != [0, 1]' "$TMP/plan-slow01.json" >/dev/null \
  || fail "with ha-hb slow the planner kept the pipeline on n0 -> n1"
[ "$(t "$TMP/plan-slow01.json")" = "$(t "$TMP/plan-class.json")" ] \
  || fail "the pipeline moved off the slow pair should be as fast as before: $(t "$TMP/plan-slow01.json")"
echo "plans: class $(nodes "$TMP/plan-class.json"), ha-hb slow $(nodes "$TMP/plan-slow01.json"), ha-hc slow $(nodes "$TMP/plan-slow02.json")"

# the n0 -> n1 pipeline simulated on each profile: the slow pair costs what its alpha-beta says
for p in class even slow01 slow02; do
  "$BIN" simulate "$TMP/plan-class.json" --comm-profile "$TMP/$p.json" --json "$TMP/sim-$p.json" --quiet \
    >"$TMP/sim-$p.out" 2>&1 || { cat "$TMP/sim-$p.out"; fail "simulate with $p.json"; }
done
sim() { jq '.iteration_time_s' "$TMP/sim-$1.json"; }
cf() { jq '.closed_form_s' "$TMP/sim-$1.json"; }
[ "$(sim even)" = "$(sim class)" ] && [ "$(sim slow02)" = "$(sim class)" ] \
  || fail "simulated: links at the class's figures or an unused slow pair changed the time: $(sim class) $(sim even) $(sim slow02)"
# every micro-batch's activation and gradient cross the pair at 1/40 of the class's bandwidth
awk -v a="$(sim class)" -v b="$(sim slow01)" -v c="$(cf class)" -v d="$(cf slow01)" \
  'BEGIN { exit !(b > a * 1.5 && d > c * 1.5 && (b / d > 0.97 && b / d < 1.03)) }' \
  || fail "simulated / closed form on the slow pair: $(sim slow01) / $(cf slow01) s, want > 1.5 x $(sim class) / $(cf class) and within 3% of each other"
echo "n0 -> n1 simulated: class $(sim class) s, ha-hb slow $(sim slow01) s (closed form $(cf slow01) s)"
"$BIN" simulate "$TMP/plan-class.json" --comm-profile "$TMP/slow01.json" | grep -q "links between 3 hosts (per pair)" \
  || fail "simulate does not say it read the link matrix"

# the data-parallel ring: 3 replicas on n0, n1, n2 cross every pair, so a slow pair holds the all-reduce to
# its bandwidth (the simulator's ring uses the pairs' links; the closed form the ring's slowest pair); two
# replicas on n0 and n2 do not cross ha-hb
"$BIN" plan --model gpt3-1.3b --cluster "$TMP/inv.json" --global-batch 16 --pp 1 --dp 3 --quiet \
  --comm-profile "$TMP/class.json" --json "$TMP/dp3.json" || fail "plan --dp 3"
jq '.nodes |= [.[0], .[2]]' "$TMP/inv.json" >"$TMP/inv02.json"
"$BIN" plan --model gpt3-1.3b --cluster "$TMP/inv02.json" --global-batch 16 --pp 1 --dp 2 --quiet \
  --comm-profile "$TMP/class.json" --json "$TMP/dp2.json" || fail "plan --dp 2 on n0, n2"
for p in class slow01; do
  for d in dp3 dp2; do
    "$BIN" simulate "$TMP/$d.json" --comm-profile "$TMP/$p.json" --json "$TMP/sim-$d-$p.json" --quiet \
      >"$TMP/sim.out" 2>&1 || { cat "$TMP/sim.out"; fail "simulate $d with $p.json"; }
  done
done
s3c=$(jq .iteration_time_s "$TMP/sim-dp3-class.json") s3=$(jq .iteration_time_s "$TMP/sim-dp3-slow01.json")
c3=$(jq .closed_form_s "$TMP/sim-dp3-slow01.json")
awk -v a="$s3c" -v b="$s3" -v c="$c3" 'BEGIN { exit !(b > 5 * a && b / c > 0.99 && b / c < 1.01) }' \
  || fail "DP ring over the slow pair: simulated $s3 s (class $s3c s), closed form $c3 s"
[ "$(jq .iteration_time_s "$TMP/sim-dp2-slow01.json")" = "$(jq .iteration_time_s "$TMP/sim-dp2-class.json")" ] \
  || fail "a DP ring on n0, n2 was slowed by the pair ha-hb it does not cross"
echo "DP 3 ring: class $s3c s, over the slow pair $s3 s (closed form $c3 s)"

# a shared pair: two replicas of 2 stages, both stage 0s on ha and both stage 1s on hb, so two pipelines
# cross ha -> hb at once. Links measured with one flow only: their flows split its bandwidth. Links whose
# shared measurement (commbench --pairs hosts) carried 2x one flow's with flows at once: the step is
# shorter; with 10x and with 100x it is the same (no more than 10 flows cross at once, and a flow is never
# faster than one flow). Each pipeline alone is faster with the gain too (its tied exchange shares the pair
# with its sends), never faster than with the 10x gain.
cat >"$TMP/inv2.json" <<'EOF2'
{"nodes": [{"name": "m0", "gpu": "A100-40G", "gpus": 2, "host": "ha"},
           {"name": "m1", "gpu": "A100-40G", "gpus": 2, "host": "hb"}]}
EOF2
"$BIN" plan --model gpt3-1.3b --cluster "$TMP/inv2.json" --global-batch 16 --pp 2 --dp 2 --quiet --json "$TMP/x2.json" \
  || fail "plan --pp 2 --dp 2 on two 2-GPU nodes"
jq -e '[.replicas[].stages | map(.node_index)] == [[0, 1], [0, 1]]' "$TMP/x2.json" >/dev/null \
  || fail "the two replicas do not both cross m0 -> m1: $(jq -c '[.replicas[].stages | map(.node_index)]' "$TMP/x2.json")"
jq '.replicas |= .[0:1] | .global_batch = 8 | .train.global_batch = 8' "$TMP/x2.json" >"$TMP/x1.json"
shared() { # out gain (0: no shared measurement)
  jq --argjson g "$2" '. + {links: {hosts: ["ha", "hb"], latency_us: [[null, 500], [500, null]],
      bandwidth_GBps: [[null, 0.125], [0.125, null]]}}
    | if $g > 0 then .links += {shared_bandwidth_GBps: [[null, 0.1 * $g], [0.1 * $g, null]],
                                 shared_one_flow_GBps: [[null, 0.1], [0.1, null]], shared_flows: [[null, 2], [2, null]]}
      else . end' "$TMP/class.json" >"$1"
}
shared "$TMP/sh0.json" 0
shared "$TMP/sh2.json" 2
shared "$TMP/sh10.json" 10
shared "$TMP/sh100.json" 100
for x in x2 x1; do
  for g in 0 2 10 100; do
    "$BIN" simulate "$TMP/$x.json" --comm-profile "$TMP/sh$g.json" --json "$TMP/sim-$x-$g.json" --quiet \
      >"$TMP/sim.out" 2>&1 || { cat "$TMP/sim.out"; fail "simulate $x with sh$g.json"; }
  done
done
st() { jq .iteration_time_s "$TMP/sim-$1.json"; }
awk -v a="$(st x2-0)" -v b="$(st x2-2)" 'BEGIN { exit !(b < a * 0.95) }' \
  || fail "two flows on a pair measured to carry 2x one flow: $(st x2-2) s, not below the one-flow pair's $(st x2-0) s"
[ "$(st x2-100)" = "$(st x2-10)" ] && [ "$(st x1-100)" = "$(st x1-10)" ] \
  || fail "a 100x shared gain made flows faster than one flow: $(st x2-100) s against 10x's $(st x2-10) s"
awk -v a="$(st x2-2)" -v b="$(st x2-10)" -v c="$(st x1-0)" -v d="$(st x1-2)" -v e="$(st x1-10)" \
  'BEGIN { exit !(b <= a && d <= c && e <= d && e > 0) }' \
  || fail "more shared gain made a step slower: two pipelines 2x $(st x2-2) 10x $(st x2-10); one $(st x1-0) $(st x1-2) $(st x1-10) s"
echo "two pipelines across ha -> hb: one-flow links $(st x2-0) s, shared 2x $(st x2-2) s, 10x $(st x2-10) s; one pipeline $(st x1-0) s, $(st x1-2) s, $(st x1-10) s"
jq '.links |= del(.shared_one_flow_GBps)' "$TMP/sh2.json" >"$TMP/bad.json"
"$BIN" simulate "$TMP/x2.json" --comm-profile "$TMP/bad.json" --quiet >/dev/null 2>"$TMP/bad.err"; rc=$?
[ $rc = 2 ] && grep -q "links.shared_bandwidth_GBps: expected with links.shared_one_flow_GBps" "$TMP/bad.err" \
  || fail "a shared measurement without its one-flow half: exit $rc, '$(cat "$TMP/bad.err")'"

# bad matrices: one line naming the field, exit 2
bad() { # want jq-filter
  jq "$2" "$TMP/slow01.json" >"$TMP/bad.json"
  "$BIN" simulate "$TMP/plan-class.json" --comm-profile "$TMP/bad.json" --quiet >"$TMP/bad.out" 2>"$TMP/bad.err"
  local rc=$? err
  err=$(cat "$TMP/bad.err")
  [ $rc = 2 ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] && [[ "$err" == *"$1"* ]] \
    || fail "links $2: exit $rc and '$err', want exit 2 and one line with '$1'"
}
bad "links.latency_us[0][1]: expected a number from 0 to 1e+06 or null" '.links.latency_us[0][1] = "x"'
bad "links.bandwidth_GBps[1][0]: expected a number from 0.0001 to 1e+12 or null" '.links.bandwidth_GBps[1][0] = 0'
bad "links.bandwidth_GBps: expected an array of 3 rows" '.links.bandwidth_GBps |= .[0:2]'
bad "links.hosts[1]:" '.links.hosts[1] = "a b"'
bad "links.hosts: expected an array of host names" '.links.hosts = 3'
[ $fails = 0 ] && echo "cli_plan_links: all passed"
exit $((fails > 0))
