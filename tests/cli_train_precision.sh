#!/usr/bin/env bash
# autohet train --precision: fp32 is the default; bf16 (bf16 matmul operands, fp32 accumulation and master
# weights) trains tiny-gpt on the text fixtures within 2% of fp32's loss at every one of 30 steps, and the
# start-up line says so; on a CPU without AVX512_BF16 (or a build without oneDNN) --precision bf16 is one
# line on stderr and exit 2, never a slower silent fallback. An unknown precision is bad input. A plan
# costed at bf16 gets a start-up note that the engine sends fp32 tensors.
. "$(dirname "$0")/common.sh"

ARGS=(--model tiny-gpt --data "$FIX/text" --steps 30 --seed 4 --global-batch 4 --micro-batch 2 --seq 64 --eval-every 0)
"$BIN" train "${ARGS[@]}" --log "$TMP/fp32.log" >"$TMP/fp32.out" 2>&1 || { cat "$TMP/fp32.out"; fail "fp32 run"; }
"$BIN" train "${ARGS[@]}" --precision fp32 --log "$TMP/fp32b.log" >/dev/null 2>&1 || fail "--precision fp32 run"
[ "$(jq -s 'map(.loss)' "$TMP/fp32.log")" = "$(jq -s 'map(.loss)' "$TMP/fp32b.log")" ] ||
  fail "--precision fp32 is not the default: the losses differ"

"$BIN" train "${ARGS[@]}" --precision bf16 --log "$TMP/bf16.log" >"$TMP/bf16.out" 2>"$TMP/bf16.err"
rc=$?
if grep -qw avx512_bf16 /proc/cpuinfo && ! grep -q "oneDNN" "$TMP/bf16.err"; then
  [ $rc = 0 ] || { cat "$TMP/bf16.out" "$TMP/bf16.err"; fail "bf16 run on a CPU with AVX512_BF16: exit $rc"; }
  head -1 "$TMP/bf16.out" | grep -q ", bf16 matmuls (oneDNN)" || fail "start-up line: $(head -1 "$TMP/bf16.out")"
  head -1 "$TMP/fp32.out" | grep -q "bf16 matmuls" && fail "fp32 start-up line names bf16 matmuls"
  worst=$(jq -n --slurpfile a "$TMP/fp32.log" --slurpfile b "$TMP/bf16.log" \
    '[range($a | length) | (($b[.].loss - $a[.].loss) / $a[.].loss) | fabs] | max')
  n=$(jq -s length "$TMP/bf16.log")
  [ "$n" = 30 ] || fail "bf16 log has $n steps"
  [ "$(echo "$worst <= 0.02" | bc -l)" = 1 ] || fail "bf16 loss off fp32 by $worst (relative) at some step"
  [ "$(echo "$worst > 0" | bc -l)" = 1 ] || fail "bf16 losses identical to fp32: the bf16 path did not run"
  drop=$(jq -s '(.[0].loss - .[-1].loss)' "$TMP/bf16.log")
  [ "$(echo "$drop > 0.5" | bc -l)" = 1 ] || fail "bf16 loss fell by only $drop"
  echo "bf16 vs fp32: worst relative loss difference over 30 steps $worst"
else
  [ $rc = 2 ] || fail "bf16 where it cannot run: exit $rc, want 2"
  [ "$(wc -l <"$TMP/bf16.err")" = 1 ] || fail "bf16 refusal is not one line: $(cat "$TMP/bf16.err")"
  grep -q -- "--precision bf16: .*\(AVX512_BF16\|oneDNN\)" "$TMP/bf16.err" || fail "refusal: $(cat "$TMP/bf16.err")"
fi

"$BIN" train "${ARGS[@]}" --precision fp16 >/dev/null 2>"$TMP/bad.err"
rc=$?
[ $rc = 2 ] || fail "--precision fp16: exit $rc"
[ "$(wc -l <"$TMP/bad.err")" = 1 ] && grep -q -- "--precision fp16: expected fp32 or bf16" "$TMP/bad.err" ||
  fail "--precision fp16 message: $(cat "$TMP/bad.err")"
# a plan costed at half precision: the start-up says the engine sends fp32 and how to simulate what it sends;
# a plan at fp32 gets no such note
for prec in bf16 fp32; do
  "$BIN" plan --model tiny-gpt --cluster 1x1xcpu --global-batch 4 --micro-batch 2 --seq 64 --precision $prec --quiet \
    --json "$TMP/plan-$prec.json" || fail "plan --precision $prec"
  "$BIN" train --model tiny-gpt --data "$FIX/text" --steps 1 --eval-every 0 --plan "$TMP/plan-$prec.json" \
    >"$TMP/plan-$prec.out" 2>&1 || { cat "$TMP/plan-$prec.out"; fail "train --plan (plan at $prec)"; }
done
grep -q "^note: $TMP/plan-bf16.json is costed at bf16 (2-byte activations and gradients); this engine sends fp32 ones .*autohet simulate $TMP/plan-bf16.json --precision fp32" \
  "$TMP/plan-bf16.out" || fail "a bf16 plan's start-up has no precision note: $(head -3 "$TMP/plan-bf16.out")"
grep -q "^note: .* is costed at" "$TMP/plan-fp32.out" && fail "an fp32 plan's start-up has a precision note"
[ $fails = 0 ] && echo "cli_train_precision: ok"
exit $fails
