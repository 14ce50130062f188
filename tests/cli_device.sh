#!/usr/bin/env bash
# autohet train --device: cpu runs as without the flag (bitwise the same losses); an unknown device
# and cuda where it cannot run are one line and exit 2 before any work ("built without CUDA" or
# "no CUDA device visible"); where a GPU is visible, cuda trains and its losses equal cpu's within
# 1e-4 relative (docs/cuda.md).
. "$(dirname "$0")/common.sh"
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 3 --seed 2 --eval-every 0 --global-batch 4 --micro-batch 2 --seq 32)

"$BIN" train "${ARGS[@]}" --log "$TMP/plain.log" >"$TMP/plain.out" 2>&1 || { cat "$TMP/plain.out"; fail "run without --device"; }
"$BIN" train "${ARGS[@]}" --device cpu --log "$TMP/cpu.log" >"$TMP/cpu.out" 2>&1 || { cat "$TMP/cpu.out"; fail "--device cpu"; }
[ "$(jq -s -c 'map(.loss)' "$TMP/plain.log")" = "$(jq -s -c 'map(.loss)' "$TMP/cpu.log")" ] \
  || fail "--device cpu losses differ from the default's"

"$BIN" train "${ARGS[@]}" --device gpu >"$TMP/bad.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--device gpu: exit $rc, expected 2"
[ "$(wc -l <"$TMP/bad.out")" -eq 1 ] && grep -q "^autohet train: --device 'gpu': expected cpu or cuda$" "$TMP/bad.out" \
  || fail "--device gpu: $(cat "$TMP/bad.out")"

"$BIN" train "${ARGS[@]}" --device cuda --log "$TMP/cuda.log" >"$TMP/cuda.out" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then # a GPU is visible and the backend is built
  paste <(jq -s -r '.[].loss' "$TMP/cpu.log") <(jq -s -r '.[].loss' "$TMP/cuda.log") >"$TMP/pairs.txt"
  [ "$(wc -l <"$TMP/pairs.txt")" -eq 3 ] || fail "--device cuda: $(wc -l <"$TMP/pairs.txt") logged steps, expected 3"
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) bad = 1 } END { exit bad }' "$TMP/pairs.txt" \
    || { cat "$TMP/pairs.txt"; fail "--device cuda losses differ from cpu's by more than 1e-4 relative"; }
else
  [ "$rc" -eq 2 ] || { cat "$TMP/cuda.out"; fail "--device cuda without a usable GPU: exit $rc, expected 2"; }
  [ "$(wc -l <"$TMP/cuda.out")" -eq 1 ] \
    && grep -Eq "^autohet train: --device cuda: (built without CUDA|no CUDA device visible( \(.*\))?)$" "$TMP/cuda.out" \
    || fail "--device cuda without a GPU: $(cat "$TMP/cuda.out")"
  [ ! -e "$TMP/cuda.log" ] || fail "--device cuda without a GPU did work (wrote its --log)"
  # the engine's own selection says the same
  AUTOHET_BACKEND=cuda "$BIN" train "${ARGS[@]}" >"$TMP/env.out" 2>&1
  rc=$?
  [ "$rc" -eq 2 ] && grep -Eq "AUTOHET_BACKEND=cuda: (built without CUDA|no CUDA device visible)" "$TMP/env.out" \
    || fail "AUTOHET_BACKEND=cuda without a GPU: exit $rc: $(cat "$TMP/env.out")"
fi
"$BIN" train --help >"$TMP/help.out" 2>&1 && grep -q -- "--device cpu|cuda" "$TMP/help.out" || fail "--help lacks --device"
[ "$fails" -eq 0 ] && echo "cli_device: ok"
exit "$fails"
