#!/usr/bin/env bash
# autohet run recovering into a plan of another TP degree (issue #13): a version-2 plan (stages[].tp)
# of 2 replicas at TP 2 on n0 and n1 (n2 idle) loses n1 after step 5; the replan is forced to TP 1
# (--replan-tp 1), so no shard of the new plan's degree exists: the recovery assignment lists, for
# every new rank and layer, both old TP shards of degree 2 (own memory tier on n0, over MPI RMA from
# n0 for the ranks on n2, from the cloud with full-reload), the engine reshards them, and the run ends
# on the uninterrupted TP=2 run's parameters (1e-5 relative), its losses after the recovery within 1e-6.
. "$(dirname "$0")/common.sh"
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 12 --seed 3 --eval-every 3)
PLAN="$PLANS/tiny-3node-tp2-v2.json"
TOL=1e-5
LOSS_TOL=1e-6

# the uninterrupted run of the same plan
AUTOHET_DUMP_PARAMS="$TMP/ref.bin" timeout 300 mpirun -np 4 --bind-to none "$BIN" train "${ARGS[@]}" --plan "$PLAN" \
  --log "$TMP/ref.log" >"$TMP/ref.out" 2>&1 || { tail -5 "$TMP/ref.out"; fail "reference run"; }

run() { # name extra-args...
  local name=$1
  shift
  AUTOHET_DUMP_PARAMS="$TMP/$name.bin" timeout 300 "$BIN" run --plan "$PLAN" "${ARGS[@]}" --run-dir "$TMP/$name.run" \
    --log "$TMP/$name.log" --report "$TMP/$name.json" "$@" >"$TMP/$name.out" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { tail -20 "$TMP/$name.out"; fail "$name: exit $rc"; return 1; }
  out=$("$CMP" "$TMP/ref.bin" "$TMP/$name.bin" "$TOL") || fail "$name: parameters differ from the uninterrupted run: $out"
  jq -e '.completed and .final_step == 12 and (.recoveries | length) == 1' "$TMP/$name.json" >/dev/null \
    || fail "$name: report: $(jq -c '[.completed, .final_step, (.recoveries | length)]' "$TMP/$name.json")"
  # the losses of every step (the last time it was computed) equal the uninterrupted run's
  worst=$(jq -s --slurpfile r "$TMP/ref.log" '
    (group_by(.step) | map(.[-1])) as $got | ($r | map({key: (.step | tostring), value: .loss}) | from_entries) as $ref
    | [$got[] | ((.loss - $ref[.step | tostring]) | fabs) / $ref[.step | tostring]] | max' "$TMP/$name.log")
  jq -n -e --argjson w "${worst:-1}" --argjson tol "$LOSS_TOL" '$w <= $tol' >/dev/null \
    || fail "$name: losses differ from the uninterrupted run by $worst (relative)"
  echo "$name: losses within $worst, parameters $out"
}

# 1. layer-bitmap: TP 2 -> TP 1, from own memory (n0) and a peer (n0 serving n2)
if run bitmap --preempt n1@5 --ckpt-every 5 --replan-tp 1; then
  grep -q "generation 0: 4 plan ranks, 2 replicas (1+1 stages), TP 2, on 2 of 3 nodes" "$TMP/bitmap.out" \
    || fail "bitmap: generation 0 line: $(grep 'generation 0' "$TMP/bitmap.out")"
  grep -q "generation 1: .*, TP 1, on 2 of 2 nodes" "$TMP/bitmap.out" \
    || fail "bitmap: generation 1 is not TP 1 on n0 and n2: $(grep 'generation 1' "$TMP/bitmap.out")"
  jq -e '.recoveries[0] | .steps_lost == 0 and .resumed_step == 5 and .bytes_by_tier.memory > 0
    and .bytes_by_tier.peer > 0 and .bytes_by_tier.cloud == 0' "$TMP/bitmap.json" >/dev/null \
    || fail "bitmap: recovery record: $(jq -c '.recoveries[0]' "$TMP/bitmap.json")"
  A="$TMP/bitmap.run/recover-1.json"
  # every (rank, layer) has both old TP ranks of degree 2, nothing else
  jq -e '[.shards | group_by([.rank, .layer])[] | (map(.tp) | sort) == [0, 1] and all(.[]; .tp_degree == 2)] | all' "$A" \
    >/dev/null || fail "bitmap: the assignment does not list both TP=2 shards per rank and layer"
  jq -e 'any(.shards[]; .tier == "peer") and any(.shards[]; .tier == "memory")' "$A" >/dev/null \
    || fail "bitmap: the assignment uses no peer or no own-memory shard"
  grep -q "recovery resharded 6 layer(s) of rank 0 from TP=2 to TP=1" "$TMP/bitmap.out" \
    || fail "bitmap: rank 0 did not reshard its layers"
  # the new generation's checkpoints record its degree
  jq -e 'all(.shards[]; .tp_degree == 1)' "$TMP/bitmap.run/disk/n2/manifest.json" >/dev/null \
    || fail "bitmap: generation 1's manifest does not record TP degree 1"
fi

# 2. full reload: every old shard from the cloud tier, resharded
if run full --preempt n1@6 --ckpt-every 5 --replan-tp 1 --recovery full-reload --cloud-bandwidth 0; then
  jq -e '.recoveries[0] | .resumed_step == 5 and .bytes_by_tier.cloud > 0 and .bytes_by_tier.peer == 0
    and .bytes_by_tier.memory == 0' "$TMP/full.json" >/dev/null \
    || fail "full: recovery record: $(jq -c '.recoveries[0]' "$TMP/full.json")"
  jq -e 'all(.shards[]; .tier == "cloud" and .tp_degree == 2)' "$TMP/full.run/recover-1.json" >/dev/null \
    || fail "full: the assignment is not TP=2 cloud shards"
fi

# 3. the replan's own choice of degree (--replan-tp any, the default)
run any --preempt n1@5 --ckpt-every 5 || true

# 4. a recovery assignment that mixes degrees in one layer is refused, naming the layer
A="$TMP/bitmap.run/recover-1.json"
if [ -s "$A" ]; then
  jq '(.shards[] | select(.rank == 0 and .layer == 1 and .tp == 1)).tp_degree = 4' "$A" >"$TMP/mixed.json"
  np=$(jq '.ranks | length' "$A")
  timeout 300 mpirun -np "$np" --bind-to none "$BIN" train "${ARGS[@]}" --plan "$TMP/bitmap.run/plan-1.json" \
    --recover "$TMP/mixed.json" >"$TMP/mixed.out" 2>&1 && fail "a mixed-degree assignment was accepted"
  grep -q "layer 1 of rank 0: 2 shard(s) to reshard from, not every TP rank of one degree once" "$TMP/mixed.out" \
    || { tail -3 "$TMP/mixed.out"; fail "mixed-degree assignment: message"; }
fi

# 6. a plan whose stages have different degrees (replicas TP 2 -> 1 and TP 1 -> 2 on n0 and n1) loses n1
# after step 4: the replan on n0 alone reassembles every layer from the degree-2 shards of n0's memory tier
# (the degree-1 ones where they are complete), exact to the uninterrupted mixed-degree run
MIX="$PLANS/tiny-mixtp-2rep.json"
MARGS=(--model tiny-gpt --data "$FIX/text" --steps 8 --seed 3 --eval-every 4)
AUTOHET_DUMP_PARAMS="$TMP/mref.bin" timeout 300 mpirun -np 6 --bind-to none -x AUTOHET_DUMP_PARAMS "$BIN" train \
  "${MARGS[@]}" --plan "$MIX" --log "$TMP/mref.log" >"$TMP/mref.out" 2>&1 || { tail -5 "$TMP/mref.out"; fail "mixed reference"; }
if AUTOHET_DUMP_PARAMS="$TMP/mrun.bin" timeout 300 "$BIN" run --plan "$MIX" "${MARGS[@]}" --run-dir "$TMP/mrun.run" \
  --log "$TMP/mrun.log" --report "$TMP/mrun.json" --preempt n1@4 --ckpt-every 4 >"$TMP/mrun.out" 2>&1; then
  grep -q "generation 0: 6 plan ranks, 2 replicas (2+2 stages), TP 1-2 per stage" "$TMP/mrun.out" \
    || fail "mixed: generation 0 line: $(grep 'generation 0' "$TMP/mrun.out")"
  jq -e '.completed and .final_step == 8 and (.recoveries | length) == 1' "$TMP/mrun.json" >/dev/null \
    || fail "mixed: report"
  out=$("$CMP" "$TMP/mref.bin" "$TMP/mrun.bin" "$TOL") || fail "mixed: parameters differ from the uninterrupted run: $out"
  echo "mixed-degree plan recovered after losing n1: parameters $out"
else
  tail -20 "$TMP/mrun.out"
  fail "mixed-degree autohet run"
fi

# 5. bad input: one line, exit 2
"$BIN" run --plan "$PLAN" "${ARGS[@]}" --replan-tp 3 >"$TMP/bad.out" 2>"$TMP/bad.err"
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/bad.err")" -eq 1 ] && grep -q -- "--replan-tp '3'" "$TMP/bad.err" \
  || { cat "$TMP/bad.err"; fail "--replan-tp 3"; }

[ $fails -eq 0 ] && echo "cli_run_reshard: all checks passed"
exit $((fails > 0))
