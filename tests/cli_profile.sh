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
# inputs are checked before anything prints: a --seq beyond the learned positions, and a grid whose largest
# measurement does not fit this machine (one line naming the model, the configuration and both figures)
one_line() { # name expected-regex: exit 2, nothing on stdout, one line on stderr matching
  [ "$rc" -eq 2 ] || fail "$1: exit $rc, expected 2 ($(head -c 300 "$TMP/e"))"
  [ ! -s "$TMP/o" ] || fail "$1: printed before refusing: $(head -c 200 "$TMP/o")"
  [ "$(wc -l <"$TMP/e")" -eq 1 ] && grep -Eq -- "$2" "$TMP/e" || fail "$1: $(head -c 400 "$TMP/e")"
}
$BIN profile --model tiny-gpt --out "$TMP/x.json" --seq 100000 --tp 1 --mb 1 --reps 1 >"$TMP/o" 2>"$TMP/e"; rc=$?
one_line "--seq 100000" "--seq 100000 exceeds the 256 learned positions of model tiny-gpt"
# (the address-space limit in the Release build: AddressSanitizer's shadow memory needs terabytes of address
# space, so an ASan binary cannot start under ulimit -v at all; CI runs this test in both builds)
if ldd "$BIN" 2>/dev/null | grep -q libasan; then
  echo "cli_profile: the ulimit -v check is the Release build's (this binary is built with AddressSanitizer)"
else
  (ulimit -v 3000000; exec timeout 60 $BIN profile --model gpt3-175b --out "$TMP/x.json" --tp 1 --mb 1 --reps 1) \
    >"$TMP/o" 2>"$TMP/e"; rc=$?
  one_line "gpt3-175b under ulimit -v" "^autohet profile: model gpt3-175b: measuring its block at --tp 1 --mb 1 \
--seq 128 needs 3[0-9][.][0-9]+ GiB .*, more than this machine's [0-9.]+ GiB of address space left under the limit \\(ulimit -v\\)"
fi
timeout 60 $BIN profile --model llama2-70b --out "$TMP/x.json" --seq 1000000 --tp 1,8 --mb 1,64 --reps 1 >"$TMP/o" 2>"$TMP/e"
rc=$?
one_line "physical memory" "model llama2-70b: measuring its [a-z]+ at --tp 1 --mb 64 --seq 1000000 needs [0-9.]+ GiB .*GiB of physical memory"
[ -e "$TMP/x.json" ] && fail "a refused profile wrote its --out"
[ $fails -eq 0 ] && echo "cli_profile: all checks passed"
exit $fails
