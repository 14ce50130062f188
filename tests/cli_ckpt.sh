#!/usr/bin/env bash
# Layer checkpoints of the engine: a 4-rank run (2 replicas x 2 stages) that
# checkpoints every 3 steps is killed at step 5; resuming from the checkpoint
# under other plans (1 x 4 stages, asymmetric 1 + 3 stages) and on one rank
# ends at the parameters of the uninterrupted run (1e-5 relative). Shards are
# safetensors (header checked byte by byte here); a flipped byte in one node's
# copy is detected and the other node's copy is used; with both copies bad the
# resume fails naming the layer; a checkpoint of another schedule is refused.
. "$(dirname "$0")/common.sh"
MPIRUN=(timeout -k 10 300 mpirun -np 4 --bind-to none) # -k: a deadlocked mpirun (wait_mpirun, common.sh)
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 6 --seed 3 --eval-every 3 --global-batch 8 --micro-batch 2 --seq 64)

AUTOHET_DUMP_PARAMS="$TMP/ref.bin" "$BIN" train "${ARGS[@]}" --log "$TMP/ref.log" >"$TMP/ref.out" 2>&1 \
  || { cat "$TMP/ref.out"; fail "reference run"; }
# rank 2 dies at the start of step 5 (index 4); the checkpoint of step 3 is on disk
AUTOHET_TEST_KILL_RANK=2 AUTOHET_TEST_KILL_STEP=4 "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" \
  --plan "$PLANS/tiny-2x2.json" --ckpt-dir "$TMP/ck" --ckpt-every 3 >"$TMP/kill.out" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "the killed run exited 0"
grep -q "checkpoint: step 3" "$TMP/kill.out" || fail "no checkpoint at step 3"
jq -e '.step == 3 and .format == "autohet-train-state"' "$TMP/ck/state.json" >/dev/null || fail "state.json"
for node in n0 n1; do
  jq -e '.format == "autohet-manifest" and (.shards | length) == 6 and all(.shards[]; .step == 3
         and (.xxh64 | length) == 16)' "$TMP/ck/$node/manifest.json" >/dev/null || fail "$node manifest"
done
ls "$TMP/ck"/*/*.tmp.* >/dev/null 2>&1 && fail "temporary files left behind"

# safetensors layout, read without autohet: u64 LE header length, JSON header, data
shard="$TMP/ck/n0/L002-tp0-s3.safetensors"
hl=$(od -An -t u8 -N 8 "$shard" | tr -d ' ')
size=$(stat -c %s "$shard")
tail -c +9 "$shard" | head -c "$hl" >"$TMP/hdr.json"
jq -e --argjson size "$size" --argjson hl "$hl" '
  [to_entries[] | select(.key != "__metadata__") | .value] as $t
  | all($t[]; .dtype == "F32" and (.data_offsets[1] - .data_offsets[0]) == 4 * (.shape | reduce .[] as $d (1; . * $d)))
  and ([$t[].data_offsets[1]] | max) == ($size - 8 - $hl)
  and (keys | any(startswith("param."))) and (keys | any(startswith("adam_m."))) and (keys | any(startswith("adam_v.")))
  and .__metadata__.layer == "2" and .__metadata__.step == "3"' "$TMP/hdr.json" >/dev/null \
  || fail "safetensors header of $shard"
jq -e --arg f "$(basename "$shard")" --argjson size "$size" '.shards[] | select(.file == $f) | .bytes == $size' \
  "$TMP/ck/n0/manifest.json" >/dev/null || fail "manifest size of $shard"

resume() { # plan-or-empty out-prefix
  local plan=() run=("${MPIRUN[@]}")
  [ -n "$1" ] && plan=(--plan "$PLANS/$1.json")
  [ -z "$1" ] && run=(timeout 300)
  AUTOHET_DUMP_PARAMS="$TMP/$2.bin" "${run[@]}" "$BIN" train "${ARGS[@]}" "${plan[@]}" --resume "$TMP/ck" \
    --log "$TMP/$2.log" --trace "$TMP/$2.trace.json" >"$TMP/$2.out" 2>&1
}
for p in tiny-1x4 tiny-asym ""; do
  name=${p:-one-rank}
  resume "$p" "$name" || { tail -5 "$TMP/$name.out"; fail "$name: resume failed"; continue; }
  grep -q "resumed from .* at step 3" "$TMP/$name.out" || fail "$name: no resume line"
  [ "$(wc -l <"$TMP/$name.log")" -eq 3 ] || fail "$name: expected steps 4-6 only in the log"
  jq -e -s --slurpfile r <(jq -s '.[3:]' "$TMP/ref.log") \
    '[range(0; 3) as $i | (.[$i].loss - $r[0][$i].loss) | fabs / $r[0][$i].loss] | max < 1e-5' "$TMP/$name.log" \
    >/dev/null || fail "$name: loss after resume differs from the uninterrupted run"
  out=$("$CMP" "$TMP/ref.bin" "$TMP/$name.bin" 1e-5) || fail "$name: parameters differ: $out"
  # the trace skips the resumed run's warm-up step (4): steps 5 and 6 (it was empty before: only step 2 of a
  # run was ever its first traced)
  "$BIN" analyze "$TMP/$name.trace.json" >"$TMP/$name.trace.out" 2>&1 && grep -q " 2 step(s) of " "$TMP/$name.trace.out" \
    || fail "$name: the resumed run's trace: $(head -1 "$TMP/$name.trace.out")"
  echo "resume with ${p:-one rank}: $out"
done

# a resume continues its --log: the killed run logged steps 1-5 (and was cut mid-line), the checkpoint is
# of step 3: steps 1-3 stay as they were, 4-6 are the resumed run's, every step once
{ head -5 "$TMP/ref.log"; printf '{"step": 6, "time_s": 1.2'; } >"$TMP/cont.log"
timeout 300 "$BIN" train "${ARGS[@]}" --resume "$TMP/ck" --log "$TMP/cont.log" >"$TMP/cont.out" 2>&1 \
  || { tail -5 "$TMP/cont.out"; fail "resume into an existing --log failed"; }
[ "$(jq -s -c '[.[].step]' "$TMP/cont.log")" = "[1,2,3,4,5,6]" ] \
  || fail "resume with an existing --log: steps $(jq -s -c '[.[].step]' "$TMP/cont.log" 2>&1), want 1-6 once each"
cmp -s <(head -3 "$TMP/cont.log") <(head -3 "$TMP/ref.log") || fail "resume rewrote the log's steps 1-3"
grep -q '"time_s": 1.2$' "$TMP/cont.log" && fail "resume kept the torn line"

# a corrupt manifest in n0's directory: the resume restores n0's layers from n1's copies, the next
# checkpoint sets the manifest aside (manifest.json.corrupt) and commits, and the result is unchanged
cp -r "$TMP/ck" "$TMP/ck7"
truncate -s 200 "$TMP/ck7/n0/manifest.json"
AUTOHET_DUMP_PARAMS="$TMP/ck7.bin" "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-2x2.json" \
  --resume "$TMP/ck7" --ckpt-dir "$TMP/ck7" --ckpt-every 3 >"$TMP/ck7.out" 2>&1 \
  || { tail -5 "$TMP/ck7.out"; fail "resume with a corrupt manifest failed"; }
grep -q "n0/manifest.json: .*trying the next tier" "$TMP/ck7.out" || fail "the corrupt manifest was not reported"
grep -q "set aside" "$TMP/ck7.out" || fail "the corrupt manifest was not set aside"
[ -f "$TMP/ck7/n0/manifest.json.corrupt" ] || fail "no manifest.json.corrupt"
jq -e '.step == 6' "$TMP/ck7/state.json" >/dev/null || fail "no checkpoint of step 6 after the corrupt manifest"
jq -e '(.shards | length) == 6 and all(.shards[]; .step == 6)' "$TMP/ck7/n0/manifest.json" >/dev/null \
  || fail "n0's new manifest"
out=$("$CMP" "$TMP/ref.bin" "$TMP/ck7.bin" 1e-5) || fail "corrupt-manifest resume: parameters differ: $out"

# a flipped byte in n0's copy of layer 2: detected, n1's copy used, same result
printf '\x00' | dd of="$TMP/ck/n0/L002-tp0-s3.safetensors" bs=1 seek=$((size - 3)) conv=notrunc 2>/dev/null
resume tiny-1x4 flip || { tail -5 "$TMP/flip.out"; fail "resume with one corrupt copy failed"; }
grep -q "checksum mismatch" "$TMP/flip.out" || fail "corrupt copy not reported"
out=$("$CMP" "$TMP/ref.bin" "$TMP/flip.bin" 1e-5) || fail "corrupt-copy resume: parameters differ: $out"
# both copies bad (n1's truncated): the resume fails and names the layer
truncate -s 100 "$TMP/ck/n1/L002-tp0-s3.safetensors"
resume tiny-1x4 bad; rc=$?
[ $rc -eq 2 ] || fail "resume with no good copy of layer 2: exit $rc, expected 2 (bad input)"
grep -q "layer 2" "$TMP/bad.out" || fail "the failure does not name layer 2: $(tail -2 "$TMP/bad.out")"
# each bad copy is reported once (the resharding fallback read the rank's own shards again and repeated both lines)
[ "$(grep -c "n0/L002-tp0-s3.safetensors: checksum mismatch.*trying the next tier" "$TMP/bad.out")" -eq 1 ] &&
  [ "$(grep -c "n1/L002-tp0-s3.safetensors: .*trying the next tier" "$TMP/bad.out")" -eq 1 ] ||
  fail "each bad copy not reported once: $(grep 'trying the next tier' "$TMP/bad.out")"
# no manifest in either node's directory: the failure names the missing file (it said only "no tier holds a good copy")
cp -r "$TMP/ck" "$TMP/nomf" && rm "$TMP/nomf/n0/manifest.json" "$TMP/nomf/n1/manifest.json"
"${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-1x4.json" --resume "$TMP/nomf" >"$TMP/nomf.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "layer 0 (TP rank 0 of 1) at step 3: no tier holds a good copy; $TMP/nomf/n0/manifest.json: no such file" \
  "$TMP/nomf.out" || fail "resume without manifests: exit $rc, $(grep -v '^autohet train: tiny' "$TMP/nomf.out" | tail -2)"

# checkpoints every 2 steps: only the newest step's shards stay, and they are what the manifest lists
"$BIN" train "${ARGS[@]}" --ckpt-dir "$TMP/ck2" --ckpt-every 2 >"$TMP/ck2.out" 2>&1 || fail "run with --ckpt-every 2"
[ "$(grep -c '^checkpoint: step' "$TMP/ck2.out")" -eq 3 ] || fail "expected checkpoints at steps 2, 4, 6"
files=$(cd "$TMP/ck2" && ls */*.safetensors | sort | tr '\n' ' ')
listed=$(cd "$TMP/ck2" && for m in */manifest.json; do d=$(dirname "$m"); jq -r --arg d "$d" '.shards[] | "\($d)/\(.file)"' "$m"; done | sort | tr '\n' ' ')
[ "$files" = "$listed" ] || fail "shards on disk ($files) != shards in the manifests ($listed)"
echo "$files" | grep -q -- "-s6.safetensors" || fail "no step-6 shards"

# the last step is checkpointed whatever K (the memory tier goes with a run: the durable tiers keep its final
# model): 6 steps every 4 are steps 4 and 6; resumed at its last step, nothing is trained and another
# --ckpt-dir gets step 6 with the uninterrupted run's parameters
"$BIN" train "${ARGS[@]}" --ckpt-dir "$TMP/ck4" --ckpt-every 4 >"$TMP/ck4.out" 2>&1 || fail "run with --ckpt-every 4"
[ "$(grep -c '^checkpoint: step' "$TMP/ck4.out")" -eq 2 ] && grep -q '^checkpoint: step 6' "$TMP/ck4.out" ||
  fail "expected checkpoints at steps 4 and 6 (the last): $(grep '^checkpoint' "$TMP/ck4.out" | tr '\n' ' ')"
jq -e '.step == 6' "$TMP/ck4/state.json" >/dev/null || fail "--ckpt-every 4: state.json at step $(jq .step "$TMP/ck4/state.json")"
AUTOHET_DUMP_PARAMS="$TMP/ck4b.bin" "$BIN" train "${ARGS[@]}" --resume "$TMP/ck4" --ckpt-dir "$TMP/ck4b" --ckpt-every 4 \
  --trace "$TMP/ck4b.trace.json" >"$TMP/ck4b.out" 2>&1 || { tail -3 "$TMP/ck4b.out"; fail "resume at the last step into another --ckpt-dir"; }
# no step trained, no trace: one is not replaced by an empty one
[ ! -e "$TMP/ck4b.trace.json" ] && grep -q "no step trained: no trace written" "$TMP/ck4b.out" || fail "resumed at the last step: a trace"
jq -e '.step == 6' "$TMP/ck4b/state.json" >/dev/null 2>&1 || fail "resumed at the last step: no step 6 in the new --ckpt-dir"
out=$("$CMP" "$TMP/ref.bin" "$TMP/ck4b.bin" 1e-5) || fail "resumed at the last step: parameters differ: $out"

# kill -9 of the rank that is writing a shard right now (its PID is in the temporary file's name),
# three times: the resume never sees a torn shard and ends at the uninterrupted run's parameters
SARGS=(--model small-gpt --data "$FIX/text" --steps 6 --seed 5 --eval-every 0 --global-batch 8 --micro-batch 2 --seq 64)
AUTOHET_DUMP_PARAMS="$TMP/sref.bin" "$BIN" train "${SARGS[@]}" >"$TMP/sref.out" 2>&1 || fail "small-gpt reference"
for i in 1 2 3; do
  d="$TMP/kc$i"
  "${MPIRUN[@]}" "$BIN" train "${SARGS[@]}" --plan "$PLANS/small-2x2.json" --ckpt-dir "$d" --ckpt-every 1 \
    >"$TMP/kc$i.out" 2>&1 &
  mp=$!
  killed=""
  want=$((1 + RANDOM % 4)) # a random step's checkpoint, at whichever shard is being written then
  while kill -0 $mp 2>/dev/null && [ -z "$killed" ]; do
    [ -f "$d/state.json" ] && [ "$(jq .step "$d/state.json" 2>/dev/null || echo 0)" -ge $want ] || continue
    for f in "$d"/*/*.tmp.*; do
      [ -e "$f" ] && kill -9 "${f##*.tmp.}" 2>/dev/null && killed="$f" && break
    done
  done
  wait_mpirun $mp 4
  [ -n "$killed" ] || { fail "kill $i: never caught a shard being written"; continue; }
  step=$(jq .step "$d/state.json")
  AUTOHET_DUMP_PARAMS="$TMP/kc$i.bin" "${MPIRUN[@]}" "$BIN" train "${SARGS[@]}" --plan "$PLANS/small-2x2.json" \
    --resume "$d" >"$TMP/kr$i.out" 2>&1 || { tail -3 "$TMP/kr$i.out"; fail "kill $i: resume failed"; continue; }
  out=$("$CMP" "$TMP/sref.bin" "$TMP/kc$i.bin" 1e-5) || fail "kill $i: parameters differ: $out"
  echo "killed the writer of $(basename "$killed") (committed step $step): resumed, $out"
done

# kill -9 of rank 0 inside the commit of step 4 (checkpoints every 2 steps): after the manifests list
# step 4 but before state.json names it, and after state.json but before the manifests drop step 2.
# The resume continues from the step state.json names (2 or 4), ends at the uninterrupted run's
# parameters, and leaves no temporary file (a stale state.json.tmp of a dead writer included, and one of
# the manifests rank 0 keeps a copy of in DIR/.reported).
for point in manifests state; do
  d="$TMP/kw-$point"
  AUTOHET_TEST_KILL_COMMIT="$point@4" "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-2x2.json" \
    --ckpt-dir "$d" --ckpt-every 2 >"$TMP/kw-$point.out" 2>&1 && fail "$point: the killed run exited 0"
  want=$([ $point = manifests ] && echo 2 || echo 4)
  [ "$(jq .step "$d/state.json")" -eq "$want" ] || fail "$point: state.json at step $(jq .step "$d/state.json"), want $want"
  jq -e '[.shards[].step] | (index(2) != null) and (index(4) != null)' "$d/n0/manifest.json" >/dev/null \
    || fail "$point: the manifest does not list both steps 2 and 4 in the commit window"
  sh -c 'exit 0' & dead=$!; wait $dead
  echo junk >"$d/state.json.tmp.$dead"
  mkdir -p "$d/.reported/n0" && echo junk >"$d/.reported/n0/manifest.json.tmp.$dead" # rank 0 killed reporting
  AUTOHET_DUMP_PARAMS="$TMP/kw-$point.bin" "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-2x2.json" \
    --resume "$d" --ckpt-dir "$d" --ckpt-every 2 >"$TMP/kwr-$point.out" 2>&1 \
    || { tail -3 "$TMP/kwr-$point.out"; fail "$point: resume failed"; continue; }
  grep -q "resumed from .* at step $want" "$TMP/kwr-$point.out" || fail "$point: did not resume at step $want"
  out=$("$CMP" "$TMP/ref.bin" "$TMP/kw-$point.bin" 1e-5) || fail "$point: parameters differ: $out"
  left=$(find "$d" -name '*.tmp.*' | tr '\n' ' ')
  [ -z "$left" ] || fail "$point: temporary files left after the resume: $left"
  jq -e 'all(.shards[]; .step == 6)' "$d"/n*/manifest.json >/dev/null || fail "$point: manifests not at step 6"
  echo "killed in the commit of step 4 after the $point: resumed at step $want, $out"
  # resumed at the last step again: nothing to train, so no commit sweeps; the restore must (kill_harness
  # once found a reported manifest's temporary left this way)
  echo junk >"$d/.reported/n0/manifest.json.tmp.$dead"
  "${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-2x2.json" --resume "$d" --ckpt-dir "$d" \
    --ckpt-every 2 >"$TMP/kwe-$point.out" 2>&1 || fail "$point: the resume at the last step failed"
  left=$(find "$d" -name '*.tmp.*' | tr '\n' ' ')
  [ -z "$left" ] || fail "$point: temporary files left after a resume at the last step: $left"
done

# the trace records each checkpoint on the training thread (docs/analyze.md): per rank a "checkpoint disk" and a
# "checkpoint cloud" after steps 2, 4 and 6, holding the rank's layers and the bytes of their shards (the files
# less their safetensors headers); analyze gives each rank's checkpoint time its own column, and the diagnosis
# names the traced saves with their tiers
"${MPIRUN[@]}" "$BIN" train "${ARGS[@]}" --plan "$PLANS/tiny-2x2.json" --ckpt-dir "$TMP/ckt" --ckpt-every 2 \
  --ckpt-cloud "$TMP/ckt-cloud" --trace "$TMP/ckt.json" >"$TMP/ckt.out" 2>&1 || fail "traced run with checkpoints"
for r in 0 1 2 3; do
  for tier in disk cloud; do
    n=$(jq --argjson r $r --arg t "checkpoint $tier" '[.traceEvents[] | select(.pid == $r and .cat == "checkpoint"
          and .args.site == $t)] | length' "$TMP/ckt.json")
    [ "$n" = 3 ] || fail "rank $r: $n traced '$tier' checkpoints, expected 3 (steps 2, 4, 6)"
  done
  read -r a b bytes < <(jq -r --argjson r $r '[.traceEvents[] | select(.pid == $r and .cat == "checkpoint")][0]
                        | "\(.args.layers[0]) \(.args.layers[1]) \(.args.bytes)"' "$TMP/ckt.json")
  size=0
  for ((l = a; l < b; l++)); do
    f=$(ls "$TMP"/ckt/*/"$(printf 'L%03d' $l)"-tp0-s6.safetensors 2>/dev/null | head -1)
    [ -n "$f" ] && size=$((size + $(stat -c %s "$f")))
  done
  [ "$b" -gt "$a" ] && [ "$bytes" -le "$size" ] && [ $((bytes * 100)) -ge $((size * 98)) ] \
    || fail "rank $r: a checkpoint of layers [$a, $b) records $bytes bytes; its shards hold $size"
done
"$BIN" analyze "$TMP/ckt.json" --diagnose --json "$TMP/ckt.an.json" >"$TMP/ckt.an" 2>&1 || fail "analyze the traced checkpoints"
grep -q "checkpoint ms" "$TMP/ckt.an" || fail "analyze: no checkpoint column"
jq -e '[.ranks[] | .checkpoint_s > 0] | all and length == 4' "$TMP/ckt.an.json" >/dev/null \
  || fail "analyze: a rank without checkpoint time"
jq -e '[.findings[], .not_established[] | select(.kind == "checkpoint_stall" and .op == "checkpoint disk+cloud")]
       | length == 1' "$TMP/ckt.an.json" >/dev/null || fail "the diagnosis does not name the traced checkpoints"

# another schedule or seed is refused before any work
"$BIN" train "${ARGS[@]}" --steps 8 --resume "$TMP/ck" >"$TMP/o" 2>&1; rc=$?
{ [ $rc -eq 2 ] && grep -q "state.json" "$TMP/o"; } || fail "--steps 8 against a --steps 6 checkpoint: rc $rc"
"$BIN" train "${ARGS[@]}" --seed 4 --resume "$TMP/ck" >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "another seed: rc $rc"
"$BIN" train "${ARGS[@]}" --ckpt-dir "$TMP/x" >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--ckpt-dir without --ckpt-every: rc $rc"
"$BIN" train "${ARGS[@]}" --resume "$TMP/nothing" >"$TMP/o" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--resume of a missing directory: rc $rc"

[ $fails -eq 0 ] && echo "ckpt: all checks passed"
exit $((fails > 0))
