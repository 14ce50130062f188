#!/usr/bin/env bash
# Per-stage tensor parallelism in the engine computes the same model as one
# process: plans whose stages have different TP degrees — three single-stage
# replicas of TP 1, 2 and 4; one pipeline going TP 1 -> 2 -> 4; two replicas
# that differ in both stage boundaries and degrees (GPT, tied embeddings
# across degrees); a LLaMA (GQA) plan of TP 1 and 2 replicas — under 1F1B,
# GPipe and interleaved 1F1B match the single-rank run: the loss of every
# step and its gradient norm within 1e-5 relative, the final parameters of a
# replica within 3e-6.
# A traced run shows the pipeline peers of rule 1 (docs/engine.md).
. "$(dirname "$0")/common.sh"
STEPS=4
reference() { # name model
  AUTOHET_DUMP_PARAMS="$TMP/$1.bin" "$BIN" train --model "$2" --data "$FIX/text" --steps $STEPS --seed 3 \
    --eval-every 2 --global-batch 8 --micro-batch 2 --seq 64 --log "$TMP/$1.log" >"$TMP/$1.out" 2>&1 \
    || { cat "$TMP/$1.out"; fail "single-rank run of $2"; }
}
reference ref-gpt tiny-gpt
reference ref-llama tiny-llama

# every step's FIELD of LOG (where the reference REF has one, >= 0) within 1e-5 relative of REF's
close_to() { # field ref-log log
  jq -e -s --arg f "$1" --slurpfile r <(jq -s . "$2") \
    'length == ($r[0] | length) and
     ([range(0; length) as $i | select($r[0][$i][$f] >= 0) | (.[$i][$f] - $r[0][$i][$f]) | fabs / $r[0][$i][$f]]
      | max < 1e-5)' "$3" >/dev/null
}

same_model() { # name ref ranks plan replica-to-dump [train flags...]
  local name="$1" ref="$2" np="$3" plan="$4" rep="$5"; shift 5
  AUTOHET_DUMP_PARAMS="$TMP/$name.bin" AUTOHET_DUMP_REPLICA="$rep" timeout 300 mpirun -np "$np" --bind-to none \
    -x AUTOHET_DUMP_PARAMS -x AUTOHET_DUMP_REPLICA "$BIN" train --data "$FIX/text" --steps $STEPS --seed 3 \
    --eval-every 2 --plan "$PLANS/$plan.json" --log "$TMP/$name.log" "$@" >"$TMP/$name.out" 2>&1 \
    || { tail -5 "$TMP/$name.out"; fail "$name: run failed"; return; }
  for field in loss val_loss grad_norm; do
    close_to "$field" "$TMP/$ref.log" "$TMP/$name.log" || fail "$name: $field differs from the single-rank run by more than 1e-5"
  done
  local out
  # 3e-6: OpenBLAS's AVX-512 (SkylakeX) kernels, which autohet selects on AVX-512 CPUs, sum the TP
  # shards' GEMMs in another order than the single rank: llama-tp12 ends 1.35e-6 apart (1e-6 held with
  # the SSE and AVX2 kernels)
  out=$("$CMP" "$TMP/$ref.bin" "$TMP/$name.bin" 3e-6) || fail "$name: parameters of replica $rep differ: $out"
  echo "$name (replica $rep): $out"
}
# (a) TP 1, 2 and 4 replicas of the whole model: every bucket is cut into 4 slices; the TP=4 replica's parameters
same_model dp-tp124 ref-gpt 7 tiny-mixtp-dp 2 --model tiny-gpt
# (b) one pipeline TP 1 -> 2 -> 4: a rank sends one activation to several receivers, some send no gradient
same_model pipe-tp124 ref-gpt 7 tiny-mixtp-pipe 0 --model tiny-gpt
same_model pipe-tp124-gpipe ref-gpt 7 tiny-mixtp-pipe 0 --model tiny-gpt --schedule gpipe
# (c) replicas (TP 2 -> 1) and (TP 1 -> 2) with other boundaries: mixed and uniform buckets, tied embeddings
# exchanged between stages of different degrees
same_model two-rep ref-gpt 6 tiny-mixtp-2rep 1 --model tiny-gpt
same_model two-rep-interleaved ref-gpt 6 tiny-mixtp-2rep 0 --model tiny-gpt --schedule interleaved
# ... and with every bucket's all-reduce started inside the backward: mixed buckets' slices packed and
# reduced non-blocking, unpacked at the wait (--overlap-dp)
same_model two-rep-overlap ref-gpt 6 tiny-mixtp-2rep 1 --model tiny-gpt --overlap-dp
same_model dp-tp124-overlap ref-gpt 7 tiny-mixtp-dp 2 --model tiny-gpt --overlap-dp
# (d) LLaMA, grouped-query attention: KV heads cut at TP 2 against a TP 1 replica
same_model llama-tp12 ref-llama 4 llama-mixtp 1 --model tiny-llama

# checkpoints of a mixed-degree plan: the two-replica plan (TP 2 -> 1 and TP 1 -> 2) checkpoints at step 3
# of 5 (a layer is held at degrees 1 and 2 by the two replicas: both are recorded); resuming under the same
# plan and on one rank (resharded) ends on the uninterrupted run's parameters
CK=(--model tiny-gpt --data "$FIX/text" --steps 5 --seed 3 --global-batch 8 --micro-batch 2 --seq 64)
AUTOHET_DUMP_PARAMS="$TMP/ck-ref.bin" timeout 300 mpirun -np 6 --bind-to none -x AUTOHET_DUMP_PARAMS "$BIN" train \
  "${CK[@]}" --plan "$PLANS/tiny-mixtp-2rep.json" --ckpt-dir "$TMP/ck" --ckpt-every 3 >"$TMP/ck-ref.out" 2>&1 \
  || { tail -5 "$TMP/ck-ref.out"; fail "mixed-degree run with checkpoints"; }
jq -e '[.shards[] | .tp_degree] | unique == [1, 2]' "$TMP/ck/n0/manifest.json" >/dev/null \
  || fail "node n0's manifest does not hold shards of degrees 1 and 2"
AUTOHET_DUMP_PARAMS="$TMP/ck-same.bin" timeout 300 mpirun -np 6 --bind-to none -x AUTOHET_DUMP_PARAMS "$BIN" train \
  "${CK[@]}" --plan "$PLANS/tiny-mixtp-2rep.json" --resume "$TMP/ck" >"$TMP/ck-same.out" 2>&1 \
  || { tail -5 "$TMP/ck-same.out"; fail "resume of the mixed-degree plan"; }
out=$("$CMP" "$TMP/ck-ref.bin" "$TMP/ck-same.bin" 1e-6) || fail "mixed-degree resume: parameters differ: $out"
AUTOHET_DUMP_PARAMS="$TMP/ck-one.bin" timeout 300 "$BIN" train "${CK[@]}" --resume "$TMP/ck" >"$TMP/ck-one.out" 2>&1 \
  || { tail -5 "$TMP/ck-one.out"; fail "one-rank resume of the mixed-degree checkpoint"; }
out=$("$CMP" "$TMP/ck-ref.bin" "$TMP/ck-one.bin" 1e-6) || fail "one-rank resume of a mixed checkpoint: parameters differ: $out"
echo "mixed-degree checkpoint: resumed under the same plan and on one rank, parameters $out"

# the peers of rule 1 in a trace of the TP 1 -> 2 -> 4 pipeline, one step of 4 micro-batches: rank 0 (stage 0)
# sends each activation to both TP ranks of stage 1; each of those to two of stage 2's four (ranks 3-6); backward
# only TP ranks 0 and 1 of stage 2 send (to their namesakes of stage 1), and only stage 1's TP rank 0 to stage 0;
# every send meets its receive (36 flows)
timeout 300 mpirun -np 7 --bind-to none "$BIN" train --model tiny-gpt --data "$FIX/text" --steps 1 --seed 3 \
  --plan "$PLANS/tiny-mixtp-pipe.json" --trace "$TMP/pipe.json" >"$TMP/pipe.out" 2>&1 || fail "traced pipeline run"
sends() { # rank kind
  jq --argjson r "$1" --arg k "$2" '[.traceEvents[] | select(.ph == "X" and .pid == $r and (.name | startswith($k)))] | length' \
    "$TMP/pipe.json"
}
got="$(sends 0 send_activation) $(sends 1 send_activation) $(sends 2 send_activation) $(sends 5 send_gradient)"
got="$got $(sends 3 send_gradient) $(sends 1 send_gradient) $(sends 2 send_gradient)"
[ "$got" = "8 8 8 0 4 4 0" ] || fail "trace: sends per rank (activations of ranks 0-2, gradients of ranks 5 3 1 2) $got, expected 8 8 8 0 4 4 0"
flows=$(jq '[.traceEvents[] | select(.ph == "s")] | length' "$TMP/pipe.json")
[ "$flows" = 36 ] || fail "trace: $flows send-receive flows, expected 36"
[ $fails -eq 0 ] && echo "cli_stage_tp: all checks passed"
exit $fails
