#!/usr/bin/env bash
# Resharding on resume: a TP=2 run of 2 replicas (4 ranks) checkpoints at
# step 5 of 8; resuming from that checkpoint under a TP=1 plan (2 x 2 stages),
# on one rank, and under a TP=4 plan (1 replica, 4 GPUs) reassembles every
# layer from the two old TP shards, cuts the new ones out of it, and ends on
# the uninterrupted run's parameters and losses (1e-6 relative). A checkpoint
# missing one old TP rank's shard fails naming the layer and rank; a commit
# drops the entries a run of another TP degree left when it died in it.
. "$(dirname "$0")/common.sh"
MPIRUN=(timeout 300 mpirun -np 4 --bind-to none)
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 8 --seed 3 --global-batch 8 --micro-batch 2 --seq 64)
TOL=1e-6

# the uninterrupted TP=2 run, and the same run stopped after its checkpoint of step 5 (rank 0 killed at the
# start of step 6: a run that ends checkpoints its last step, which would replace step 5's)
AUTOHET_DUMP_PARAMS="$TMP/ref.bin" "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-tp2.json" \
  --log "$TMP/ref.log" >"$TMP/ref.out" 2>&1 || { tail -5 "$TMP/ref.out"; fail "the TP=2 run"; }
ckpt_at_5() { # plan dir
  AUTOHET_TEST_KILL_RANK=0 AUTOHET_TEST_KILL_STEP=5 "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/$1.json" \
    --ckpt-dir "$2" --ckpt-every 5 >"$2.out" 2>&1 && fail "$1: the run stopped at step 6 exited 0"
}
ckpt_at_5 tiny-tp2 "$TMP/ck"
jq -e '.step == 5' "$TMP/ck/state.json" >/dev/null || fail "state.json is not at step 5"
jq -e '[.shards[].tp_rank] | unique == [0, 1]' "$TMP/ck/n0/manifest.json" >/dev/null \
  || fail "the checkpoint does not hold TP ranks 0 and 1"
# every entry records its TP degree, and the file name carries it
jq -e 'all(.shards[]; .tp_degree == 2 and (.file | test("^L[0-9]{3}-tp[01]of2-s5[.]safetensors$")))' \
  "$TMP/ck/n0/manifest.json" >/dev/null || fail "the manifest does not record TP degree 2 per shard"

resume() { # name plan-or-empty
  local plan=() run=("${MPIRUN[@]}")
  [ -n "$2" ] && plan=(--plan "$PLANS/$2.json")
  [ -z "$2" ] && run=(timeout 300)
  AUTOHET_DUMP_PARAMS="$TMP/$1.bin" "${run[@]}" "$BIN" train "${ARGS[@]}" "${plan[@]}" --resume "$TMP/ck" \
    --log "$TMP/$1.log" >"$TMP/$1.out" 2>&1
}
for c in "tp1:tiny-2x2:1" "one-rank::1" "tp4:tiny-tp4:4"; do
  IFS=: read -r name plan tp <<<"$c"
  resume "$name" "$plan" || { tail -5 "$TMP/$name.out"; fail "$name: resume failed"; continue; }
  grep -q "resumed from .* at step 5" "$TMP/$name.out" || fail "$name: no resume line"
  grep -q "resharded [0-9]* layer(s) of rank 0 from TP=2 to TP=$tp" "$TMP/$name.out" || fail "$name: no reshard line"
  [ "$(wc -l <"$TMP/$name.log")" -eq 3 ] || fail "$name: expected steps 6-8 only in the log"
  worst=$(jq -s --slurpfile r <(jq -s '.[5:]' "$TMP/ref.log") \
    '[range(0; 3) as $i | (.[$i].loss - $r[0][$i].loss) | fabs / $r[0][$i].loss] | max' "$TMP/$name.log")
  jq -n -e --argjson w "${worst:-1}" --argjson tol "$TOL" '$w <= $tol' >/dev/null \
    || fail "$name: loss after resume differs from the uninterrupted run by $worst (relative)"
  out=$("$CMP" "$TMP/ref.bin" "$TMP/$name.bin" "$TOL") || fail "$name: parameters differ: $out"
  echo "resume of TP=2 under ${plan:-one rank} (TP=$tp): losses within $worst, parameters $out"
done

# one old TP rank's shard of a block missing everywhere: the TP=1 resume names it
cp -r "$TMP/ck" "$TMP/ck2"
rm -f "$TMP"/ck2/n*/L002-tp1of2-s5.safetensors
resume_out="$TMP/missing.out"
"$BIN" train "${ARGS[@]}" --resume "$TMP/ck2" >"$resume_out" 2>&1; rc=$?
{ [ $rc -ne 0 ] && grep -q "layer 2 (TP rank 1 of 2) at step 5" "$resume_out"; } \
  || { tail -3 "$resume_out"; fail "a missing old TP shard: rc $rc"; }

# a TP=4 run resumed from step 5 dies in the commit of step 6 after its manifests listed TP ranks 0-3
# there; a TP=2 run resumed from step 5 then commits step 6: the manifest keeps no TP rank 2 or 3
# entry of the dead run, which a later TP=4 resume would take for step 6's
cp -r "$TMP/ck" "$TMP/ck3"
AUTOHET_TEST_KILL_COMMIT=manifests@6 "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-tp4.json" \
  --resume "$TMP/ck3" --ckpt-dir "$TMP/ck3" --ckpt-every 3 >"$TMP/dead.out" 2>&1
jq -e '[.shards[] | select(.step == 6) | .tp_rank] | unique == [0, 1, 2, 3]' "$TMP/ck3/n0/manifest.json" \
  >/dev/null || fail "the killed TP=4 commit did not list its step-6 shards"
# (stopped at the start of step 7, before a commit of the last step would replace step 6's)
AUTOHET_TEST_KILL_RANK=0 AUTOHET_TEST_KILL_STEP=6 "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-tp2.json" \
  --resume "$TMP/ck3" --ckpt-dir "$TMP/ck3" --ckpt-every 3 >"$TMP/again.out" 2>&1 && fail "TP=2 again: exited 0"
jq -e '.step == 6' "$TMP/ck3/state.json" >/dev/null || fail "the TP=2 run did not commit step 6"
jq -e 'all(.shards[]; .step == 6 and .tp_rank < 2)' "$TMP/ck3/n0/manifest.json" >/dev/null \
  || fail "the dead TP=4 run's entries are still listed"
ls "$TMP"/ck3/n0/*-tp[23]of4-* >/dev/null 2>&1 && fail "the dead TP=4 run's shard files are left"
AUTOHET_DUMP_PARAMS="$TMP/tp4b.bin" "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-tp4.json" \
  --resume "$TMP/ck3" >"$TMP/tp4b.out" 2>&1 || { tail -3 "$TMP/tp4b.out"; fail "TP=4 resume of step 6"; }
out=$("$CMP" "$TMP/ref.bin" "$TMP/tp4b.bin" "$TOL") || fail "TP=4 resume of step 6: parameters differ: $out"

# two degrees of one step side by side: the TP=2 checkpoint (both node directories) lacks TP rank 1 of
# layer 2, a TP=4 checkpoint of the same step sits in a third node directory under the same (layer,
# TP rank) keys. A TP=1 resume must take layer 2 from the four TP=4 shards, never TP rank 0 of 2 with
# anything of 4 (the old size inference found degree 2 and failed on the missing rank)
ckpt_at_5 tiny-tp4 "$TMP/ck4"
jq -e '.step == 5' "$TMP/ck4/state.json" >/dev/null || fail "the TP=4 run's state.json is not at step 5"
cp -r "$TMP/ck2" "$TMP/ck5"
cp -r "$TMP/ck4/n0" "$TMP/ck5/n9"
AUTOHET_DUMP_PARAMS="$TMP/mixed.bin" timeout 300 mpirun -np 4 --bind-to none "$BIN" train "${ARGS[@]}" \
  --plan "$PLANS/tiny-2x2.json" --resume "$TMP/ck5" >"$TMP/mixed.out" 2>&1 \
  || { tail -3 "$TMP/mixed.out"; fail "a TP=1 resume beside two degrees of one step"; }
grep -q "resharded [0-9]* layer(s) of rank 0 from TP=4 to TP=1" "$TMP/mixed.out" || fail "two degrees: layer 2 not taken from TP=4"
out=$("$CMP" "$TMP/ref.bin" "$TMP/mixed.bin" "$TOL") || fail "two degrees side by side: parameters differ: $out"

[ $fails -eq 0 ] && echo "reshard: all checks passed"
exit $((fails > 0))
