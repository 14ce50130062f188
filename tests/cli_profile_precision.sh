#!/usr/bin/env bash
# autohet profile --precision: bf16 measures the layers with the bf16 matmuls autohet train --precision bf16
# runs and records "precision": "bf16" in the document, which autohet plan --profile reads; the default is fp32
# and says so. Where bf16 cannot run (no AVX512_BF16, or a build without oneDNN) it is the one-line exit-2
# refusal train gives, never a silent fp32 profile. fp16, or a document with another precision, is bad input.
. "$(dirname "$0")/common.sh"

ARGS=(--model tiny-gpt --seq 32 --tp 1,2 --mb 1,2 --reps 1)
"$BIN" profile "${ARGS[@]}" --out "$TMP/fp32.json" >"$TMP/fp32.out" 2>&1 || { cat "$TMP/fp32.out"; fail "fp32 profile"; }
jq -e '.precision == "fp32"' "$TMP/fp32.json" >/dev/null || fail "default profile precision: $(jq -c .precision "$TMP/fp32.json")"

"$BIN" profile "${ARGS[@]}" --precision bf16 --out "$TMP/bf16.json" >"$TMP/bf16.out" 2>"$TMP/bf16.err"
rc=$?
if grep -qw avx512_bf16 /proc/cpuinfo && ! grep -q "oneDNN" "$TMP/bf16.err"; then
  echo "this CPU has AVX512_BF16: profiling at bf16"
  [ $rc = 0 ] || { cat "$TMP/bf16.out" "$TMP/bf16.err"; fail "bf16 profile on a CPU with AVX512_BF16: exit $rc"; }
  jq -e '.precision == "bf16" and (.source | endswith(", bf16 matmuls (oneDNN)")) and
         all(.devices.cpu[][][]; (.[0] > 0) and (.[1] > 0))' "$TMP/bf16.json" >/dev/null ||
    fail "bf16 profile document: precision $(jq -c .precision "$TMP/bf16.json"), source $(jq -c .source "$TMP/bf16.json")"
  "$BIN" plan --model tiny-gpt --cluster 1x2xcpu --global-batch 8 --seq 32 --profile "$TMP/bf16.json" --quiet \
    --json "$TMP/plan.json" >"$TMP/plan.out" 2>&1 || { cat "$TMP/plan.out"; fail "plan --profile of the bf16 profile"; }
  jq -e '.profile_source | startswith("measured")' "$TMP/plan.json" >/dev/null ||
    fail "plan did not use the bf16 profile: $(jq -c .profile_source "$TMP/plan.json")"
else
  echo "this CPU or build cannot run bf16 matmuls: checking the refusal"
  [ $rc = 2 ] || fail "bf16 profile where it cannot run: exit $rc, want 2"
  [ "$(wc -l <"$TMP/bf16.err")" = 1 ] || fail "bf16 refusal is not one line: $(cat "$TMP/bf16.err")"
  grep -q -- "--precision bf16: .*\(AVX512_BF16\|oneDNN\)" "$TMP/bf16.err" || fail "refusal: $(cat "$TMP/bf16.err")"
  [ -e "$TMP/bf16.json" ] && fail "the refused bf16 profile wrote a document"
fi

"$BIN" profile "${ARGS[@]}" --precision fp16 --out "$TMP/bad.json" >/dev/null 2>"$TMP/bad.err"
rc=$?
[ $rc = 2 ] || fail "--precision fp16: exit $rc"
[ "$(wc -l <"$TMP/bad.err")" = 1 ] && grep -q -- "--precision fp16: expected fp32 or bf16" "$TMP/bad.err" ||
  fail "--precision fp16 message: $(cat "$TMP/bad.err")"

# the reader validates the field: a document claiming fp16 is refused, naming the field
jq '.precision = "fp16"' "$TMP/fp32.json" >"$TMP/fp16doc.json"
"$BIN" plan --model tiny-gpt --cluster 1x2xcpu --global-batch 8 --seq 32 --profile "$TMP/fp16doc.json" --quiet \
  >/dev/null 2>"$TMP/doc.err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$TMP/doc.err")" = 1 ] && grep -q "precision" "$TMP/doc.err" ||
  fail "profile document with precision fp16: exit $rc, $(cat "$TMP/doc.err")"
[ $fails = 0 ] && echo "cli_profile_precision: ok"
exit $fails
