#!/usr/bin/env bash
# The CLI paths are valgrind-clean: no invalid accesses, no leaks, on success
# and on bad input.
set -uo pipefail
BIN="$1"
FIX="$2"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
VG=(valgrind -q --suppressions="$(dirname "$0")/gpu/valgrind-cuda.supp" --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect)
fails=0
run() {
  "${VG[@]}" "$@" >/dev/null 2>"$TMP/err"
  local rc=$?
  if [ $rc -eq 99 ] || grep -q "==[0-9]*==" "$TMP/err"; then
    echo "FAIL (valgrind): $*"; cat "$TMP/err"; fails=$((fails + 1))
  fi
}
run "$BIN" plan --model gpt3-2.7b --cluster 1x8xA100-40G,1x8xH800 --global-batch 64 --compare --json "$TMP/p.json"
run "$BIN" plan --model gpt-neo-2.7b --cluster 1x8xA100-40G,1x8xV100-16G --profile "$FIX/sailor/GPT-Neo-2.7" --global-batch 64
run "$BIN" plan --model gpt3-2.7b --cluster 1x8xA100-40G,1x8xH800 --global-batch 64 --top 4 --json "$TMP/top.json"
run "$BIN" plan --model gpt3-175b --cluster 1x8xT4 --global-batch 8
run "$BIN" plan --model gpt3-1.3b --cluster 1x8xB200 --global-batch 8
echo '{"hidden_size": 12' >"$TMP/bad.json"
run "$BIN" plan --model "$TMP/bad.json" --cluster 1x8xA100-40G --global-batch 8
run "$BIN" devices
run "$BIN" models
"$BIN" plan --model gpt3-1.3b --cluster 1x8xA100-40G,1x8xH800 --global-batch 32 --quiet --json "$TMP/s.json"
# replans computed ahead: the build (one OpenMP thread: the thread pool's stacks read as possibly lost), the
# lookup, and a bad table
OMP_NUM_THREADS=1 run "$BIN" plan --model gpt3-1.3b --cluster 2x4xA100-40G,1x4xH800 --global-batch 32 --replans 1 --json "$TMP/rt.json"
run "$BIN" replan "$TMP/rt.json" --lost A100-40G-1 --json "$TMP/rt2.json"
jq '.replans.entries[0].replicas = "1:99/1/0/0/2"' "$TMP/rt.json" >"$TMP/rtbad.json"
run "$BIN" replan "$TMP/rtbad.json" --lost A100-40G-1
run "$BIN" simulate "$TMP/s.json" --trace "$TMP/t.json" --svg "$TMP/t.svg" --json "$TMP/o.json"
# calibrate (fit and leave-one-out), then simulate and plan with its file; a bad runs file
"$BIN" plan --model gpt3-1.3b --cluster 2x8xA100-40G --global-batch 32 --pp 2 --dp 1 --tp 8 --quiet --json "$TMP/c2.json"
"$BIN" plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 32 --pp 1 --dp 1 --tp 8 --quiet --json "$TMP/c1.json"
printf '[{"plan": "c1.json", "measured_iteration_s": 2.0}, {"plan": "c2.json", "measured_iteration_s": 1.3}]\n' \
  >"$TMP/runs.json"
run "$BIN" calibrate "$TMP/runs.json" --out "$TMP/cal.json" --json "$TMP/calruns.json"
run "$BIN" simulate "$TMP/c2.json" --calibration "$TMP/cal.json" --trace "$TMP/ct.json"
run "$BIN" plan --model gpt3-1.3b --cluster 2x8xA100-40G --global-batch 32 --calibration "$TMP/cal.json" --top 3
printf '[{"plan": "c1.json"}]\n' >"$TMP/badruns.json"
run "$BIN" calibrate "$TMP/badruns.json"
# runs on measured pairwise links (the comm profile's links matrix), then simulate on them with a datasheet fit
MIT="$(cd "$(dirname "$0")/.." && pwd)/bench/measured/sailor-mit-opt350"
jq --arg d "$MIT" '[.[] | .plan = $d + "/" + .plan] | .[:3]' "$MIT/runs.json" >"$TMP/mit.json"
run "$BIN" calibrate "$TMP/mit.json" --devices "$MIT/mit-devices.json" --profile "$MIT/mit-opt350-profile.json" \
  --comm-profile "$MIT/mit-links.json" --no-validate --out "$TMP/mitcal.json"
run "$BIN" simulate "$MIT/plans/mit_N4_plan_config_N4_D1.plan.json" --devices "$MIT/mit-devices.json" \
  --profile "$MIT/mit-opt350-profile.json" --comm-profile "$MIT/mit-links.json" --calibration "$TMP/cal.json"
# replan: the fast repair and the full search; every node lost
run "$BIN" replan "$TMP/c2.json" --lost "$(jq -r '.cluster.nodes[0].name' "$TMP/c2.json")" --json "$TMP/rp.json"
run "$BIN" replan "$TMP/c2.json" --lost "$(jq -r '[.cluster.nodes[].name] | join(",")' "$TMP/c2.json")"
# spot-trace replay (planner + simulator + recovery assignment per change)
printf '0,add,a\n0,add,b\n0,add,c\n600000,remove,b\n1200000,remove,a\n1200000,remove,c\n1800000,add,d\n2400000,add,e\n' >"$TMP/trace.csv"
run "$BIN" spot-sim --trace "$TMP/trace.csv" --node 8xA100-40G=2,8xV100-16G=1 --model gpt3-1.3b --global-batch 64 \
  --seq 2048 --json "$TMP/ss.json" --svg "$TMP/ss.svg"
printf '0,add,a\nzz\n' >"$TMP/badtrace.csv"
run "$BIN" spot-sim --trace "$TMP/badtrace.csv" --node 8xA100-40G --model gpt3-1.3b --global-batch 64 --seq 2048
# the elastic controller (its MPI jobs run outside valgrind): a preemption, a recovery, the report
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
OMP_NUM_THREADS=1 run "$BIN" run --plan "$(dirname "$0")/plans/tiny-4node-2x2.json" --model tiny-gpt --data "$FIX/text" \
  --steps 6 --preempt n1@3 --run-dir "$TMP/run" --report "$TMP/run.json" --log "$TMP/run.log" --trace "$TMP/runtrace.json" \
  --svg "$TMP/run.svg"
jq -e '.completed and (.recoveries | length) == 1 and (.generations[1].trace | type) == "string"' "$TMP/run.json" \
  >/dev/null && [ -s "$TMP/runtrace.json" ] && [ -s "$TMP/run.svg" ] || { echo "FAIL: run report, trace or svg"; fails=$((fails + 1)); }
# a plan with replans computed ahead: the controller reads the table and looks the loss up
"$BIN" plan --model tiny-gpt --cluster 3x1xcpu --global-batch 6 --micro-batch 2 --seq 32 --replans 1 --quiet \
  --json "$TMP/ahead.json"
OMP_NUM_THREADS=1 run "$BIN" run --plan "$TMP/ahead.json" --model tiny-gpt --data "$FIX/text" --steps 4 \
  --preempt cpu-1@2 --run-dir "$TMP/run2" --report "$TMP/run2.json"
jq -e '.recoveries[0].replan == "computed ahead"' "$TMP/run2.json" >/dev/null \
  || { echo "FAIL: run with replans computed ahead: $(jq -c .recoveries "$TMP/run2.json")"; fails=$((fails + 1)); }
run "$BIN" run --plan "$(dirname "$0")/plans/tiny-4node-2x2.json" --model tiny-gpt --data "$FIX/text" --preempt n7@3
run "$BIN" preempt --run-dir "$TMP/nowhere" n1
run "$BIN" preempt --run-dir "$TMP/run" n1 # (finished: refused after reading its state and inventory)
# the training engine (MPI singleton): Open MPI's own runtime allocations are suppressed
SUPP="$(dirname "$0")/valgrind-mpi.supp"
[ -f /usr/share/openmpi/openmpi-valgrind.supp ] && VG+=(--suppressions=/usr/share/openmpi/openmpi-valgrind.supp)
VG+=(--suppressions="$SUPP")
# blocks hanging off Open MPI's suppressed allocations show up as "indirectly lost": count definite leaks only
VG=("${VG[@]/--errors-for-leak-kinds=definite,indirect/--errors-for-leak-kinds=definite}")
OMP_NUM_THREADS=1 run "$BIN" train --model tiny-gpt --data "$FIX/text" --steps 1 --seq 16 --global-batch 2 \
  --micro-batch 1 --eval-every 1 --trace "$TMP/train.json"
[ -s "$TMP/train.json" ] || { echo "FAIL: no engine trace"; fails=$((fails + 1)); }
# layer checkpoint and resume on one rank
OMP_NUM_THREADS=1 run "$BIN" train --model tiny-gpt --data "$FIX/text" --steps 2 --seq 16 --global-batch 2 \
  --micro-batch 1 --eval-every 0 --ckpt-dir "$TMP/ck" --ckpt-every 1
OMP_NUM_THREADS=1 run "$BIN" train --model tiny-gpt --data "$FIX/text" --steps 2 --seq 16 --global-batch 2 \
  --micro-batch 1 --eval-every 0 --resume "$TMP/ck"
[ -s "$TMP/ck/state.json" ] || { echo "FAIL: no checkpoint"; fails=$((fails + 1)); }
# generate from it: a byte-level prompt, and the empty one (bad input)
OMP_NUM_THREADS=1 run "$BIN" generate --ckpt "$TMP/ck" --prompt "The License" --max-new-tokens 4
run "$BIN" generate --ckpt "$TMP/ck" --prompt ""
# analyze: the engine trace just written, and a truncated copy
run "$BIN" analyze "$TMP/train.json" --json "$TMP/a.json" --svg "$TMP/a.svg" --otf2 "$TMP/otf"
run "$BIN" analyze "$TMP/train.json" --diagnose --json "$TMP/d.json"
head -c 300 "$TMP/train.json" >"$TMP/trunc.json"
run "$BIN" analyze "$TMP/trunc.json"
[ $fails -eq 0 ] && echo "cli_valgrind: clean"
exit $fails
