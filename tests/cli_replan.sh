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

bad_input "no node 'n42'" replan "$TMP/p.json" --lost n42
bad_input "--lost is required" replan "$TMP/p.json"
bad_input "--lost" replan "$TMP/p.json" --lost "A100-40G-0,"
bad_input "one or the other" replan "$TMP/p.json" --lost "$name" --exact --fast
all=$(jq -r '[.cluster.nodes[].name] | join(",")' "$TMP/p.json")
bad_input "no replica survives" replan "$TMP/p.json" --lost "$all" --fast
bad_input "PLAN.json" replan --lost "$name"

[ $fails -eq 0 ] && echo "cli_replan: all passed"
exit $((fails > 0))
