#!/usr/bin/env bash
# autohet profile measures the engine's layers and writes a profile the planner reads.
set -uo pipefail
BIN="$1"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
$BIN profile --help | grep -q usage || fail "profile --help"
$BIN profile --model tiny-gpt --out "$TMP/p.json" --seq 32 --tp 1,2 --mb 1,2 --reps 2 >"$TMP/out" || fail "profile run"
grep -q "block" "$TMP/out" || fail "no per-layer table"
jq -e '.format == "autohet-profile" and .seq == 32 and (.devices.cpu | keys | length) == 2 and
       (.devices.cpu["2"]["2"] | length) == 6 and
       all(.devices.cpu[][][]; (.[0] > 0) and (.[1] > 0) and (.[2] >= 0))' "$TMP/p.json" >/dev/null \
  || fail "profile JSON: format, grid or per-layer costs"
# blocks are measured once and share one cost; the head differs from a block
jq -e '.devices.cpu["1"]["1"] as $e | ($e["1"] == $e["4"]) and ($e["1"] != $e["5"])' "$TMP/p.json" >/dev/null \
  || fail "block / head entries"
$BIN plan --model tiny-gpt --cluster 1x2xcpu --global-batch 8 --seq 32 --profile "$TMP/p.json" --quiet \
  --json "$TMP/plan.json" || fail "plan --profile"
jq -e '.profile_source | startswith("measured")' "$TMP/plan.json" >/dev/null || fail "plan did not use the profile"
$BIN profile --model tiny-gpt --out "$TMP/x.json" --tp 3 >/dev/null 2>"$TMP/e"
[ $? -eq 2 ] && grep -q "does not divide" "$TMP/e" || fail "--tp 3: $(cat "$TMP/e")"
$BIN profile --model tiny-gpt >/dev/null 2>"$TMP/e"
[ $? -eq 2 ] && grep -q "required" "$TMP/e" || fail "missing --out: $(cat "$TMP/e")"
[ $fails -eq 0 ] && echo "cli_profile: all checks passed"
exit $fails
