#!/usr/bin/env bash
# train --emulate (docs/engine.md, "Emulated devices"): a 2-stage pipeline of tiny-gpt on an emulated fast and
# slow device (tests/fixtures/emu-devices.json) whose ops the analytic model makes milliseconds long. Every
# compute op of the engine's trace lasts at least the time `autohet simulate` gives the same op (a sleep ends
# no earlier than asked, whatever the load: the bound cannot fail on a busy machine), the run ends with its
# count of emulated ops (one per forward, backward and optimizer step of every rank) and how late their sleeps
# woke up (what the trace shows), and a model that is not a profile is one line and exit 2.
. "$(dirname "$0")/common.sh"
PLAN="$PLANS/emu-2stage.json" DEV="$FIX/emu-devices.json"
"$BIN" simulate "$PLAN" --devices "$DEV" --trace "$TMP/sim.json" --quiet || fail "simulate"
mpirun -np 2 --bind-to none "$BIN" train --model tiny-gpt --data "$FIX/text" --plan "$PLAN" --devices "$DEV" \
  --emulate analytic --steps 3 --eval-every 0 --trace "$TMP/run.json" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "train --emulate"; }
# 2 ranks x 3 steps x (4 forwards + 4 backwards + 1 optimizer)
grep -q "^emulated devices: 54 compute ops" "$TMP/out" || fail "no count of 54 emulated ops: $(grep emulated "$TMP/out")"
# per rank (the simulator's stage) and kind: the simulated duration, the engine's shortest (traced steps 2-3)
for kind in forward backward; do
  sim=$(jq -c --arg k "$kind" '[.traceEvents[] | select(.ph == "X" and (.name | startswith($k + " mb"))) | {p: .pid, d: .dur}]
                               | group_by(.p) | map(.[0].d)' "$TMP/sim.json")
  run=$(jq -c --arg k "$kind" '[.traceEvents[] | select(.ph == "X" and (.name | startswith($k + " mb"))) | {p: .pid, d: .dur}]
                               | group_by(.p) | map(map(.d) | min)' "$TMP/run.json")
  # (the trace maps each rank's clock onto rank 0's, offset and drift: a duration moves by the drift it estimates,
  # |drift_ppm| per million, which a loaded machine's ping-pong makes up to a few hundred)
  drift=$(jq -c '[.otherData.clock.ranks[] | .drift_ppm | fabs]' "$TMP/run.json")
  [ "$(jq -n --argjson s "$sim" --argjson r "$run" --argjson dr "$drift" '($s | length) == 2 and ($r | length) == 2 and
        ([range(2)] | all($r[.] >= $s[.] * (1 - $dr[.] * 1e-6) - 1))')" = true ] ||
    fail "$kind: the engine's shortest ops $run us are not at least the model's $sim us (clock drift mapped: $drift ppm)"
done
# the summary's lateness (how late the ops' sleeps woke up, on average over the ops that did not overrun) is what
# the trace shows: the traced compute ops' mean excess over the model's times (both measure the same ops; a loaded
# machine moves both). Ops that overran (a slow build: the sanitizers) add their overrun to the trace's excess
# alone, so then the lateness can only be the smaller.
late=$(grep -o 'ended [0-9.]* us late on average' "$TMP/out" | grep -o '[0-9.]*')
overruns=$(grep -o 'compute ops, [0-9]* computed longer' "$TMP/out" | grep -o '[0-9]*' | head -1)
excess=$(jq -n --slurpfile s "$TMP/sim.json" --slurpfile r "$TMP/run.json" '
  def ops(t): [t.traceEvents[] | select(.ph == "X") | {p: .pid, k: (.name | split(" ")[0]), d: .dur}
               | select(.k == "forward" or .k == "backward" or .k == "optimizer")];
  (ops($s[0]) | group_by([.p, .k]) | map({key: "\(.[0].p)\(.[0].k)", value: .[0].d}) | from_entries) as $m
  | ops($r[0]) | map(.d - $m["\(.p)\(.k)"]) | add / length')
[ -n "$late" ] && awk -v l="$late" -v e="$excess" -v o="${overruns:-0}" 'BEGIN { d = l - e; d = d < 0 ? -d : d
    m = l > e ? l : e; exit !(l >= 0 && (o == 0 ? d <= 0.5 * m + 200 : l <= 1.5 * e + 200)) }' ||
  fail "the summary's lateness ${late:-none} us is not the trace's mean excess $excess us"
"$BIN" train --model tiny-gpt --data "$FIX/text" --emulate "$TMP/none.json" --steps 1 >"$TMP/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$TMP/bad.out")" = 1 ] && grep -q -- "--emulate" "$TMP/bad.out" ||
  fail "a missing --emulate profile: exit $rc, $(cat "$TMP/bad.out")"
[ $fails = 0 ] && echo "cli_train_emulate: ok"
exit $((fails > 0))
