#!/usr/bin/env bash
# End-to-end checks of `autohet plan`: outputs, the JSON document, baselines,
# measured profiles, and one-line errors with exit code 2 on bad input.
set -uo pipefail
BIN="$1"
FIX="$2"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_error PATTERN -- command...: exit 2, exactly one stderr line matching PATTERN
expect_error() {
  local pat="$1"; shift; shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $*"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "expected one stderr line: $* => $(cat "$TMP/err")"
  grep -q -- "$pat" "$TMP/err" || fail "stderr lacks '$pat': $* => $(cat "$TMP/err")"
}

# --help everywhere
for cmd in "" plan devices models simulate train profile run preempt spot-sim analyze commbench; do
  $BIN $cmd --help >"$TMP/h" 2>&1 || fail "autohet $cmd --help exited non-zero"
  grep -qi usage "$TMP/h" || fail "autohet $cmd --help prints no usage"
done
for cmd in devices models; do
  $BIN $cmd --help | grep -q "^exit status: 0 success, 2 bad input" || fail "autohet $cmd --help lacks the exit status"
done
# devices and models: bad arguments name the flag
expect_error "unknown or incomplete option '\-\-bogus'" -- $BIN devices --bogus
expect_error "unknown or incomplete option '\-\-devices'" -- $BIN devices --devices
echo '{"devices": [{"name": "H20", "efficiency": 0.6}]}' >"$TMP/dev1.json"
expect_error "\-\-devices given twice" -- $BIN devices --devices "$TMP/dev1.json" --devices "$TMP/dev1.json"
$BIN devices --devices "$TMP/dev1.json" | grep -qE "^H20 .* 0\.6 +1$" || fail "devices --devices did not apply the file"
expect_error "takes no arguments (got 'x')" -- $BIN models x
$BIN devices | grep "H800" >/dev/null || fail "devices lists no H800"
# a device's own figures as given (0.008 TFLOP/s printed 0.0, 2.5 GB/s 2)
$BIN devices --devices "$FIX/emu-devices.json" | grep -qE "^emu-slow +0\.004 +4 +2\.5 " \
  || fail "devices: emu-slow's figures: $($BIN devices --devices "$FIX/emu-devices.json" | grep emu-slow)"
$BIN models | grep "llama2-70b" >/dev/null || fail "models lists no llama2-70b"

# a plan with the document's required fields
$BIN plan --model gpt3-2.7b --cluster 1x8xA100-40G,1x8xH20 --global-batch 64 --seq 1024 \
  --json "$TMP/p.json" >"$TMP/table" || fail "plan exited non-zero"
grep -q "Predicted iteration time" "$TMP/table" || fail "table lacks the predicted iteration time"
jq -e '.format == "autohet-plan" and .version == 2 and (.iteration_time_s > 0) and (.tokens_per_s > 0)
       and ([.replicas[].stages[].tp] | all(. >= 1)) and (.micro_batch >= 1) and .global_batch == 64 and (.planning_time_s >= 0)
       and (.replicas | length) >= 1' "$TMP/p.json" >/dev/null || fail "plan JSON lacks required fields"
# every replica covers all layers exactly once, and samples add up to the global batch
jq -e '(.model.num_layers_total) as $L | [.replicas[] | [.stages[] | .layers] ] |
       all(.[0][0] == 0 and .[-1][1] == $L and ([range(1; length) as $i | .[$i][0] == .[$i-1][1]] | all))' \
  "$TMP/p.json" >/dev/null || fail "replicas do not cover the layers contiguously"
jq -e '([.replicas[].micro_batches] | add) * .micro_batch == .global_batch' "$TMP/p.json" >/dev/null \
  || fail "micro-batches do not add up to the global batch"
jq -e '[.replicas[].stages[] | (.memory_bytes <= .memory_capacity_bytes) and (.gpus | length) > 0
        and (.node | type) == "string" and (.gpu_type | type) == "string"] | all' "$TMP/p.json" >/dev/null \
  || fail "stage fields missing or memory over capacity"

# --compare: autohet is never slower than the baselines under the same model
$BIN plan --model gpt3-6.7b --cluster 2x8xA100-40G,1x8xH800,2x8xH20 --global-batch 256 --compare \
  --json "$TMP/c.json" >"$TMP/ct" || fail "plan --compare exited non-zero"
grep -q "megatron" "$TMP/ct" || fail "comparison table lacks megatron"
jq -e '.comparison.megatron.iteration_time_s >= .iteration_time_s and
       .comparison.proportional.iteration_time_s >= .iteration_time_s' "$TMP/c.json" >/dev/null \
  || fail "autohet slower than a baseline, or comparison missing"
for b in megatron proportional; do
  $BIN plan --model llama2-7b --cluster 2x8xA100-80G --global-batch 128 --baseline $b --json "$TMP/b.json" \
    --quiet || fail "--baseline $b failed"
  jq -e --arg b $b '.strategy == $b' "$TMP/b.json" >/dev/null || fail "--baseline $b: wrong strategy"
done

# LLaMA config.json and an inventory file
$BIN plan --model "$FIX/../../examples/llama-config.json" --cluster "$FIX/../../examples/inventory-mixed.json" \
  --global-batch 128 --quiet --json "$TMP/l.json" || fail "plan from config.json + inventory failed"
jq -e '.model.arch == "llama" and (.cluster.nodes | length) == 5' "$TMP/l.json" >/dev/null \
  || fail "llama config / inventory not reflected in the plan"

# real measured profiles (Sailor, GPT-Neo-2.7B)
$BIN plan --model gpt-neo-2.7b --cluster 2x8xA100-40G,1x8xV100-16G --profile "$FIX/sailor/GPT-Neo-2.7" \
  --global-batch 128 --quiet --json "$TMP/s.json" || fail "plan with the Sailor profile failed"
jq -e '.profile_source | startswith("measured")' "$TMP/s.json" >/dev/null || fail "profile source not recorded"

# a given configuration is reproduced exactly: --tp, --pp (lists too), --micro-batch
$BIN plan --model gpt3-2.7b --cluster 2x8xA100-40G --global-batch 64 --tp 2 --pp 4 --micro-batch 1 \
  --quiet --json "$TMP/fixed.json" || fail "plan --tp 2 --pp 4 exited non-zero"
jq -e '.tp == 2 and .micro_batch == 1 and ([.replicas[].stages | length] | all(. == 4))' "$TMP/fixed.json" \
  >/dev/null || fail "--tp 2 --pp 4 --micro-batch 1 not honoured"
$BIN plan --model gpt3-2.7b --cluster 2x8xA100-40G --global-batch 64 --tp 1,2 --pp 2,8 --quiet \
  --json "$TMP/lists.json" || fail "plan --tp 1,2 --pp 2,8 exited non-zero"
jq -e '(.tp == 1 or .tp == 2) and ([.replicas[].stages | length] | all(. == 2 or . == 8))' "$TMP/lists.json" \
  >/dev/null || fail "--tp/--pp lists not honoured"
# --top K: distinct plans, ranked; --verify K: closed form vs simulation with a ranking summary
$BIN plan --model gpt3-2.7b --cluster 1x8xA100-40G,1x8xH800 --global-batch 128 --top 6 --verify 6 --quiet \
  --json "$TMP/top.json" || fail "plan --top --verify exited non-zero"
jq -e '(.top | length) >= 2 and ([.top[].iteration_time_s] | . == sort) and
       ([.top[] | tostring] | unique | length) == (.top | length) and
       (.verify_summary.kendall_tau >= -1) and (.verify_summary.worst_abs_error >= 0) and
       (.verify | length) == (.top | length)' "$TMP/top.json" >/dev/null \
  || fail "--top/--verify JSON: ranked distinct plans and a verify summary expected"
# --verify --quiet without --json: not silent, the one-line summary (the JSON run above printed nothing)
$BIN plan --model gpt3-2.7b --cluster 1x8xA100-40G,1x8xH800 --global-batch 128 --top 6 --verify 6 --quiet \
  --json "$TMP/top2.json" >"$TMP/vq-json.out" || fail "plan --verify --quiet --json exited non-zero"
[ ! -s "$TMP/vq-json.out" ] || fail "--quiet --json printed: $(head -2 "$TMP/vq-json.out")"
$BIN plan --model gpt3-2.7b --cluster 1x8xA100-40G,1x8xH800 --global-batch 128 --verify 6 --quiet \
  >"$TMP/vq.out" || fail "plan --verify --quiet exited non-zero"
tau=$(jq '.verify_summary.kendall_tau * 1000 | round / 1000' "$TMP/top.json")
[ "$(wc -l <"$TMP/vq.out")" -eq 1 ] && grep -q "^Verification: 6 candidates simulated (1F1B); worst |error| [0-9.]*% (rank [0-9]*); ranking agreement Kendall tau " "$TMP/vq.out" \
  || fail "--verify --quiet without --json: expected one summary line, got: $(cat "$TMP/vq.out")"
awk -v t="$tau" '{ for (i = 1; i <= NF; i++) if ($i == "tau") v = $(i+1) + 0 } END { exit !((v - t) ^ 2 < 1e-6) }' \
  "$TMP/vq.out" || fail "--verify --quiet: Kendall tau differs from the JSON's ($tau)"
# the closed form gives each bucket its holders' link: on 16 GPUs of A100 + H20 a bucket reduced inside the H20 node
# (NVLink) no longer waits behind one that crosses the network (2.25% pessimistic when they shared one link)
$BIN plan --model bert-large --cluster 1x8xA100-40G,1x8xH20 --global-batch 512 --seq 512 --verify 20 --quiet \
  >"$TMP/vb.out" || fail "plan --verify (bert-large) exited non-zero"
awk '{ for (i = 1; i <= NF; i++) if ($i == "|error|") v = $(i+1) + 0 } END { exit !(v > 0 && v <= 1.0) }' "$TMP/vb.out" \
  || fail "bert-large on A100 + H20: closed form vs simulation: $(cat "$TMP/vb.out")"
# the tied exchange at its message's measured time in both models, between nodes from GPU to NIC: a comm
# profile whose streaming fit is slower than its one-message fit (1 GB/s against 100 GB/s on a node) put the
# simulator's tied exchange on the 1 GB/s NVLink figure, 11.9% off the closed form
cat >"$TMP/slowbw.json" <<'EOF2'
{"format": "autohet-comm-profile", "version": 2, "fits": [
 {"op": "latency", "link_class": "intra-node", "alpha_us": 2.5, "beta_GBps": 100},
 {"op": "bw", "link_class": "intra-node", "alpha_us": 3, "beta_GBps": 1},
 {"op": "latency", "link_class": "inter-node", "alpha_us": 20, "beta_GBps": 5},
 {"op": "bw", "link_class": "inter-node", "alpha_us": 25, "beta_GBps": 10}]}
EOF2
$BIN plan --model gpt3-6.7b --cluster 2x8xA100-40G,1x8xH800 --global-batch 256 --comm-profile "$TMP/slowbw.json" \
  --verify 5 --quiet >"$TMP/vs.out" || fail "plan --verify --comm-profile exited non-zero"
awk '{ for (i = 1; i <= NF; i++) if ($i == "|error|") v = $(i+1) + 0 } END { exit !(v > 0 && v <= 1.5) }' "$TMP/vs.out" \
  || fail "tied exchange priced apart by the closed form and the simulation: $(cat "$TMP/vs.out")"
# the plan carries its --mem-reserve: a plan that fits only without the reserve simulates as planned (simulate
# took the default 2 GiB and refused it), and a bad reserve in a document is refused naming the field
$BIN plan --model llama2-13b --cluster 1x8xA100-40G --global-batch 64 --mem-reserve 0 --quiet --json "$TMP/r0.json" \
  || fail "plan --mem-reserve 0 exited non-zero"
jq -e '.train.mem_reserve_gib == 0 and ([.replicas[].stages[] | .memory_bytes / .memory_capacity_bytes] | max > 0.95)' \
  "$TMP/r0.json" >/dev/null || fail "--mem-reserve 0: no stage above 95% of its GPU, or no train.mem_reserve_gib"
$BIN simulate "$TMP/r0.json" >"$TMP/r0.out" 2>&1 || fail "simulate of a --mem-reserve 0 plan: $(tail -1 "$TMP/r0.out")"
jq '.train.mem_reserve_gib = -1' "$TMP/r0.json" >"$TMP/r-bad.json"
$BIN simulate "$TMP/r-bad.json" >/dev/null 2>"$TMP/r-bad.err"
[ $? = 2 ] && grep -q "train.mem_reserve_gib: -1: expected GiB" "$TMP/r-bad.err" \
  || fail "a bad train.mem_reserve_gib: $(cat "$TMP/r-bad.err")"
# --dp: an exact number of replicas (or one of a list); replicas never trimmed away
$BIN plan --model gpt3-2.7b --cluster 1x8xA100-40G,1x8xH800 --global-batch 128 --dp 3 --quiet \
  --json "$TMP/dp3.json" || fail "plan --dp 3 exited non-zero"
jq -e '(.replicas | length) == 3 and ([.replicas[].micro_batches] | all(. >= 1))' "$TMP/dp3.json" >/dev/null \
  || fail "--dp 3 not honoured"
$BIN plan --model gpt3-2.7b --cluster 1x8xA100-40G,1x8xH800 --global-batch 128 --dp 1,5 --tp 2 --quiet \
  --json "$TMP/dp15.json" || fail "plan --dp 1,5 exited non-zero"
jq -e '((.replicas | length) == 1 or (.replicas | length) == 5) and .tp == 2' "$TMP/dp15.json" >/dev/null \
  || fail "--dp 1,5 --tp 2 not honoured"
# --objective cost: prices from the shorthand ($ per node-hour) or the inventory; never dearer than the
# fastest plan, never faster; both report the cost
CL='1x8xA100-40G$32.77,1x8xH800$60,2x8xH20$20'
$BIN plan --model gpt3-6.7b --cluster "$CL" --global-batch 256 --quiet --json "$TMP/ot.json" \
  || fail "plan with prices exited non-zero"
$BIN plan --model gpt3-6.7b --cluster "$CL" --global-batch 256 --objective cost --json "$TMP/oc.json" >"$TMP/oc" \
  || fail "plan --objective cost exited non-zero"
grep -q "per 1M tokens" "$TMP/oc" || fail "table lacks the cost"
jq -e '.objective == "cost" and .cost_per_iteration_usd > 0 and .cost_per_mtoken_usd > 0' "$TMP/oc.json" \
  >/dev/null || fail "cost JSON fields missing"
jq -en --slurpfile t "$TMP/ot.json" --slurpfile c "$TMP/oc.json" \
  '$t[0].objective == "time" and $c[0].cost_per_iteration_usd <= $t[0].cost_per_iteration_usd and
   $c[0].iteration_time_s >= $t[0].iteration_time_s and
   ($t[0].cost_per_iteration_usd - $t[0].iteration_time_s * $t[0].price_per_hour_usd / 3600 | fabs) < 1e-9' \
  >/dev/null || fail "--objective cost dearer than the fastest plan, or cost not time x price / 3600"
cat >"$TMP/priced.json" <<'EOF'
{"nodes": [{"name": "a", "gpu": "A100-80G", "gpus": 8, "count": 2, "price_per_hour": 40},
           {"name": "v", "gpu": "V100-32G", "gpus": 8, "count": 2, "price_per_hour": 12}]}
EOF
$BIN plan --model gpt3-2.7b --cluster "$TMP/priced.json" --global-batch 128 --objective cost --top 3 --quiet \
  --json "$TMP/pc.json" || fail "plan --objective cost on an inventory exited non-zero"
jq -e '(.top | length) >= 2 and ([.top[].cost_per_iteration_usd] | all(. > 0)) and
       .cost_per_iteration_usd == .top[0].cost_per_iteration_usd' "$TMP/pc.json" >/dev/null \
  || fail "--objective cost --top: costed plans expected"

# the planner's pick simulates no slower than Metis's plan on the peer pools (bench/peer-plans); on
# 16 A100 + 16 V100 the pick mixes degrees (TP 1 replicas beside TP 2 ones) and beats every one-degree plan;
# simulated as the planner costs them: the buckets' all-reduces overlapped with the backward (--overlap-dp)
PEER="$FIX/../../bench/peer-plans"
PEER_ARGS=(--model opt-350m --cluster 4x4xA100-40G,4x4xV100-16G --global-batch 1024 --seq 2048
  --devices "$PEER/gcp-devices.json" --profile "$FIX/sailor/OPT-350" --quiet)
$BIN plan "${PEER_ARGS[@]}" --json "$TMP/opt.json" || fail "plan on the 16+16 peer pool exited non-zero"
$BIN simulate "$PEER/metis-opt350-16xA100-16xV100.json" --devices "$PEER/gcp-devices.json" \
  --profile "$FIX/sailor/OPT-350" --overlap-dp --quiet --json "$TMP/metis.sim.json" || fail "simulate of the Metis plan failed"
$BIN simulate "$TMP/opt.json" --devices "$PEER/gcp-devices.json" --profile "$FIX/sailor/OPT-350" --overlap-dp \
  --quiet --json "$TMP/opt.sim.json" || fail "simulate of the planner's pick failed"
jq -en --slurpfile a "$TMP/opt.sim.json" --slurpfile b "$TMP/metis.sim.json" \
  '$a[0].iteration_time_s <= $b[0].iteration_time_s' >/dev/null \
  || fail "autohet's pick simulates slower than Metis's plan on 16 A100 + 16 V100"
[ "$(jq '[.replicas[].stages[].tp] | unique | length' "$TMP/opt.json")" -gt 1 ] \
  || fail "the 16+16 pick no longer mixes TP degrees"
for t in 1 2 4; do
  $BIN plan "${PEER_ARGS[@]}" --tp $t --json "$TMP/opt.tp$t.json" || fail "plan --tp $t on the peer pool"
  $BIN simulate "$TMP/opt.tp$t.json" --devices "$PEER/gcp-devices.json" --profile "$FIX/sailor/OPT-350" \
    --overlap-dp --quiet --json "$TMP/opt.tp$t.sim.json" || fail "simulate of the --tp $t plan"
  jq -en --slurpfile a "$TMP/opt.sim.json" --slurpfile b "$TMP/opt.tp$t.sim.json" \
    '$a[0].iteration_time_s <= $b[0].iteration_time_s' >/dev/null \
    || fail "the mixed-degree pick simulates slower than the --tp $t plan"
done
# --tp 2 forces every stage to degree 2
$BIN plan "${PEER_ARGS[@]}" --tp 2 --json "$TMP/opt.tp2.json" || fail "plan --tp 2"
jq -e '[.replicas[].stages[].tp] | unique == [2]' "$TMP/opt.tp2.json" >/dev/null \
  || fail "--tp 2 must put every stage at degree 2"

# bad input: one line, exit 2
expect_error "unknown GPU type 'B200'" -- $BIN plan --model gpt3-1.3b --cluster 1x8xB200 --global-batch 8
# "does not fit" says what would make it fit, and that is true
expect_error "does not fit this cluster.*; with --recompute full it fits (" -- $BIN plan --model llama2-70b \
  --cluster 2x8xA100-80G --global-batch 64 --seq 4096
$BIN plan --model llama2-70b --cluster 2x8xA100-80G --global-batch 64 --seq 4096 --recompute full --quiet \
  >/dev/null 2>"$TMP/err" || fail "llama2-70b with --recompute full: $(cat "$TMP/err")"
expect_error "neither --recompute full nor --dist-optimizer makes it fit" -- $BIN plan --model llama2-70b \
  --cluster 1x8xA100-80G --global-batch 64 --seq 4096
# a GPU type the measured profile has no data for is an error, not a plan on the other GPUs alone
expect_error "has no data for GPU 'H800' (2 nodes of the cluster, first H800-0)" -- $BIN plan --model opt-350m \
  --cluster 2x4xA100-40G,2x4xH800 --global-batch 64 --seq 2048 --profile "$FIX/sailor/OPT-350"
# a Sailor directory's file named after a GPU that only --devices defines loads (as the JSON format does)
mkdir -p "$TMP/gh-prof"
cp "$FIX/sailor/OPT-350/A100-40.json" "$TMP/gh-prof/GH-96.json"
echo '{"devices": [{"name": "GH-96", "peak_tflops": 989, "mem_gib": 96, "mem_bw_gbs": 4000, "intra_bw_gbs": 450, "nic_gbit": 200}]}' \
  >"$TMP/gh-devices.json"
$BIN plan --model opt-350m --cluster 2x4xGH-96 --global-batch 64 --seq 2048 --profile "$TMP/gh-prof" \
  --devices "$TMP/gh-devices.json" --quiet --json "$TMP/gh.json" >"$TMP/gh.out" 2>&1 || fail "plan on GH-96: $(cat "$TMP/gh.out")"
[ "$(jq '[.replicas[].stages[].gpus | length] | add' "$TMP/gh.json" 2>/dev/null)" = 8 ] \
  || fail "plan on GH-96: not every GPU used: $(jq -c '.replicas' "$TMP/gh.json" | head -c 300)"
expect_error "has no data for GPU 'GH-96'" -- $BIN plan --model opt-350m --cluster 2x4xGH-96 --global-batch 64 \
  --seq 2048 --profile "$FIX/sailor/OPT-350" --devices "$TMP/gh-devices.json"
expect_error "unknown model" -- $BIN plan --model gpt5 --cluster 1x8xA100-40G --global-batch 8
expect_error "not divisible" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 10 --micro-batch 4
expect_error "does not fit" -- $BIN plan --model gpt3-175b --cluster 1x8xT4 --global-batch 8
expect_error "GiB per GPU" -- $BIN plan --model gpt3-175b --cluster 1x8xT4 --global-batch 8
echo '{"hidden_size": 12' >"$TMP/bad.json"
expect_error "bad.json" -- $BIN plan --model "$TMP/bad.json" --cluster 1x8xA100-40G --global-batch 8
echo '{"nodes":[{"gpu":"A100-40G"}]}' >"$TMP/inv.json"
expect_error "inv.json" -- $BIN plan --model gpt3-1.3b --cluster "$TMP/inv.json" --global-batch 8
expect_error "H800" -- $BIN plan --model gpt-neo-2.7b --cluster 1x8xH800 --profile "$FIX/sailor/GPT-Neo-2.7" --global-batch 8
expect_error "layers" -- $BIN plan --model gpt3-2.7b --cluster 1x8xA100-40G --profile "$FIX/sailor/OPT-350" --global-batch 8
expect_error "global-batch" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G
expect_error "global-batch" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch abc
expect_error "tp" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --tp 3
expect_error "\-\-tp '1,,2'" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --tp 1,,2
expect_error "\-\-pp 40" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --pp 40
expect_error "needs at least 32 GPUs" -- $BIN plan --model gpt3-2.7b --cluster 2x8xA100-40G --global-batch 64 --pp 4 --tp 8
expect_error "\-\-precision" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --precision fp64
expect_error "\-\-p2p" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --p2p sometimes
expect_error "\-\-dp 64 needs at least 64 TP groups" -- $BIN plan --model gpt3-2.7b --cluster 2x8xA100-40G --global-batch 64 --dp 64
expect_error "\-\-dp 8 needs at least 8 micro-batches" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --micro-batch 2 --dp 8
expect_error "\-\-dp 4 with \-\-pp 8" -- $BIN plan --model gpt3-2.7b --cluster 2x8xA100-40G --global-batch 64 --dp 4 --pp 8 --tp 1
expect_error "\-\-dp fits" -- $BIN plan --model gpt3-2.7b --cluster 1x8xA100-40G --global-batch 64 --dp 8 --tp 1
expect_error "\-\-dp '0'" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --dp 0
expect_error "\-\-dp '2,x'" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --dp 2,x
expect_error "\-\-objective 'money'" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --objective money
expect_error "node 'H20-0' has no price" -- $BIN plan --model gpt3-1.3b --cluster '1x8xA100-40G$30,1x8xH20' --global-batch 8 --objective cost
expect_error "price '\$abc'" -- $BIN plan --model gpt3-1.3b --cluster '1x8xA100-40G$abc' --global-batch 8
echo '{"nodes":[{"name":"p","gpu":"H20","gpus":8,"price_per_hour":9},{"name":"q","gpu":"H20","gpus":8}]}' >"$TMP/half.json"
expect_error "node 'q' has no price" -- $BIN plan --model gpt3-1.3b --cluster "$TMP/half.json" --global-batch 8 --objective cost
echo '{"nodes":[{"gpu":"H20","gpus":8,"price_per_hour":"cheap"}]}' >"$TMP/pr.json"
expect_error "price_per_hour" -- $BIN plan --model gpt3-1.3b --cluster "$TMP/pr.json" --global-batch 8
# a sequence beyond the model's learned position table: no plan the engine could train (RoPE models have none)
bad_input "--seq 16384 exceeds the 2048 learned positions of model gpt3-1.3b" plan --model gpt3-1.3b \
  --cluster 2x8xA100-80G --global-batch 64 --seq 16384
echo '{"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}' \
  >"$TMP/gpt2-config.json"
bad_input "--seq 8192 exceeds the 1024 learned positions" plan --model "$TMP/gpt2-config.json" --cluster 1x8xA100-80G \
  --global-batch 8 --seq 8192
$BIN plan --model "$TMP/gpt2-config.json" --cluster 1x8xA100-80G --global-batch 8 --seq 1024 --quiet >/dev/null \
  || fail "plan at the GPT-2 config's own 1024 positions"
$BIN plan --model "$FIX/../../examples/llama-config.json" --cluster 2x8xA100-80G --global-batch 8 --seq 8192 --quiet \
  >/dev/null || fail "plan of a RoPE model at --seq 8192 (beyond its max_position_embeddings 4096)"
$BIN plan --model gpt3-1.3b --cluster 1x8xA100-80G --global-batch 8 --seq 2048 --quiet --json "$TMP/s2048.json" \
  || fail "plan at gpt3-1.3b's 2048 positions"
jq '.train.seq = 4096' "$TMP/s2048.json" >"$TMP/s4096.json"
bad_input "train.seq: 4096 exceeds the 2048 learned positions of model gpt3-1.3b" simulate "$TMP/s4096.json"
# absurd model sizes are refused at once, not searched for minutes (100,000 blocks took 55 s)
jq '.num_hidden_layers = 100000' "$FIX/../../examples/llama-config.json" >"$TMP/layers.json"
SECONDS=0
bad_input "num_hidden_layers: 100000 out of range [1, 1024]" plan --model "$TMP/layers.json" --cluster 2x8xA100-80G \
  --global-batch 64
[ $SECONDS -le 5 ] || fail "plan took $SECONDS s to refuse 100,000 blocks"
jq '.model = {"name": "x", "arch": "gpt", "hidden": 64, "n_layers": 5000, "n_heads": 4, "ffn_hidden": 256,
              "vocab": 100, "max_positions": 2048, "tied_embeddings": true}' "$TMP/s2048.json" >"$TMP/layers-plan.json"
bad_input "model.n_layers: 5000 out of range [1, 1024]" simulate "$TMP/layers-plan.json"
# an inventory whose plan simulate would refuse (a repeated node name), or a field that would be ignored
echo '{"nodes":[{"name":"a","gpu":"A100-80G","gpus":8},{"name":"a","gpu":"H100","gpus":8}]}' >"$TMP/dup.json"
bad_input "nodes[1].name: duplicate node name 'a' (also nodes[0])" plan --model gpt3-1.3b --cluster "$TMP/dup.json" \
  --global-batch 64 --json "$TMP/dup-plan.json"
[ -e "$TMP/dup-plan.json" ] && fail "plan wrote a plan from an inventory with a repeated node name"
echo '{"nodes":[{"gpu":"A100-80G","gpus":8}],"extra":1}' >"$TMP/extra.json"
bad_input "unknown field 'extra'" plan --model gpt3-1.3b --cluster "$TMP/extra.json" --global-batch 8
echo '{"nodes":[{"gpu":"A100-80G","gpu_type":"H100","gpus":8}]}' >"$TMP/both.json"
bad_input "nodes[0].gpu_type: 'gpu' and 'gpu_type' are one field" plan --model gpt3-1.3b --cluster "$TMP/both.json" \
  --global-batch 8
# --help shows every option with its real default
$BIN plan --help >"$TMP/help"
for opt in --model --cluster --global-batch --seq --micro-batch --tp --pp --dp --objective --recompute --profile \
  --devices --baseline --compare --json --mem-reserve --max-stages --max-mixed-stages --max-mixed-types --verify \
  --top --comm-profile --quiet --precision --p2p --dist-optimizer; do
  grep -q -- "^  $opt " "$TMP/help" || fail "plan --help does not describe $opt"
done
grep -q "default 2048" "$TMP/help" && grep -q "default time" "$TMP/help" && grep -q "default 32" "$TMP/help" \
  || fail "plan --help lacks the defaults"
expect_error "unknown or incomplete option" -- $BIN plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --frobnicate

# cost-model options: recorded in the plan document, absent = bf16 / overlapped / replicated
$BIN plan --model gpt3-1.3b --cluster 2x8xA100-40G --global-batch 32 --quiet --json "$TMP/o0.json" || fail "plan (defaults)"
jq -e '.train.precision == "bf16" and .train.p2p == "overlapped" and .train.dist_optimizer == false' \
  "$TMP/o0.json" >/dev/null || fail "default train.precision / p2p / dist_optimizer not written"
$BIN plan --model gpt3-1.3b --cluster 2x8xA100-40G --global-batch 32 --quiet --json "$TMP/o1.json" \
  --precision fp32 --p2p blocking --dist-optimizer --recompute full || fail "plan --precision fp32 --p2p blocking"
jq -e '.train.precision == "fp32" and .train.p2p == "blocking" and .train.dist_optimizer == true' \
  "$TMP/o1.json" >/dev/null || fail "train.precision / p2p / dist_optimizer not recorded"
jq -e '.hw_tflops_per_gpu > .tflops_per_gpu' "$TMP/o1.json" >/dev/null \
  || fail "hardware TFLOP/s must count the recomputed forward"
jq -e '.iteration_time_s > 1.5 * input.iteration_time_s' "$TMP/o1.json" "$TMP/o0.json" >/dev/null \
  || fail "fp32 (TF32 peak, 4-byte elements) should be much slower than bf16"
jq 'del(.train.precision, .train.p2p, .train.dist_optimizer)' "$TMP/o0.json" >"$TMP/o0old.json"
$BIN simulate "$TMP/o0old.json" --quiet --json "$TMP/o0old.sim.json" || fail "a plan without the new fields must read"
$BIN plan --model gpt3-1.3b --cluster 2x8xA100-40G --global-batch 32 --p2p blocking | grep "p2p blocking" >/dev/null \
  || fail "the table names the p2p mode"
grep -q -- "--precision      training precision (default bf16)" "$TMP/help" || fail "--help lists --precision"
grep -q -- "--p2p .*(default" "$TMP/help" || fail "--help lists --p2p"
grep -q -- "--dist-optimizer" "$TMP/help" || fail "--help lists --dist-optimizer"
expect_error "unknown command" -- $BIN frobnicate

# --top K: the chosen plan, then the best plan of each structural alternative, ranked, each keeping its
# constraint, none twice, all within the cluster
$BIN plan --model llama2-7b --cluster 2x8xA100-40G,1x8xH800,1x8xH20 --global-batch 256 --top 6 --json "$TMP/top.json" \
  >"$TMP/top.out" 2>&1 || fail "plan --top 6"
grep -q "^Alternatives (--top 6" "$TMP/top.out" || fail "no table of the alternatives: $(tail -3 "$TMP/top.out")"
jq -e '.iteration_time_s as $best | (.top | length) >= 3 and (.top | length) <= 6 and .top[0].alternative == "the chosen plan"
  and .top[0].iteration_time_s == .iteration_time_s
  and ([.top[1:][] | .iteration_time_s] as $t | $t == ($t | sort))
  and ([.top[] | .iteration_time_s >= $best - 1e-9] | all)
  and ([.top[] | [.micro_batch, [.replicas[] | [.micro_batches, [.stages[] | [.node_index, .gpus, .layers]]]]]] | unique | length) == (.top | length)
  and all(.top[]; (.alternative | test("^at most ([0-9]+) pipeline")) as $d
      | if $d then ([.replicas[] | .stages | length] | max) <= (.alternative | capture("at most (?<n>[0-9]+)").n | tonumber) else true end)
  and all(.top[]; if (.alternative | test("^TP ")) then ([.replicas[].stages[] | (.gpus | length)] | unique) == [(.alternative | capture("TP (?<t>[0-9]+)").t | tonumber)] else true end)
  and all(.top[]; if (.alternative | test("^micro-batch ")) then .micro_batch == (.alternative | capture("micro-batch (?<b>[0-9]+)").b | tonumber) else true end)' \
  "$TMP/top.json" >/dev/null || fail "top[]: $(jq -c '[.top[] | {alternative, iteration_time_s, micro_batch}]' "$TMP/top.json")"

# error bars: every alternative's time with compute and communication moved by --model-error either way; with
# no error none; compute alone moves a plan by at most that share of its time; wider errors, wider bars
jq -e '.model_error.compute == 0.1 and .model_error.communication == 0.25 and
       all(.top[]; .error_bar_s > 0 and .worst_regret >= 0)' "$TMP/top.json" >/dev/null \
  || fail "top[]: error bars: $(jq -c '[.model_error, [.top[] | [.error_bar_s, .worst_regret]]]' "$TMP/top.json")"
POOL=(--model llama2-7b --cluster 2x8xA100-40G,1x8xH800,1x8xH20 --global-batch 256 --top 6 --quiet)
$BIN plan "${POOL[@]}" --model-error 0,0 --json "$TMP/e0.json" || fail "plan --model-error 0,0"
jq -e 'all(.top[]; .error_bar_s < 1e-9 * .iteration_time_s)' "$TMP/e0.json" >/dev/null || fail "no error, yet error bars"
$BIN plan "${POOL[@]}" --model-error 10,0 --json "$TMP/e1.json" || fail "plan --model-error 10,0"
jq -e 'all(.top[]; .error_bar_s > 0 and .error_bar_s <= 0.1 * .iteration_time_s + 1e-9)' "$TMP/e1.json" >/dev/null \
  || fail "compute 10 %: bars beyond 10 % of the time: $(jq -c '[.top[] | [.iteration_time_s, .error_bar_s]]' "$TMP/e1.json")"
$BIN plan "${POOL[@]}" --model-error 20,50 --json "$TMP/e2.json" || fail "plan --model-error 20,50"
jq -e --slurpfile a "$TMP/top.json" '[.top[].error_bar_s] as $w | [$a[0].top[].error_bar_s] as $n |
       ($w | length) == ($n | length) and all(range(0; $w | length); $w[.] > $n[.])' "$TMP/e2.json" >/dev/null \
  || fail "wider errors, not wider bars"
# --pick robust: the returned plan is the alternative of least worst regret
$BIN plan --model opt-350m --cluster 16x4xA100-40G,16x4xV100-16G --profile "$FIX/sailor/OPT-350" --global-batch 256 \
  --seq 2048 --pick robust --quiet --json "$TMP/rob.json" || fail "plan --pick robust"
jq -e '.model_error.most_robust as $k | ([.top[].worst_regret] | min) == .top[$k].worst_regret and
       .iteration_time_s == .top[$k].iteration_time_s and (.top | length) >= 2' "$TMP/rob.json" >/dev/null \
  || fail "--pick robust: $(jq -c '[.iteration_time_s, .model_error, [.top[] | [.iteration_time_s, .worst_regret]]]' "$TMP/rob.json")"
expect_error "--model-error" -- $BIN plan "${POOL[@]}" --model-error 10
expect_error "--model-error" -- $BIN plan "${POOL[@]}" --model-error 10,200
expect_error "--pick" -- $BIN plan "${POOL[@]}" --pick safest

[ $fails -eq 0 ] && echo "cli_plan: all checks passed"
exit $fails
