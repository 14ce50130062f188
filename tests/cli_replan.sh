#!/usr/bin/env bash
# autohet replan: a plan for the survivors after nodes are lost. The fast replan keeps every replica whose
# nodes survive (the same stages, GPUs and layers), uses no lost node, deals every micro-batch; with the full
# search beside it (small clusters, or --exact) the faster is kept and both times are reported; bad input
# exits 2 with one line.
. "$(dirname "$0")/common.sh"

$BIN replan --help | grep -q usage || fail "replan --help"
$BIN plan --model gpt3-1.3b --cluster 4x8xA100-40G,2x8xH800 --global-batch 128 --quiet --json "$TMP/p.json" \
  || fail "plan"
# lose the node of the replica with the fewest nodes, so that others survive whole
lost=$(jq -r '[.replicas[] | [.stages[].node_index] | unique] | sort_by(length) | .[0][0] as $n | $n' "$TMP/p.json")
name=$(jq -r --argjson n "$lost" '.cluster.nodes[$n].name' "$TMP/p.json")
$BIN replan "$TMP/p.json" --lost "$name" --fast --json "$TMP/fast.json" >"$TMP/out" || fail "replan --fast"
grep -q "Replanned without the lost nodes in" "$TMP/out" || fail "no summary: $(cat "$TMP/out")"
jq -e --arg lost "$name" --slurpfile old "$TMP/p.json" '
  . as $new | ($old[0]) as $o |
  (.cluster.nodes | map(.name) | index($lost)) == null and
  ([.replicas[].micro_batches] | add) * .micro_batch == .global_batch and .iteration_time_s > 0 and
  .replan.kept == "fast replan" and (.replan | has("full_search_s") | not) and
  # every old replica that avoided the lost node is still there, stage for stage (nodes by name)
  all($o.replicas[] | select(all(.stages[]; $o.cluster.nodes[.node_index].name != $lost));
      . as $r | any($new.replicas[]; [.stages[] | [$new.cluster.nodes[.node_index].name, .gpus, .layers]] ==
                                      [$r.stages[] | [$o.cluster.nodes[.node_index].name, .gpus, .layers]]))' \
  "$TMP/fast.json" >/dev/null || fail "fast replan: $(jq -c '[.replan, [.replicas[] | .micro_batches]]' "$TMP/fast.json")"
# small cluster: the full search runs beside it; the kept plan is the faster of the two
$BIN replan "$TMP/p.json" --lost "$name" --quiet --json "$TMP/both.json" || fail "replan"
jq -e '.replan | has("full_search_s") and .fast_iteration_time_s > 0 and .full_iteration_time_s > 0' "$TMP/both.json" \
  >/dev/null || fail "replan on a small cluster: no full search"
jq -e '.iteration_time_s == ([.replan.fast_iteration_time_s, .replan.full_iteration_time_s] | min)' "$TMP/both.json" \
  >/dev/null || fail "replan: not the faster plan kept: $(jq -c .replan "$TMP/both.json")"
# losing two nodes: still a plan on what is left
two=$(jq -r '[.cluster.nodes[0].name, .cluster.nodes[5].name] | join(",")' "$TMP/p.json")
$BIN replan "$TMP/p.json" --lost "$two" --fast --quiet --json "$TMP/two.json" || fail "replan two nodes"
jq -e --arg a "${two%,*}" --arg b "${two#*,}" '(.cluster.nodes | map(.name)) as $n | ($n | index($a)) == null and
  ($n | index($b)) == null and ([.replicas[].micro_batches] | add) * .micro_batch == .global_batch' "$TMP/two.json" \
  >/dev/null || fail "replan of two nodes"

# replans computed ahead (plan --replans K): a loss of up to K nodes is looked up; the plan is the one the full
# search of the survivors returns (same search value, same evaluated time); a deeper loss is not in the table
$BIN plan --model gpt3-1.3b --cluster 4x8xA100-40G,2x8xH800 --global-batch 128 --replans 1 --json "$TMP/a.json" \
  >"$TMP/out" || fail "plan --replans"
grep -q "Replans computed ahead: 2 losses of up to 1 node (2 node classes)" "$TMP/out" || fail "plan --replans: $(tail -1 "$TMP/out")"
jq -e '.replans.depth == 1 and (.replans.entries | length) == 2 and all(.replans.entries[]; (.lost | length) == 1)' \
  "$TMP/a.json" >/dev/null || fail "plan --replans: $(jq -c '.replans | del(.entries[].replicas)' "$TMP/a.json")"
for lost in A100-40G-0 H800-1; do
  $BIN replan "$TMP/a.json" --lost "$lost" --exact --json "$TMP/ahead.json" >"$TMP/out" || fail "replan $lost (ahead)"
  grep -q "Computed ahead (plan --replans), looked up in" "$TMP/out" || fail "replan $lost: no lookup: $(cat "$TMP/out")"
  jq -e --arg lost "$lost" '.replan.kept == "computed ahead" and .replan.ahead_search_value_ns == .replan.full_search_value_ns and
    .replan.ahead_iteration_time_s == .replan.full_iteration_time_s and .iteration_time_s == .replan.ahead_iteration_time_s and
    (.cluster.nodes | map(.name) | index($lost)) == null' "$TMP/ahead.json" >/dev/null ||
    fail "replan $lost: not the full search's plan: $(jq -c .replan "$TMP/ahead.json")"
done
# deeper than the table: the entry of part of the loss, repaired for the rest (the fast replan of the whole loss
# only with --exact, to compare; the fastest is kept)
$BIN replan "$TMP/a.json" --lost A100-40G-0,H800-0 --fast --quiet --json "$TMP/deep.json" || fail "replan deeper than the table"
jq -e '(.replan | has("ahead_s") or has("fast_s") | not) and .replan.ahead_repair_iteration_time_s > 0 and
  .replan.kept == "computed ahead, repaired" and .iteration_time_s == .replan.ahead_repair_iteration_time_s and
  ([.replicas[].micro_batches] | add) * .micro_batch == .global_batch and
  (.cluster.nodes | map(.name) | (index("A100-40G-0") == null and index("H800-0") == null))' "$TMP/deep.json" >/dev/null ||
  fail "replan deeper than the table: $(jq -c .replan "$TMP/deep.json")"
$BIN replan "$TMP/a.json" --lost A100-40G-0,H800-0 --exact --quiet --json "$TMP/deep.json" || fail "replan deeper, --exact"
jq -e '.iteration_time_s == ([.replan.fast_iteration_time_s, .replan.ahead_repair_iteration_time_s,
  .replan.full_iteration_time_s] | min)' "$TMP/deep.json" >/dev/null ||
  fail "replan deeper, --exact: not the fastest kept: $(jq -c .replan "$TMP/deep.json")"
jq '.replans.entries[0].lost = ["nowhere"]' "$TMP/a.json" >"$TMP/bad.json"
bad_input 'replans.entries[0].lost[0]: no node "nowhere"' replan "$TMP/bad.json" --lost A100-40G-0
jq '.replans.entries[1].replicas |= sub("^(?<m>[0-9]+):[0-9]+/"; "\(.m):99/")' "$TMP/a.json" >"$TMP/bad.json"
bad_input "replans.entries[1].replicas: replica 0 stage 0: node index 99" replan "$TMP/bad.json" --lost A100-40G-0
bad_input "--replans 8: 3002 losses of up to 8 nodes to plan ahead over 6 node classes (at most 2000)" plan \
  --model gpt3-1.3b --cluster 8x8xA100-40G,8x8xH800,8x8xH20,8x8xV100-32G,8x8xA100-80G,8x8xH100-SXM --global-batch 64 \
  --replans 8 --quiet --json "$TMP/x.json"
bad_input "--replans: needs --json" plan --model gpt3-1.3b --cluster 4x8xA100-40G --global-batch 128 --replans 1
bad_input "--replans '9'" plan --model gpt3-1.3b --cluster 4x8xA100-40G --global-batch 128 --replans 9 --json "$TMP/x.json"
bad_input "--replans '0': expected an integer >= 1" plan --model gpt3-1.3b --cluster 4x8xA100-40G --global-batch 128 --replans 0 --json "$TMP/x.json"

bad_input "no node 'n42'" replan "$TMP/p.json" --lost n42
bad_input "--lost is required" replan "$TMP/p.json"
bad_input "--lost" replan "$TMP/p.json" --lost "A100-40G-0,"
bad_input "one or the other" replan "$TMP/p.json" --lost "$name" --exact --fast
all=$(jq -r '[.cluster.nodes[].name] | join(",")' "$TMP/p.json")
bad_input "no replica survives" replan "$TMP/p.json" --lost "$all" --fast
bad_input "PLAN.json" replan --lost "$name"

[ $fails -eq 0 ] && echo "cli_replan: all passed"
exit $((fails > 0))
