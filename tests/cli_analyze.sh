#!/usr/bin/env bash
# autohet analyze: on a hand-built trace the compute / exposed-communication /
# idle split and the skew / transfer split of a collective equal the values
# worked out by hand, and a hand-built measured trace against a hand-built
# simulated one gives the worked-out comparison per rank, op kind and bucket;
# a real simulator trace is analysed like an engine trace; on a real 4-rank
# traced run (2 asymmetric replicas) the parts sum to the span on every rank,
# compute equals the sum of the compute events, every call site appears, sends
# are linked to their receives by flow events, the alpha-beta prediction comes
# from a comm profile, and `--sim` of `autohet simulate --trace` of the same
# plan compares rank by rank; bad traces exit 2 with a message naming the file.
. "$(dirname "$0")/common.sh"

"$BIN" analyze --help >"$TMP/help.out" || fail "analyze --help"
grep -q usage "$TMP/help.out" || fail "analyze --help: no usage"
for f in --sim --json --svg --comm-profile --top --skip-steps --otf2 --stack --mpi-algorithm --stack-site --devices \
  --help; do
  grep -qE -- "^  (-h, )?$f " "$TMP/help.out" || fail "analyze --help does not describe $f"
done

# hand-built: span [0, 30] us. rank 0 computes [0,10], all-reduces [5,20] (5 us
# hidden under compute), waits in a receive [18,26] (2 us under the all-reduce) and
# saves a checkpoint [27,29]: compute 10, exposed 10, bubble 6, checkpoint 2, other 2 (a
# checkpoint is not compute, though on the same thread). rank 1 enters the
# same all-reduce (same site, group, seq) at 0 and leaves at 30: the transfer is
# the shorter wait (15 us), skew = mean(15, 30) - 15 = 7.5 us.
cat >"$TMP/hand.json" <<'J'
{"traceEvents": [
 {"ph": "X", "name": "forward mb0", "cat": "compute", "pid": 0, "tid": 0, "ts": 0, "dur": 10, "args": {}},
 {"ph": "X", "name": "forward mb1", "cat": "compute", "pid": 0, "tid": 0, "ts": 2, "dur": 4, "args": {}},
 {"ph": "X", "name": "ar", "cat": "communication", "pid": 0, "tid": 1, "ts": 5, "dur": 15,
  "args": {"site": "dp_allreduce layers 0-1", "seq": 0, "bytes": 1500, "ranks": 2, "group": 0}},
 {"ph": "X", "name": "recv_activation mb0", "cat": "communication", "pid": 0, "tid": 1, "ts": 18, "dur": 8,
  "args": {"site": "recv_activation", "seq": 0, "bytes": 64, "ranks": 2, "group": 1}},
 {"ph": "X", "name": "checkpoint disk", "cat": "checkpoint", "pid": 0, "tid": 0, "ts": 27, "dur": 2,
  "args": {"kind": "checkpoint", "site": "checkpoint disk", "bucket": 1, "bytes": 4096}},
 {"ph": "X", "name": "ar", "cat": "communication", "pid": 1, "tid": 1, "ts": 0, "dur": 30,
  "args": {"site": "dp_allreduce layers 0-1", "seq": 0, "bytes": 1500, "ranks": 2, "group": 0}}
]}
J
"$BIN" analyze "$TMP/hand.json" --json "$TMP/hand.out.json" >"$TMP/hand.out" 2>&1 || { cat "$TMP/hand.out"; fail "hand-built trace"; }
jq -e 'def near(a; b): ((a - b) | fabs) < 1e-12;
       .span_us == 30 and near(.ranks[0].wall_s; 30e-6) and near(.ranks[0].compute_s; 10e-6)
       and near(.ranks[0].exposed_comm_s; 10e-6) and near(.ranks[0].bubble_s; 6e-6)
       and near(.ranks[0].checkpoint_s; 2e-6) and near(.ranks[0].other_s; 2e-6)
       and .ranks[1].compute_s == 0 and near(.ranks[1].exposed_comm_s; 30e-6) and near(.ranks[1].bubble_s; 0)
       and .ranks[1].checkpoint_s == 0 and near(.ranks[1].other_s; 0)' \
  "$TMP/hand.out.json" >/dev/null || fail "hand-built: compute/exposed/bubble/checkpoint/other split"
grep -q "checkpoint ms" "$TMP/hand.out" || fail "hand-built: no checkpoint column in the table"
# busbw of the transfer: 1500 B / 15 us = 0.1 GB/s x 2(n-1)/n = 0.1
jq -e '.sites[] | select(.site == "dp_allreduce layers 0-1") | .calls == 2 and .instances == 1 and .skew_us == 7.5
       and .transfer_us == 15 and ((.busbw_GBps - 0.1) | fabs) < 1e-12' "$TMP/hand.out.json" >/dev/null \
  || fail "hand-built: skew/transfer/busbw of the collective"

# hand-built measured vs simulated, one step of 2 ranks (times in us):
#   measured  rank 0: forward [0,10], bucket all-reduce [10,20], optimizer [20,30]
#             rank 1: forward [0,20], bucket all-reduce [20,25], optimizer [25,30]
#   simulated rank 0: forward [0,5],  all-reduce [5,10], optimizer [10,15]; rank 1 the same
# iteration 30 vs 15 us (-50 %); rank 0 forward 10 vs 5 us (-50 %), compute 20 vs 10 us;
# rank 1 forward 20 vs 5 us (-75 %); bucket layers 0-1: mean of (10, 5) = 7.5 vs 5 us (-1/3).
ev() { # pid kind ts dur [layers]
  local ly=${5:-"-1,-1"}
  printf '{"ph":"X","name":"%s","cat":"%s","pid":%d,"tid":0,"ts":%s,"dur":%s,"args":{"kind":"%s","site":"%s","layers":[%s],"bucket":0,"ranks":2,"group":0,"seq":0}}' \
    "$2" "$([ "$2" = dp_allreduce ] && echo communication || echo compute)" "$1" "$3" "$4" "$2" "$2" "$ly"
}
{ echo '{"traceEvents":['; ev 0 forward 0 10; echo ,; ev 0 dp_allreduce 10 10 0,2; echo ,; ev 0 optimizer 20 10; echo ,
  ev 1 forward 0 20; echo ,; ev 1 dp_allreduce 20 5 0,2; echo ,; ev 1 optimizer 25 5
  echo '],"otherData":{"format":"autohet-trace","source":"engine"}}'; } >"$TMP/hm.json"
{ echo '{"traceEvents":['; for r in 0 1; do ev $r forward 0 5; echo ,; ev $r dp_allreduce 5 5 0,2; echo ,; ev $r optimizer 10 5
    [ $r = 0 ] && echo ,; done
  echo '],"otherData":{"format":"autohet-trace","source":"simulator"}}'; } >"$TMP/hs.json"
"$BIN" analyze "$TMP/hm.json" --sim "$TMP/hs.json" --json "$TMP/hc.json" >"$TMP/hc.out" 2>&1 \
  || { cat "$TMP/hc.out"; fail "hand-built --sim"; }
jq -e 'def near(a; b): ((a - b) | fabs) < 1e-12; .prediction as $p |
       near($p.iteration_measured_s; 30e-6) and near($p.iteration_simulated_s; 15e-6) and near($p.iteration_error; -0.5)
       and near($p.ranks[0].compute_measured_s; 20e-6) and near($p.ranks[0].compute_simulated_s; 10e-6)
       and ($p.ranks[0].kinds[] | select(.kind == "forward") | near(.time_measured_s; 10e-6) and near(.time_error; -0.5))
       and ($p.ranks[1].kinds[] | select(.kind == "forward") | near(.time_measured_s; 20e-6) and near(.time_error; -0.75))
       and ($p.buckets | length) == 1 and $p.buckets[0].site == "dp_allreduce layers 0-1"
       and near($p.buckets[0].time_measured_s; 7.5e-6) and near($p.buckets[0].time_simulated_s; 5e-6)
       and near($p.buckets[0].time_error; 5 / 7.5 - 1) and ($p.buckets[0].ranks | length) == 2' "$TMP/hc.json" >/dev/null \
  || fail "hand-built --sim: per rank / kind / bucket values"
grep -q "per op kind" "$TMP/hc.out" && grep -q "gradient bucket" "$TMP/hc.out" || fail "hand-built --sim: tables missing"
{ echo '{"traceEvents":['; ev 0 forward 0 5; echo ,; ev 0 optimizer 5 5; echo '],"otherData":{"source":"simulator"}}'; } >"$TMP/hs1.json"
"$BIN" analyze "$TMP/hm.json" --sim "$TMP/hs1.json" >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q "hs1.json" "$TMP/o"; } || fail "--sim with another number of ranks: rc $rc"

# a real simulator trace reads like an engine trace: one process per engine rank, parts sum to the span
"$BIN" simulate "$PLANS/tiny-asym.json" --quiet --trace "$TMP/simt.json" --json "$TMP/sim.json" || fail "simulate --trace tiny-asym"
"$BIN" analyze "$TMP/simt.json" --json "$TMP/sa.json" >"$TMP/sa.out" 2>&1 || { cat "$TMP/sa.out"; fail "analyze of a simulator trace"; }
jq -e --slurpfile s "$TMP/sim.json" '.steps == 1 and (.ranks | length) == ($s[0].gpus | length)
       and all(.ranks[]; ((.compute_s + .exposed_comm_s + .bubble_s + .other_s - .wall_s) | fabs) <= 1e-9)
       and ((.iteration_s - $s[0].iteration_time_s) | fabs) <= 1e-6 * $s[0].iteration_time_s
       and (.buckets | length) == ($s[0].buckets | length)
       and ([.sites[] | select(.site | startswith("dp_allreduce"))] | all(.instances > 0))' "$TMP/sa.json" >/dev/null \
  || fail "analyze of a simulator trace: ranks, steps, parts, buckets"

# a real traced run (the asymmetric plan: replica 0 = one rank, replica 1 = three stages, so some ranks wait in receives)
timeout 300 mpirun -np 4 --bind-to none "$BIN" train --model tiny-gpt --data "$FIX/text" --steps 3 --seed 3 \
  --global-batch 8 --micro-batch 2 --seq 64 --plan "$PLANS/tiny-asym.json" --trace "$TMP/t.json" >"$TMP/train.out" 2>&1 \
  || { tail -5 "$TMP/train.out"; fail "traced training run"; }
timeout 300 mpirun -np 4 --bind-to none "$BIN" commbench --ops latency,allreduce --max-size 1048576 --iters 10 \
  --json "$TMP/cp.json" >"$TMP/cb.out" 2>&1 || { tail -5 "$TMP/cb.out"; fail "commbench"; }
"$BIN" analyze "$TMP/t.json" --json "$TMP/a.json" --svg "$TMP/a.svg" --comm-profile "$TMP/cp.json" >"$TMP/a.out" 2>&1 \
  || { cat "$TMP/a.out"; fail "analyze of the real trace"; }
jq -e '(.ranks | length) == 4 and all(.ranks[]; ((.compute_s + .exposed_comm_s + .bubble_s + .other_s - .wall_s) | fabs)
       <= 0.01 * .wall_s and .compute_s > 0 and .exposed_comm_s > 0 and .bubble_s >= 0 and .other_s >= -1e-9)
       and ([.ranks[].bubble_s] | add) > 0' "$TMP/a.json" >/dev/null \
  || fail "per-rank parts do not sum to the span"
# compute events of one rank never overlap, so their union is their sum
for r in 0 1 2 3; do
  want=$(jq --argjson r $r '[.traceEvents[] | select(.ph == "X" and .pid == $r and .cat == "compute") | .dur] | add' "$TMP/t.json")
  jq -e --argjson r $r --argjson w "$want" '((.ranks[$r].compute_s * 1e6 - $w) | fabs) <= 1e-6 * $w + 1e-3' "$TMP/a.json" \
    >/dev/null || fail "rank $r: compute differs from the sum of its compute events ($want us)"
done
for site in "dp_allreduce layers" recv_activation recv_gradient step_sync tied_sync send_wait; do
  jq -e --arg s "$site" '[.sites[] | select(.site | startswith($s))] | length >= 1' "$TMP/a.json" >/dev/null \
    || fail "call site $site missing"
done
# all-reduces: matched across ranks, skew + transfer = mean duration, a prediction from the profile
# (each condition on its own, so a failure says which and shows the site)
for cond in '.instances > 0' '.busbw_GBps > 0' '.predicted_us > 0' \
            '((.skew_us + .transfer_us - .avg_us) | fabs) <= 0.01 * .avg_us'; do
  jq -e "[.sites[] | select(.site | startswith(\"dp_allreduce\"))] | all($cond)" "$TMP/a.json" >/dev/null \
    || fail "all-reduce sites: $cond: $(jq -c '[.sites[] | select(.site | startswith("dp_allreduce"))]' "$TMP/a.json")"
done
# the prediction is the piecewise allreduce fit of the profile (4 ranks) at the site's size (its regime, not
# below the first regime's latency), its latency steps and bytes through each GPU scaled as a ring's from the
# profile's 4 ranks to the site's (here 2: the buckets of the 2 replicas), recomputed here from the profile
jq -e --slurpfile p "$TMP/cp.json" '($p[0].fits[] | select(.op == "allreduce") | .regimes) as $rg | $p[0].ranks as $N
       | [.sites[] | select(.site | startswith("dp_allreduce"))] | length > 0 and all(.ranks == 2)
         and all(.bytes_per_call as $b | .ranks as $n
         | ([$rg[] | select(.max_bytes == null or $b <= .max_bytes)][0]) as $r
         | (($n - 1) / ($N - 1)) as $steps | ((($n - 1) / $n) / (($N - 1) / $N)) as $vol
         | ([$r.alpha_us * $steps + $b / ($r.beta_GBps * 1e3) * $vol, $rg[0].alpha_us * $steps] | max) as $want
         | ((.predicted_us - $want) | fabs) <= 1e-9 * $want)' "$TMP/a.json" >/dev/null \
  || fail "all-reduce sites: the prediction is not the profile's piecewise allreduce fit at the site's size and ranks"
jq -e '(.slowest | length) == 10' "$TMP/a.json" >/dev/null || fail "slowest operations"
# 3 steps trained, the warm-up step is not traced: 2 steps; --skip-steps 1 analyses the last one
jq -e '.steps == 2 and .skipped_steps == 0 and .iteration_s > 0' "$TMP/a.json" >/dev/null || fail "steps in the trace"
"$BIN" analyze "$TMP/t.json" --skip-steps 1 --json "$TMP/a1.json" >/dev/null 2>&1 || fail "--skip-steps 1"
jq -e '.steps == 1 and all(.ranks[]; ((.compute_s + .exposed_comm_s + .bubble_s + .other_s - .wall_s) | fabs)
       <= 0.01 * .wall_s and .compute_s > 0)' "$TMP/a1.json" >/dev/null || fail "--skip-steps 1: 1 step, parts sum to the wall"
"$BIN" analyze "$TMP/t.json" --skip-steps 2 >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--skip-steps 2 of 2 steps: rc $rc"

# --stack on the real run: every collective instance (events of one site, group and seq on >1 rank)
# splits exactly into arrival skew + the MPI algorithm's alpha-beta cost + residual = last end - first start
"$BIN" analyze "$TMP/t.json" --stack --comm-profile "$TMP/cp.json" --top 3 --json "$TMP/st.json" >"$TMP/st.out" 2>&1 \
  || { cat "$TMP/st.out"; fail "analyze --stack"; }
want=$(jq '[.traceEvents[] | select(.ph == "X" and (.args.kind | test("^(tp_allreduce|dp_allreduce|step_sync|tied_sync)$")))
            | [.args.site, .args.group, .args.seq]] | group_by(.) | map(select(length > 1)) | length' "$TMP/t.json")
jq -e --argjson n "$want" '.stack as $s | $n > 0 and ($s.instances | length) == $n
       and all($s.instances[]; . as $i
         | ((.skew_us + .mpi_us + .residual_us - .measured_us) | fabs) <= 1e-9 * .measured_us + 1e-9
         and .mpi_us > 0 and .skew_us >= 0 and .ranks >= 2
         and ((.measured_us - (([.members[].end_us] | max) - ([.members[].start_us] | min))) | fabs) <= 1e-9 * .measured_us
         and ((.skew_us - (([.members[].start_us] | max) - ([.members[].start_us] | min))) | fabs) <= 1e-9 * .measured_us + 1e-9
         and ([.members[] | select(.start_us == $i.last_arrival_us) | .rank] | min) == .straggler
         and all(.members[]; ((.wait_us - ($i.last_arrival_us - .start_us)) | fabs) <= 1e-9 * $i.measured_us + 1e-9))
       and ([$s.instances[].algorithm] | unique | all(. == "recursive_doubling" or . == "ring" or . == "segmented_ring"
            or . == "rabenseifner" or . == "sendrecv"))
       and ([$s.ranks[].straggler_instances] | add) == $n
       and all($s.sites[]; ((.skew_us + .mpi_us + .residual_us - .measured_us) | fabs) <= 1e-9 * .measured_us + 1e-6)
       and ($s.ranks | length) == 4 and all($s.ranks[]; .overlap_pct >= 0 and .overlap_pct <= 100 and .idle_recv_us >= 0)
       and ($s.model.links | test("latency fit"))' "$TMP/st.json" >/dev/null \
  || fail "--stack: skew + mpi + residual != measured, or stragglers / instances wrong ($want instances in the trace)"
# idle waiting on a receive is the bubble (receives not under compute; the engine's are blocking)
jq -e '. as $a | all(range(0; 4); ((($a.stack.ranks[.].idle_recv_us * 1e-6) - $a.ranks[.].bubble_s) | fabs) <= 1e-9)' \
  "$TMP/st.json" >/dev/null || fail "--stack: idle_recv differs from the bubble"
grep -q "stack breakdown per collective call site" "$TMP/st.out" && grep -q "longest collective instances" "$TMP/st.out" \
  && grep -q "idle collective ms" "$TMP/st.out" || fail "--stack: tables missing"
# the micro view of one site; a forced algorithm (what --mca coll_tuned_allreduce_algorithm set) is costed and recorded
"$BIN" analyze "$TMP/t.json" --stack --stack-site step_sync --mpi-algorithm ring --top 0 --json "$TMP/st2.json" >"$TMP/st2.out" 2>&1 \
  || { cat "$TMP/st2.out"; fail "--stack-site step_sync --mpi-algorithm ring"; }
[ "$(grep -c '^  step_sync ' "$TMP/st2.out")" -eq 2 ] || fail "--stack-site step_sync: expected its 2 instances"
jq -e '.stack.model.coll_tuned_allreduce_algorithm == 4 and (.stack.model.links | test("default"))
       and all(.stack.instances[]; if .site == "tied_sync" then .algorithm == "sendrecv" else .algorithm == "ring" end)
       and all(.stack.instances[] | select(.site == "step_sync"); .algorithm_ran == "recursive_doubling")' \
  "$TMP/st2.json" >/dev/null || fail "--mpi-algorithm ring: not recorded or not applied"
OMPI_MCA_coll_tuned_allreduce_algorithm=6 "$BIN" analyze "$TMP/t.json" --stack --top 0 --json "$TMP/st3.json" >/dev/null 2>&1 \
  && jq -e '.stack.model.coll_tuned_allreduce_algorithm == 6 and (.stack.model.mpi_decision | test("OMPI_MCA"))' \
    "$TMP/st3.json" >/dev/null || fail "OMPI_MCA_coll_tuned_allreduce_algorithm=6 not taken"
"$BIN" analyze "$TMP/t.json" --stack --mpi-algorithm fastest >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q -- "--mpi-algorithm 'fastest'" "$TMP/o"; } || fail "--mpi-algorithm fastest: rc $rc"
"$BIN" analyze "$TMP/t.json" --mpi-algorithm ring >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--mpi-algorithm without --stack: rc $rc"
echo '{"format": "autohet-comm-profile", "fits": [{"op": "allreduce", "link_class": "intra-node", "alpha_us": 5, "beta_GBps": 1}]}' \
  >"$TMP/nolat.json"
"$BIN" analyze "$TMP/t.json" --stack --comm-profile "$TMP/nolat.json" >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q "nolat.json.*latency" "$TMP/o"; } || fail "--stack with a profile without a latency fit: rc $rc"

# sends are linked to their receives: every flow start has one end with the same id
jq -e '[.traceEvents[] | select(.ph == "s")] as $s | [.traceEvents[] | select(.ph == "f")] as $f
       | ($s | length) > 0 and ($s | length) == ($f | length) and ([$s[].id] | sort) == ([$f[].id] | sort)' "$TMP/t.json" \
  >/dev/null || fail "engine trace: flow events send -> receive"
jq -e '[.traceEvents[] | select(.ph == "M" and .name == "process_name") | .args.name]
       | length == 4 and all(.[]; test("^rank [0-3] \\(replica [01], stage [0-2], tp 0\\)"))' "$TMP/t.json" >/dev/null \
  || fail "engine trace: one process per rank, named after its slot"

# measured vs the simulator's trace of the same plan, rank by rank
"$BIN" analyze "$TMP/t.json" --sim "$TMP/simt.json" --json "$TMP/as.json" >"$TMP/as.out" 2>&1 \
  || { cat "$TMP/as.out"; fail "analyze --sim"; }
grep -q "measured vs simulated" "$TMP/as.out" || fail "--sim: no comparison table"
# tiny-asym names no precision (bf16: 2-byte activations); the engine sent fp32 ones: the comparison says the
# volumes differ, site by site, and says nothing once the plan is simulated at fp32
jq -e '[.sites[] | select(.site == "send_activation")][0].bytes_per_call as $m
       | .prediction.volume_mismatches as $v | $m > 0 and ($v | length) > 0
       and ([$v[] | select(.site == "send_activation")][0] | .measured_bytes_per_call == $m
            and .simulated_bytes_per_call * 2 == $m)' "$TMP/as.json" >/dev/null \
  || fail "--sim of a bf16 simulation: no volume mismatch reported ($(jq -c .prediction.volume_mismatches "$TMP/as.json"))"
grep -q "note: the simulation moves other volumes" "$TMP/as.out" || fail "--sim: no note on the volumes"
"$BIN" simulate "$PLANS/tiny-asym.json" --precision fp32 --quiet --trace "$TMP/simt32.json" || fail "simulate --precision fp32"
"$BIN" analyze "$TMP/t.json" --sim "$TMP/simt32.json" --json "$TMP/as32.json" >"$TMP/as32.out" 2>&1 \
  || { cat "$TMP/as32.out"; fail "analyze --sim (fp32)"; }
jq -e '.prediction.volume_mismatches == []' "$TMP/as32.json" >/dev/null && ! grep -q "note: the simulation" "$TMP/as32.out" \
  || fail "--sim of an fp32 simulation: volumes reported as differing ($(jq -c .prediction.volume_mismatches "$TMP/as32.json"))"
jq -e --slurpfile s "$TMP/sa.json" '.prediction as $p | ($p.ranks | length) == 4
       and (($p.iteration_simulated_s - $s[0].iteration_s) | fabs) <= 1e-12
       and (($p.iteration_error - ($p.iteration_simulated_s / $p.iteration_measured_s - 1)) | fabs) < 1e-9
       and all($p.ranks[]; . as $q | (($q.compute_simulated_s - $s[0].ranks[$q.rank].compute_s) | fabs) <= 1e-12
               and $q.compute_measured_s > 0
               and (($q.compute_error - ($q.compute_simulated_s / $q.compute_measured_s - 1)) | fabs) < 1e-9
               and ([$q.kinds[] | select(.kind == "forward" or .kind == "backward")
                     | .time_measured_s > 0 and .time_simulated_s > 0] | length == 2 and all))
       and ($p.buckets | length) == ($s[0].buckets | length)
       and all($p.buckets[]; .time_measured_s > 0 and .time_simulated_s > 0)' "$TMP/as.json" >/dev/null \
  || fail "--sim: per-rank / per-kind / per-bucket comparison"
"$BIN" plan --model tiny-gpt --cluster 1x1xcpu --global-batch 8 --micro-batch 2 --seq 64 --quiet --json "$TMP/one.json" \
  && "$BIN" simulate "$TMP/one.json" --quiet --trace "$TMP/sim1.json" || fail "one-rank plan"
"$BIN" analyze "$TMP/t.json" --sim "$TMP/sim1.json" >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q "sim1.json" "$TMP/o"; } || fail "--sim of another plan (1 rank): rc $rc, $(cat "$TMP/o")"
"$BIN" analyze "$TMP/t.json" --sim "$TMP/t.json" >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--sim with a measured trace instead of a simulation: rc $rc"
"$BIN" analyze "$TMP/t.json" --sim "$TMP/sim.json" >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q "simulate PLAN --trace" "$TMP/o"; } || fail "--sim with the simulator's --json summary: rc $rc"
xmllint --noout "$TMP/a.svg" 2>/dev/null || fail "SVG is not well-formed XML"
grep -q "rank 3" "$TMP/a.svg" || fail "SVG lacks a row per rank"
[ "$(grep -c ' ms</text>' "$TMP/a.svg")" -eq 4 ] || fail "SVG: no values next to the bars"
grep -q '%</text>' "$TMP/a.svg" || fail "SVG: no values on the bars"
cp "$TMP/t.json" "$TMP/a&<b>.json"
"$BIN" analyze "$TMP/a&<b>.json" --svg "$TMP/esc.svg" --top 0 >/dev/null 2>&1 || fail "analyze of a path with & < >"
xmllint --noout "$TMP/esc.svg" 2>/dev/null && grep -q 'a&amp;&lt;b&gt;.json' "$TMP/esc.svg" || fail "SVG: text not escaped"

# OTF2 export: every event of the Chrome trace becomes an Enter/Leave pair that otf2-print reads back
"$BIN" analyze "$TMP/t.json" --otf2 "$TMP/otf" --top 0 >"$TMP/o" 2>&1; rc=$?
if grep -q "built without OTF2" "$TMP/o"; then
  [ $rc -eq 2 ] || fail "--otf2 without OTF2 support: rc $rc"
  echo "note: this build has no OTF2 (libopen-trace-format2-dev missing); checked its error instead"
else
  [ $rc -eq 0 ] || fail "--otf2: rc $rc, $(cat "$TMP/o")"
  nx=$(jq '[.traceEvents[] | select(.ph == "X")] | length' "$TMP/t.json")
  otf2-print "$TMP/otf/trace.otf2" >"$TMP/otf.txt" 2>&1 || fail "otf2-print cannot read the archive"
  [ "$(grep -c '^ENTER' "$TMP/otf.txt")" -eq "$nx" ] || fail "OTF2: ENTER records != $nx events"
  [ "$(grep -c '^LEAVE' "$TMP/otf.txt")" -eq "$nx" ] || fail "OTF2: LEAVE records != $nx events"
  grep -q 'Region: "dp_allreduce layers' "$TMP/otf.txt" || fail "OTF2: no all-reduce region"
  # MPI records: one MPI_SEND per send (and per tied exchange), one MPI_RECV per receive (and per
  # tied exchange), a begin/end pair per collective, each naming its peer or communicator
  ns=$(jq '[.traceEvents[] | select(.ph == "X" and ((.args.kind | test("^send_(activation|gradient)$")) or .args.kind == "tied_sync"))] | length' "$TMP/t.json")
  nr=$(jq '[.traceEvents[] | select(.ph == "X" and ((.args.kind | test("^recv_")) or .args.kind == "tied_sync"))] | length' "$TMP/t.json")
  nc=$(jq '[.traceEvents[] | select(.ph == "X" and (.args.kind | test("^(tp_allreduce|dp_allreduce|step_sync)$")))] | length' "$TMP/t.json")
  [ "$ns" -gt 0 ] && [ "$nr" -gt 0 ] && [ "$nc" -gt 0 ] || fail "OTF2: the traced run has no sends, receives or collectives"
  [ "$(grep -c '^MPI_SEND ' "$TMP/otf.txt")" -eq "$ns" ] || fail "OTF2: MPI_SEND records != $ns sends"
  [ "$(grep -c '^MPI_RECV ' "$TMP/otf.txt")" -eq "$nr" ] || fail "OTF2: MPI_RECV records != $nr receives"
  [ "$(grep -c '^MPI_COLLECTIVE_BEGIN ' "$TMP/otf.txt")" -eq "$nc" ] || fail "OTF2: MPI_COLLECTIVE_BEGIN != $nc collectives"
  [ "$(grep -c '^MPI_COLLECTIVE_END ' "$TMP/otf.txt")" -eq "$nc" ] || fail "OTF2: MPI_COLLECTIVE_END != $nc collectives"
  grep '^MPI_SEND ' "$TMP/otf.txt" | head -1 | grep -q 'Receiver: [0-9].*Communicator: "MPI_COMM_WORLD".*Tag: [0-9]*.*Length: [1-9]' \
    || fail "OTF2: MPI_SEND lacks receiver/communicator/tag/length: $(grep -m1 '^MPI_SEND ' "$TMP/otf.txt")"
  grep -q '^MPI_COLLECTIVE_END .*Operation: ALLREDUCE.*Communicator: "dp_allreduce layers' "$TMP/otf.txt" \
    || fail "OTF2: no all-reduce end on a bucket communicator: $(grep -m1 '^MPI_COLLECTIVE_END ' "$TMP/otf.txt")"
  otf2-print -G "$TMP/otf/trace.otf2" >"$TMP/otfG.txt"
  grep -q '^COMM .*"MPI_COMM_WORLD"' "$TMP/otfG.txt" && [ "$(grep -c '^COMM ' "$TMP/otfG.txt")" -ge 3 ] \
    || fail "OTF2: communicator definitions (world and one per collective group)"
  grep -q '^GROUP .*COMM_LOCATIONS' "$TMP/otfG.txt" || fail "OTF2: no COMM_LOCATIONS group"
  nt=$(jq '[.traceEvents[] | select(.ph == "X") | [.pid, .tid]] | unique | length' "$TMP/t.json")
  [ "$(grep -c '^LOCATION ' "$TMP/otfG.txt")" -eq "$nt" ] || fail "OTF2: expected $nt locations (one per thread)"
fi

# bad input
echo '{"traceEvents": [' >"$TMP/bad.json"
"$BIN" analyze "$TMP/bad.json" >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q "bad.json" "$TMP/o"; } || fail "malformed JSON: rc $rc, $(cat "$TMP/o")"
echo '{"traceEvents": []}' >"$TMP/empty.json"
"$BIN" analyze "$TMP/empty.json" >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q "empty.json" "$TMP/o"; } || fail "empty trace: rc $rc"
echo '{"traceEvents": [{"ph": "X", "pid": 0, "ts": 0, "dur": -1, "cat": "compute"}]}' >"$TMP/neg.json"
"$BIN" analyze "$TMP/neg.json" >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "negative duration: rc $rc"
# a pid outside the trace's ranks (otherData.ranks, the process names, the pids with events) is refused:
# it made the ranks up to it phantom ranks without compute ("100 ranks" for 4)
jq -c '(first(.traceEvents | to_entries[] | select(.value.ph == "X")) | .key) as $k | .traceEvents[$k].pid = 99' \
  "$TMP/t.json" >"$TMP/pid99.json"
k=$(jq '[.traceEvents[] | .ph == "X"] | index(true)' "$TMP/pid99.json")
bad_input "pid99.json: traceEvents[$k] (\"X\" event " analyze "$TMP/pid99.json" --diagnose
grep -q "pid 99, but otherData.ranks says the trace has 4 ranks (pids 0-3)" "$TMP/bad_input.err" ||
  fail "pid 99: $(cat "$TMP/bad_input.err")"
jq -c 'del(.otherData.ranks)' "$TMP/pid99.json" >"$TMP/pid99-names.json"
bad_input "pid 99, which no process_name metadata event names (the trace names 4 processes, the highest pid 3)" \
  analyze "$TMP/pid99-names.json"
jq -c 'del(.otherData.ranks) | .traceEvents |= map(select(.ph != "M"))' "$TMP/pid99.json" >"$TMP/pid99-bare.json"
bad_input "has pid 99, but pid 4 has no events" analyze "$TMP/pid99-bare.json"
jq -c '.otherData.ranks = "4x"' "$TMP/t.json" >"$TMP/ranks4x.json"
bad_input "ranks4x.json: otherData.ranks: expected the number of ranks" analyze "$TMP/ranks4x.json"
"$BIN" analyze "$TMP/missing.json" >"$TMP/o" 2>&1; rc=$?
[ $rc -ne 0 ] || fail "missing file accepted"
"$BIN" analyze "$TMP/t.json" --top x >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--top x: rc $rc"
"$BIN" analyze "$TMP/t.json" --comm-profile "$TMP/bad.json" >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "malformed --comm-profile: rc $rc"

[ $fails -eq 0 ] && echo "analyze: all checks passed"
exit $((fails > 0))
