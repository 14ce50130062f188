#!/usr/bin/env bash
# Bad input of every kind is one line on stderr naming the file, field or flag, and exit code 2
# (issue #13): non-finite and out-of-range numbers, empty list items, preemptions after the last
# step, outputs that cannot be written (checked before any work), a FIFO or a device given as any
# input (refused at once, never read), oversized data, and a batch shape no memory holds.
. "$(dirname "$0")/common.sh"
D=(--data "$FIX/text")
PLAN=(plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8 --quiet)
mkfifo "$TMP/fifo"
touch "$TMP/afile"
truncate -s 300M "$TMP/big.txt"

# expect2 NAME WORD CMD...: exit 2 within 20 s, exactly one line on stderr, containing WORD
expect2() {
  local name=$1 word=$2
  shift 2
  timeout 20 "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ $rc -eq 2 ] || { fail "$name: exit $rc, want 2 ($(head -c 300 "$TMP/err"))"; return; }
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$name: $(wc -l <"$TMP/err") lines on stderr: $(head -c 400 "$TMP/err")"
  grep -q -- "$word" "$TMP/err" || fail "$name: stderr does not name '$word': $(cat "$TMP/err")"
  grep -q "MPI_ABORT" "$TMP/out" "$TMP/err" && fail "$name: an MPI_ABORT banner"
}

expect2 "train --lr inf" "--lr" "$BIN" train --model tiny-gpt "${D[@]}" --lr inf
expect2 "train --lr nan" "--lr" "$BIN" train --model tiny-gpt "${D[@]}" --lr nan
expect2 "plan --mem-reserve nan" "--mem-reserve" "$BIN" "${PLAN[@]}" --mem-reserve nan
expect2 "plan --mem-reserve 1e308" "--mem-reserve" "$BIN" "${PLAN[@]}" --mem-reserve 1e308
expect2 "plan --seq 2147483647" "--seq" "$BIN" "${PLAN[@]}" --seq 2147483647
expect2 "run --preempt n0@100 --steps 4" "--preempt" "$BIN" run --plan "$PLANS/tiny-4node-2x2.json" \
  --model tiny-gpt "${D[@]}" --steps 4 --preempt n0@100
expect2 "run --preempt n0@2,,n1@3" "--preempt" "$BIN" run --plan "$PLANS/tiny-4node-2x2.json" \
  --model tiny-gpt "${D[@]}" --steps 4 --preempt n0@2,,n1@3
expect2 "profile --mb 1,,2" "--mb" "$BIN" profile --model tiny-gpt --out "$TMP/p.json" --mb 1,,2
expect2 "profile --mb 1," "--mb" "$BIN" profile --model tiny-gpt --out "$TMP/p.json" --mb 1,
expect2 "train --global-batch 2e9 --micro-batch 1e9" "micro-batch" "$BIN" train --model tiny-gpt "${D[@]}" \
  --global-batch 2000000000 --micro-batch 1000000000
# (tiny-llama: RoPE, no position table to refuse --seq 4096 first, as tiny-gpt's 256 positions do)
expect2 "train: a batch no memory holds" "GiB" "$BIN" train --model tiny-llama "${D[@]}" \
  --global-batch 2000 --micro-batch 1000 --seq 4096
expect2 "train --seq beyond the position table" "\-\-seq 4096 exceeds the 256 learned positions of model tiny-gpt" \
  "$BIN" train --model tiny-gpt "${D[@]}" --seq 4096
expect2 "run --seq beyond the position table" "\-\-seq 512 exceeds the 256 learned positions" \
  "$BIN" run --model tiny-gpt --cluster 2x1xcpu "${D[@]}" --global-batch 4 --micro-batch 2 --seq 512 --steps 1 \
  --run-dir "$TMP/seq.run"
[ -e "$TMP/seq.run" ] && fail "run --seq beyond the position table made its run directory"

# outputs that cannot be written: noticed before any work
expect2 "train --log unwritable" "--log" "$BIN" train --model tiny-gpt "${D[@]}" --log "$TMP/none/x.log"
# under mpirun: every rank exits 2 (mpirun adds its own note on a non-zero exit), the error once, no abort
timeout 60 mpirun -np 2 --bind-to none "$BIN" train --model tiny-gpt "${D[@]}" --plan "$PLANS/tiny-tp2.json" \
  --log "$TMP/none/x.log" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] || fail "train --log unwritable, 2 ranks: exit $rc"
[ "$(grep -c "autohet train: --log" "$TMP/err")" -eq 1 ] || fail "train --log, 2 ranks: $(cat "$TMP/err")"
grep -q "MPI_ABORT" "$TMP/out" "$TMP/err" && fail "train --log, 2 ranks: an MPI_ABORT banner"
expect2 "train --trace unwritable" "--trace" "$BIN" train --model tiny-gpt "${D[@]}" --trace "$TMP/none/t.json"
expect2 "train --ckpt-dir under a file" "--ckpt-dir" "$BIN" train --model tiny-gpt "${D[@]}" \
  --ckpt-dir "$TMP/afile/ck" --ckpt-every 1
expect2 "plan --json unwritable" "--json" "$BIN" "${PLAN[@]}" --json "$TMP/none/p.json"
expect2 "plan --json a directory" "--json" "$BIN" "${PLAN[@]}" --json "$TMP"
expect2 "simulate --svg unwritable" "--svg" "$BIN" simulate "$PLANS/tiny-2x2.json" --svg "$TMP/none/s.svg"
expect2 "profile --out unwritable" "--out" "$BIN" profile --model tiny-gpt --out "$TMP/afile/p.json"
expect2 "run --report unwritable" "--report" "$BIN" run --plan "$PLANS/tiny-4node-2x2.json" --model tiny-gpt \
  "${D[@]}" --steps 4 --report "$TMP/none/r.json"
echo '{"traceEvents": []}' >"$TMP/trace.json"
expect2 "analyze --otf2 deep path" "--otf2" "$BIN" analyze "$TMP/trace.json" --otf2 "$TMP/none/a/b"
[ -e "$TMP/none" ] && fail "analyze --otf2 created the path above the directory"

# a FIFO or a device as an input: refused at once
expect2 "plan --model FIFO" "not a regular file" "$BIN" plan --model "$TMP/fifo" --cluster 1x8xA100-40G --global-batch 8
expect2 "plan --cluster FIFO.json" "not a regular file" "$BIN" plan --model gpt3-1.3b --cluster "$TMP/fifo" \
  --global-batch 8
expect2 "plan --devices /dev/zero" "not a regular file" "$BIN" "${PLAN[@]}" --devices /dev/zero
expect2 "simulate FIFO" "not a regular file" "$BIN" simulate "$TMP/fifo"
expect2 "train --data FIFO" "not a regular file" "$BIN" train --model tiny-gpt --data "$TMP/fifo"
expect2 "train --data /dev/zero" "not a regular file" "$BIN" train --model tiny-gpt --data /dev/zero
expect2 "train --plan FIFO" "not a regular file" "$BIN" train --model tiny-gpt "${D[@]}" --plan "$TMP/fifo"
expect2 "analyze FIFO" "not a regular file" "$BIN" analyze "$TMP/fifo"
expect2 "spot-sim --trace FIFO" "not a regular file" "$BIN" spot-sim --trace "$TMP/fifo" --node 8xA100-40G \
  --model gpt3-1.3b --global-batch 64 --seq 2048
expect2 "train --data 300 MB" "larger than" "$BIN" train --model tiny-gpt --data "$TMP/big.txt"

# stray positional arguments, empty list items, a plan or a comm profile that contradicts itself
expect2 "train stray argument" "stray" "$BIN" train --model tiny-gpt "${D[@]}" stray
expect2 "profile stray argument" "stray" "$BIN" profile --model tiny-gpt --out "$TMP/p.json" stray
expect2 "commbench stray argument" "stray" "$BIN" commbench stray
expect2 "generate stray argument" "stray" "$BIN" generate --ckpt "$TMP" stray
expect2 "commbench --ops ''" "--ops" "$BIN" commbench --ops ''
expect2 "commbench --ops latency," "--ops" "$BIN" commbench --ops latency,
expect2 "commbench --pairs ''" "--pairs" "$BIN" commbench --pairs ''
sed 's/"micro_batch"/"tp": 1, "micro_batch"/' "$PLANS/llama-mixtp.json" >"$TMP/tp-contra.json"
expect2 "plan: top-level tp contradicts a stage" "stages\[0\].tp" "$BIN" simulate "$TMP/tp-contra.json" --quiet
expect2 "plan as --comm-profile (plan)" "format" "$BIN" "${PLAN[@]}" --comm-profile "$PLANS/tiny-2x2.json"
"$BIN" train --model tiny-gpt "${D[@]}" --steps 2 --trace "$TMP/t2.json" >/dev/null || fail "train --trace"
expect2 "plan as --comm-profile (analyze)" "format" "$BIN" analyze "$TMP/t2.json" \
  --comm-profile "$PLANS/tiny-2x2.json"
echo '{"step": 1}' >"$TMP/recover.json"
expect2 "train --recover malformed" "--recover" "$BIN" train --model tiny-gpt "${D[@]}" --recover "$TMP/recover.json"
expect2 "train --recover missing" "--recover" "$BIN" train --model tiny-gpt "${D[@]}" --recover "$TMP/none.json"

# run refuses --data as train does (the same message), before it launches or creates anything
: >"$TMP/empty.txt"
expect2 "run --data empty" "empty.txt" "$BIN" run --plan "$PLANS/tiny-4node-2x2.json" --model tiny-gpt \
  --data "$TMP/empty.txt" --steps 2 --run-dir "$TMP/rd-data"
sed 's/^autohet run: //' "$TMP/err" >"$TMP/run-data.err"
[ -e "$TMP/rd-data" ] && fail "run --data empty: created its run directory"
"$BIN" train --model tiny-gpt --data "$TMP/empty.txt" 2>&1 >/dev/null | sed 's/^autohet train: //' >"$TMP/train-data.err"
cmp -s "$TMP/run-data.err" "$TMP/train-data.err" ||
  fail "run and train word a bad --data differently: $(cat "$TMP/run-data.err" "$TMP/train-data.err")"
expect2 "run --data FIFO" "not a regular file" "$BIN" run --cluster 2x1xcpu --model tiny-gpt --data "$TMP/fifo" \
  --steps 2 --run-dir "$TMP/rd-fifo"
[ -e "$TMP/rd-fifo" ] && fail "run --data FIFO: created its run directory"
# an output that cannot be created (root may write anywhere but there): refused before the run
expect2 "run --report under /proc" "--report" "$BIN" run --plan "$PLANS/tiny-4node-2x2.json" --model tiny-gpt \
  "${D[@]}" --steps 2 --report /proc/autohet-report.json --run-dir "$TMP/rd-proc"
[ -e "$TMP/rd-proc" ] && fail "run --report under /proc: created its run directory"
expect2 "plan --json under /proc" "--json" "$BIN" "${PLAN[@]}" --json /proc/autohet-plan.json
# run --plan whose replans computed ahead (plan --replans) are damaged: refused with the field named, before
# any rank starts (a table that cannot be trusted is never a silent fallback to searching)
"$BIN" plan --model tiny-gpt --cluster 4x1xcpu --global-batch 8 --micro-batch 2 --seq 64 --replans 1 --quiet \
  --json "$TMP/ahead.json" || fail "plan --replans 1"
for edit in '.replans.entries[0].lost=["nosuch"]|entries.0.\.lost.0.: no node' \
            '.replans.entries[0].replicas="2:9/1/0/0/6"|entries.0.\.replicas: replica 0' \
            '.replans="x"|replans: expected an object' '.replans.entries[0].micro_batch=-1|entries.0.\.micro_batch'; do
  jq "${edit%|*}" "$TMP/ahead.json" >"$TMP/bad-ahead.json"
  expect2 "run --plan: ${edit%|*}" "${edit#*|}" "$BIN" run --plan "$TMP/bad-ahead.json" "${D[@]}" \
    --steps 2 --run-dir "$TMP/rd-ahead"
  [ -e "$TMP/rd-ahead" ] && fail "run --plan ${edit%|*}: created its run directory"
done
# as root, without Open MPI's permission: refused at once (mpirun would refuse every generation the same way)
if [ "$(id -u)" -eq 0 ]; then
  expect2 "run as root without OMPI_ALLOW_RUN_AS_ROOT" "OMPI_ALLOW_RUN_AS_ROOT=1" env -u OMPI_ALLOW_RUN_AS_ROOT \
    "$BIN" run --plan "$PLANS/tiny-4node-2x2.json" --model tiny-gpt "${D[@]}" --steps 2 --run-dir "$TMP/rd-root"
  [ -e "$TMP/rd-root" ] && fail "run as root without permission: created its run directory"
  "$BIN" run --plan "$PLANS/tiny-4node-2x2.json" --model tiny-gpt "${D[@]}" --steps 1 --run-dir "$TMP/rd-root2" \
    --launcher "mpirun --allow-run-as-root" >"$TMP/root2.out" 2>&1 || fail "run --launcher 'mpirun --allow-run-as-root': $(tail -3 "$TMP/root2.out")"
fi
# export validates first and makes --out last
expect2 "export of no checkpoint" "no-ckpt" "$BIN" export --ckpt "$TMP/no-ckpt" --out "$TMP/ex"
[ -e "$TMP/ex" ] && fail "export of no checkpoint: created --out"

# a full file system: every output is checked to its close, exit non-zero, one line naming the file, and a
# device target is written in place, never replaced (a fresh full device per check where root may make one)
fulldev() {
  rm -f "$TMP/full"
  if mknod "$TMP/full" c 1 7 2>/dev/null; then FULL="$TMP/full"; else FULL=/dev/full; fi
}
# expect_full NAME CMD... (FULL in CMD): exit 1 or 2, one line on stderr naming FULL, FULL still a device
expect_full() {
  local name=$1
  shift
  timeout 120 "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  { [ $rc -eq 1 ] || [ $rc -eq 2 ]; } || fail "$name to a full disk: exit $rc, want 1 or 2 ($(head -c 300 "$TMP/err"))"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$name to a full disk: $(wc -l <"$TMP/err") lines: $(head -c 400 "$TMP/err")"
  grep -q -- "$FULL" "$TMP/err" || fail "$name to a full disk: stderr does not name $FULL: $(cat "$TMP/err")"
  [ -c "$FULL" ] || fail "$name to a full disk: $FULL is no longer a device (replaced by a rename)"
}
"$BIN" "${PLAN[@]}" --json "$TMP/plan8.json" || fail "plan --json for the full-disk checks"
printf 'ha slots=8\nhb slots=8\n' >"$TMP/hostfile"
SPOT=(spot-sim --model gpt3-2.7b --global-batch 256 --seq 2048 --node 8xA100-40G
  --trace "$FIX/spot-traces/aws-p3-bamboo.csv")
RUN=(run --plan "$PLANS/tiny-4node-2x2.json" --model tiny-gpt "${D[@]}" --steps 2)
fulldev; expect_full "train --log" "$BIN" train --model tiny-gpt "${D[@]}" --steps 2 --log "$FULL"
fulldev; expect_full "train --trace" "$BIN" train --model tiny-gpt "${D[@]}" --steps 2 --trace "$FULL"
fulldev; expect_full "run --report" "$BIN" "${RUN[@]}" --run-dir "$TMP/rd-full1" --report "$FULL"
fulldev; expect_full "run --log" "$BIN" "${RUN[@]}" --run-dir "$TMP/rd-full2" --log "$FULL"
fulldev; expect_full "spot-sim --json" "$BIN" "${SPOT[@]}" --json "$FULL"
fulldev; expect_full "spot-sim --svg" "$BIN" "${SPOT[@]}" --svg "$FULL"
fulldev; expect_full "profile --out" "$BIN" profile --model tiny-gpt --tp 1 --mb 1 --reps 1 --out "$FULL"
fulldev; expect_full "plan --json" "$BIN" "${PLAN[@]}" --json "$FULL"
fulldev; expect_full "simulate --json" "$BIN" simulate "$PLANS/tiny-2x2.json" --quiet --json "$FULL"
fulldev; expect_full "simulate --svg" "$BIN" simulate "$PLANS/tiny-2x2.json" --quiet --svg "$FULL"
fulldev; expect_full "simulate --trace" "$BIN" simulate "$PLANS/tiny-2x2.json" --quiet --trace "$FULL"
fulldev; expect_full "analyze --json" "$BIN" analyze "$TMP/t2.json" --json "$FULL"
fulldev; expect_full "analyze --svg" "$BIN" analyze "$TMP/t2.json" --svg "$FULL"
fulldev; expect_full "hosts --rankfile" "$BIN" hosts --plan "$TMP/plan8.json" --hostfile "$TMP/hostfile" \
  --rankfile "$FULL"
fulldev; expect_full "hosts --plan-out" "$BIN" hosts --plan "$TMP/plan8.json" --hostfile "$TMP/hostfile" \
  --rankfile "$TMP/rf" --plan-out "$FULL"
# what a command prints must arrive: a full standard output fails the command
for cmd in "plan --model gpt3-1.3b --cluster 1x8xA100-40G --global-batch 8" "models" "--help"; do
  fulldev
  # shellcheck disable=SC2086 # the words of $cmd
  timeout 60 "$BIN" $cmd >"$FULL" 2>"$TMP/err"
  rc=$?
  [ $rc -eq 1 ] || fail "autohet $cmd > a full disk: exit $rc, want 1"
  [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "standard output" "$TMP/err" ||
    fail "autohet $cmd > a full disk: $(cat "$TMP/err")"
done
# commbench under mpirun (mpirun adds its own lines): rank 0's one line, a non-zero exit
fulldev
timeout 120 mpirun -np 2 --bind-to none "$BIN" commbench --ops latency --max-size 64 --iters 2 --json "$FULL" \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -ne 0 ] || fail "commbench --json to a full disk: exit 0"
[ "$(grep -c "autohet commbench: .*$FULL" "$TMP/err")" -eq 1 ] || fail "commbench --json full: $(cat "$TMP/err")"
[ -c "$FULL" ] || fail "commbench --json to a full disk: $FULL replaced"

# the --help synopses of train and run (the lines before the first blank one) name every flag
# (captured whole first: grep -q closing the pipe early would kill the writer with SIGPIPE)
synopsis() { "$BIN" "$1" --help >"$TMP/help-$1.txt" && sed '/^$/q' "$TMP/help-$1.txt"; }
TRAIN_SYN=$(synopsis train) || fail "train --help failed"
RUN_SYN=$(synopsis run) || fail "run --help failed"
for f in model data plan steps seed global-batch micro-batch seq lr warmup eval-every log-every log trace ckpt-dir \
  ckpt-every ckpt-mem mem-every ckpt-cloud resume recover init-from data-dtype eval-batches devices; do
  grep -q -- "--$f\b" <<<"$TRAIN_SYN" || fail "train --help synopsis lacks --$f"
done
for f in plan cluster global-batch micro-batch seq tp model data steps seed lr warmup eval-every preempt spot-trace \
  time-scale notice recovery cloud-bandwidth ckpt-every mem-every run-dir log report launcher; do
  grep -q -- "--$f\b" <<<"$RUN_SYN" || fail "run --help synopsis lacks --$f"
done

[ $fails -eq 0 ] && echo "inputs: all checks passed"
exit $((fails > 0))
