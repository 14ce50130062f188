#!/usr/bin/env bash
# The engine under every pipeline schedule computes the same model as one
# process: for one global batch and seed, the loss at every step and the final
# parameters of GPipe and interleaved 1F1B runs (2 replicas x 2 stages with
# different layer splits, asymmetric replicas, TP=2, V = 2 and 3 chunks per
# stage) match the single-rank run within 1e-5 relative, with the buckets'
# all-reduces overlapped with the backward too (--overlap-dp), whose traces
# show them starting inside it; a plan that cannot interleave is refused
# with its reason (exit 2).
. "$(dirname "$0")/common.sh"
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 4 --seed 3 --eval-every 2)
AUTOHET_DUMP_PARAMS="$TMP/ref.bin" "$BIN" train "${ARGS[@]}" --global-batch 8 --micro-batch 2 --seq 64 \
  --log "$TMP/ref.log" >"$TMP/ref.out" 2>&1 || { cat "$TMP/ref.out"; fail "single-rank run"; }

same_model() { # name ranks plan [train flags...]
  local name="$1" np="$2" plan="$3"; shift 3
  AUTOHET_DUMP_PARAMS="$TMP/$name.bin" timeout 300 mpirun -np "$np" --bind-to none "$BIN" train "${ARGS[@]}" \
    --plan "$PLANS/$plan.json" --log "$TMP/$name.log" "$@" >"$TMP/$name.out" 2>&1 \
    || { tail -5 "$TMP/$name.out"; fail "$name: run failed"; return; }
  jq -e -s --slurpfile r <(jq -s . "$TMP/ref.log") \
    '[range(0; length) as $i | (.[$i].loss - $r[0][$i].loss) | fabs / $r[0][$i].loss] | max < 1e-5' \
    "$TMP/$name.log" >/dev/null || fail "$name: loss differs from the single-rank run by more than 1e-5"
  jq -e -s --slurpfile r <(jq -s . "$TMP/ref.log") \
    '[range(0; length) as $i | select(.[$i].val_loss >= 0) | (.[$i].val_loss - $r[0][$i].val_loss) | fabs] | max < 1e-5' \
    "$TMP/$name.log" >/dev/null || fail "$name: validation loss differs from the single-rank run"
  local out
  out=$("$CMP" "$TMP/ref.bin" "$TMP/$name.bin" 1e-5) || fail "$name: parameters differ: $out"
  echo "$name: $out"
}
same_model gpipe-2x2 4 tiny-2x2 --schedule gpipe
same_model gpipe-asym 4 tiny-asym --schedule gpipe
same_model gpipe-tp2 4 tiny-tp2 --schedule gpipe
same_model interleaved-2x2 4 tiny-2x2 --schedule interleaved
same_model interleaved-2s-v3 2 tiny-2s-interleave --schedule interleaved --virtual-stages 3
same_model interleaved-tp2 4 tiny-tp2-2s --schedule interleaved --virtual-stages 2

# --overlap-dp: the buckets' all-reduces started inside the last backward (non-blocking), the same model
same_model overlap-asym 4 tiny-asym --overlap-dp
same_model overlap-interleaved-2x2 4 tiny-2x2 --schedule interleaved --overlap-dp
# ... and they do start inside it: in a traced run, rank 0 (replica 0 holds every layer; its middle bucket
# [1,4) is shared with replica 1) starts an all-reduce before its last backward of the step ends; without
# the flag every all-reduce starts after it
overlap_starts_early() { # trace -> "1" when the last step's first dp_allreduce starts before its last backward ends
  jq -r '[.traceEvents[] | select(.ph == "X" and .pid == 0)] as $e
    | ([$e[] | select(.name == "optimizer") | .ts] | sort | .[-2]) as $prev
    | [$e[] | select(.ts > $prev)] as $last
    | ([$last[] | select(.name | startswith("dp_allreduce")) | .ts] | min) as $dp
    | ([$last[] | select(.name | startswith("backward")) | .ts + .dur] | max) as $bwd
    | if $dp == null or $bwd == null then "none" elif $dp < $bwd then "1" else "0" end' "$1"
}
for ov in "" --overlap-dp; do
  timeout 300 mpirun -np 4 --bind-to none "$BIN" train "${ARGS[@]}" --steps 3 --plan "$PLANS/tiny-asym.json" $ov \
    --trace "$TMP/ov$ov.json" >"$TMP/ov.out" 2>&1 || { tail -5 "$TMP/ov.out"; fail "traced run $ov"; continue; }
  got=$(overlap_starts_early "$TMP/ov$ov.json")
  want=0; [ -n "$ov" ] && want=1
  [ "$got" = "$want" ] || fail "tiny-asym ${ov:-blocking}: an all-reduce starting inside the last backward: $got, expected $want"
done
echo "overlap-dp: rank 0's first bucket all-reduce starts inside its last backward (blocking: after it)"

# a 1F1B checkpoint resumes under the interleaved schedule (other layers per rank) and the run goes on as one
# process's: the loss of step 4 and the final parameters
# (stopped after the checkpoint of step 3, rank 0 killed at the start of step 4: a run that ends checkpoints
# its last step)
AUTOHET_TEST_KILL_RANK=0 AUTOHET_TEST_KILL_STEP=3 timeout 300 mpirun -np 4 --bind-to none "$BIN" train "${ARGS[@]}" \
  --plan "$PLANS/tiny-2x2.json" --ckpt-dir "$TMP/ck" --ckpt-every 3 >"$TMP/ck.out" 2>&1 && fail "the stopped run exited 0"
jq -e '.step == 3' "$TMP/ck/state.json" >/dev/null || fail "checkpointed run: state.json at step $(jq .step "$TMP/ck/state.json")"
AUTOHET_DUMP_PARAMS="$TMP/res.bin" timeout 300 mpirun -np 4 --bind-to none "$BIN" train "${ARGS[@]}" \
  --plan "$PLANS/tiny-2x2.json" --schedule interleaved --resume "$TMP/ck" --log "$TMP/res.log" >"$TMP/res.out" 2>&1 \
  || { tail -5 "$TMP/res.out"; fail "interleaved resume"; }
jq -e -s --slurpfile r <(jq -s . "$TMP/ref.log") \
  'length == 1 and ([.[] | . as $e | ($r[0][] | select(.step == $e.step) | .loss) as $w | ($e.loss - $w) | fabs / $w] | max < 1e-5)' \
  "$TMP/res.log" >/dev/null || fail "interleaved resume: the loss of step 4 differs from the uninterrupted run"
out=$("$CMP" "$TMP/ref.bin" "$TMP/res.bin" 1e-5) || fail "interleaved resume: parameters differ: $out"
echo "1f1b checkpoint resumed interleaved: $out"

# traced interleaved run: every rank runs forwards of V chunks per micro-batch
timeout 300 mpirun -np 2 --bind-to none "$BIN" train "${ARGS[@]}" --steps 2 --plan "$PLANS/tiny-2s-interleave.json" \
  --schedule interleaved --virtual-stages 3 --trace "$TMP/il.json" >"$TMP/il.out" 2>&1 || fail "traced interleaved run"
jq -e '[.traceEvents[] | select(.ph == "X" and (.name | startswith("forward")) and .pid == 0)] | length == 12' \
  "$TMP/il.json" >/dev/null || fail "interleaved trace: rank 0 should run 4 micro-batches x 3 chunks of forwards"

# refusals: one line, exit 2
expect_refusal() { # pattern ranks plan flags...
  local pat="$1" np="$2" plan="$3"; shift 3
  timeout 120 mpirun -np "$np" --bind-to none "$BIN" train "${ARGS[@]}" --plan "$PLANS/$plan.json" "$@" \
    >"$TMP/r.out" 2>"$TMP/r.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $plan $*"
  grep -q -- "$pat" "$TMP/r.err" || fail "stderr lacks '$pat': $(head -3 "$TMP/r.err")"
}
expect_refusal "one stage, nothing to interleave" 4 tiny-tp2 --schedule interleaved
expect_refusal "fewer than the 4 virtual stages" 2 tiny-2s-interleave --schedule interleaved --virtual-stages 4
expect_refusal "expected 1f1b, gpipe or interleaved" 2 tiny-2s-interleave --schedule zb
expect_refusal "virtual-stages goes with --schedule interleaved" 2 tiny-2s-interleave --virtual-stages 2
[ $fails -eq 0 ] && echo "cli_schedules: all checks passed"
exit $fails
