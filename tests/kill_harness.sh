#!/usr/bin/env bash
# Kill-test harness of the layer checkpoints (issue #13): N trials of `autohet train --ckpt-dir`
# killed with SIGKILL (at a random time, mid-shard: the process writing a shard's temporary file, or
# mid-commit: rank 0 between the commit's renames), of one rank or all, on 1, 2 or 4 ranks, with an
# optional corruption of one file (a flipped byte, a truncated or deleted shard, a corrupt manifest)
# before `--resume` into the same directory. Each resumed run is compared with an uninterrupted run of
# the same plan. Counted failures:
#   lost       a committed step lost: state.json after the kill names an older step than one it
#              named before, or the resume does not continue from the step state.json names
#   silent     a corruption the resume needed that it did not report
#   divergent  a resumed run whose final parameters differ from the uninterrupted run (1e-6 relative)
#   unclear    a failed resume without one line naming the layer, or a failure where a good copy existed
#   leftover   temporary files left after the resumed run's checkpoints
# usage: kill_harness.sh BIN FIXTURES COMPARE_FLOATS [TRIALS [SEED]]   (exit 1 if any failure counted)
. "$(dirname "$0")/common.sh"
TRIALS=${4:-10}
RANDOM=${5:-$$}
ARGS=(--model tiny-gpt --data "$FIX/text" --steps 8 --seed 3 --eval-every 0 --global-batch 8 --micro-batch 2 --seq 64)
CONFIGS=("1:" "2:tiny-2x1" "4:tiny-2x2" "4:tiny-tp2")
declare -A REF
for cfg in "${CONFIGS[@]}"; do # the uninterrupted run of each plan
  n=${cfg%%:*} plan=${cfg#*:}
  launch=(timeout -k 10 300 mpirun -np "$n" --bind-to none) planarg=(--plan "$PLANS/$plan.json")
  [ -z "$plan" ] && launch=(timeout -k 10 300) planarg=()
  AUTOHET_DUMP_PARAMS="$TMP/ref-$n$plan.bin" "${launch[@]}" "$BIN" train "${ARGS[@]}" "${planarg[@]}" \
    >"$TMP/ref.out" 2>&1 || { cat "$TMP/ref.out"; fail "reference run $cfg"; exit 1; }
done
lost=0 silent=0 divergent=0 unclear=0 leftover=0 corrupted=0 fellback=0 refused=0 resumed=0
state_step() { jq -r '.step // -1' "$1/state.json" 2>/dev/null || echo -1; }

# flip FILE OFFSET: changes the byte at OFFSET (to another value, always)
flip() {
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "\\$(printf '%03o' $(((b + 1 + RANDOM % 255) % 256)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

# corrupt DIR: damages one file that a resume at the committed step reads; prints what it did
corrupt() {
  local d=$1 step f
  step=$(state_step "$d")
  [ "$step" -gt 0 ] || return 1
  mapfile -t files < <(cd "$d" && ls */L*-s"$step".safetensors 2>/dev/null)
  [ ${#files[@]} -gt 0 ] || return 1
  f="$d/${files[RANDOM % ${#files[@]}]}"
  case $((RANDOM % 4)) in
  0) flip "$f" $((RANDOM % $(stat -c %s "$f"))); echo "flipped a byte of $f" ;;
  1) truncate -s $((RANDOM % $(stat -c %s "$f"))) "$f"; echo "truncated $f" ;;
  2) rm -f "$f"; echo "deleted $f" ;;
  3) f="$(dirname "$f")/manifest.json"
     flip "$f" $((RANDOM % $(stat -c %s "$f"))); echo "flipped a byte of $f" ;;
  esac
}

for t in $(seq 1 "$TRIALS"); do
  cfg=${CONFIGS[RANDOM % ${#CONFIGS[@]}]}
  n=${cfg%%:*} plan=${cfg#*:}
  launch=(timeout -k 10 300 mpirun -np "$n" --bind-to none) planarg=(--plan "$PLANS/$plan.json")
  [ -z "$plan" ] && launch=(timeout -k 10 300) planarg=()
  d="$TMP/t$t"
  mode=$((RANDOM % 3)) # 0 random time, 1 mid-shard, 2 mid-commit
  who=$((RANDOM % 2))  # 0 one rank, 1 all ranks
  hook=()
  points=(manifests state)
  [ $mode -eq 2 ] && hook=(env AUTOHET_TEST_KILL_COMMIT="${points[RANDOM % 2]}@$((2 * (1 + RANDOM % 3)))")
  { "${hook[@]}" "${launch[@]}" "$BIN" train "${ARGS[@]}" "${planarg[@]}" --ckpt-dir "$d" --ckpt-every 2 \
    >"$TMP/t$t.out" 2>&1 & } 2>/dev/null
  mp=$!
  want=$((1 + RANDOM % 6)) delay="0.0$((RANDOM % 10))" killed="" seen=-1
  while kill -0 $mp 2>/dev/null && [ -z "$killed" ] && [ $mode -ne 2 ]; do
    s=$(state_step "$d")
    [ "$s" -gt "$seen" ] && seen=$s
    [ "$s" -ge $want ] || continue
    pids=$(mpirun_ranks $mp "$n")
    [ -n "$pids" ] || continue
    if [ $mode -eq 1 ]; then
      for f in "$d"/*/*.tmp.*; do
        [ -e "$f" ] || continue
        victim=${f##*.tmp.}
        [ $who -eq 1 ] && victim="$victim $pids"
        kill -9 $victim 2>/dev/null && killed="shard $(basename "$f")" && break
      done
    else
      sleep "$delay"
      arr=($pids)
      victim=$pids
      [ $who -eq 0 ] && victim=${arr[RANDOM % ${#arr[@]}]}
      kill -9 $victim 2>/dev/null && killed="random time"
    fi
  done
  wait_mpirun $mp "$n"
  rc=$?
  s=$(state_step "$d")
  [ -n "$killed" ] || { [ $mode -eq 2 ] && killed="commit ${hook[1]#*=}"; }
  [ -n "$killed" ] || killed="none (finished first, rc $rc)"
  if [ "$s" -lt "$seen" ]; then lost=$((lost + 1)); echo "trial $t: LOST: state.json went from $seen to $s"; fi
  what=""
  [ $((RANDOM % 10)) -lt 4 ] && what=$(corrupt "$d") && corrupted=$((corrupted + 1))
  AUTOHET_DUMP_PARAMS="$TMP/t$t.bin" "${launch[@]}" "$BIN" train "${ARGS[@]}" "${planarg[@]}" --resume "$d" \
    --ckpt-dir "$d" --ckpt-every 2 >"$TMP/r$t.out" 2>&1
  rrc=$?
  verdict=ok
  if [ ! -f "$d/state.json" ]; then
    verdict="no checkpoint yet (killed before the first commit)"
  elif [ $rrc -eq 0 ]; then
    resumed=$((resumed + 1))
    grep -q "resumed from .* at step $s" "$TMP/r$t.out" || { lost=$((lost + 1)); verdict="LOST: not resumed at step $s"; }
    out=$("$CMP" "$TMP/ref-$n$plan.bin" "$TMP/t$t.bin" 1e-6) || { divergent=$((divergent + 1)); verdict="DIVERGENT: $out"; }
    if [ -n "$what" ]; then
      if grep -qE "checksum mismatch|truncated|cannot open|manifest" "$TMP/r$t.out"; then fellback=$((fellback + 1))
      else silent=$((silent + 1)); verdict="SILENT: $what not reported"; fi
    fi
  else
    # a failed resume is acceptable only for a corruption with no other good copy, in one clear line and exit 2
    if [ -n "$what" ] && [ $rrc -eq 2 ] &&
      grep -qE "layer [0-9]+ \(TP rank [0-9]+( of [0-9]+)?\) at step $s: no tier holds a good copy" "$TMP/r$t.out"; then
      refused=$((refused + 1)); verdict="refused (no other good copy)"
    else
      unclear=$((unclear + 1)); verdict="UNCLEAR: resume exit $rrc: $(grep -m1 autohet "$TMP/r$t.out")"
    fi
  fi
  left=$(find "$d" -name '*.tmp.*' 2>/dev/null | wc -l)
  if [ $rrc -eq 0 ] && [ "$left" -gt 0 ]; then
    leftover=$((leftover + 1))
    verdict="$verdict; LEFTOVER $left tmp: $(find "$d" -name '*.tmp.*' 2>/dev/null | sed "s|^$d/||" | tr '\n' ' ')"
  fi
  echo "trial $t: $n rank(s) ${plan:-one-process}, kill $killed ($([ $who -eq 1 ] && echo all || echo one)), committed step $s${what:+, corrupt: $what}: $verdict"
  rm -rf "$d"
done
echo "kill trials: $TRIALS (resumed $resumed); committed steps lost: $lost; silent loads of torn/corrupt data: $silent;" \
  "divergent results: $divergent; unclear failures: $unclear; tmp files left: $leftover;" \
  "corruptions: $corrupted (fallback $fellback, refused with one line $refused)"
[ $((lost + silent + divergent + unclear + leftover)) -eq 0 ]
