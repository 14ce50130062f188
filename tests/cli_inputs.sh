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
expect2 "train: a batch no memory holds" "GiB" "$BIN" train --model tiny-gpt "${D[@]}" \
  --global-batch 2000 --micro-batch 1000 --seq 4096

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

# the --help synopses of train and run (the lines before the first blank one) name every flag
# (captured whole first: grep -q closing the pipe early would kill the writer with SIGPIPE)
synopsis() { "$BIN" "$1" --help >"$TMP/help-$1.txt" && sed '/^$/q' "$TMP/help-$1.txt"; }
TRAIN_SYN=$(synopsis train) || fail "train --help failed"
RUN_SYN=$(synopsis run) || fail "run --help failed"
for f in model data plan steps seed global-batch micro-batch seq lr warmup eval-every log-every log trace ckpt-dir \
  ckpt-every ckpt-mem mem-every ckpt-cloud resume recover init-from; do
  grep -q -- "--$f\b" <<<"$TRAIN_SYN" || fail "train --help synopsis lacks --$f"
done
for f in plan cluster global-batch micro-batch seq tp model data steps seed lr warmup eval-every preempt spot-trace \
  time-scale notice recovery cloud-bandwidth ckpt-every mem-every run-dir log report launcher; do
  grep -q -- "--$f\b" <<<"$RUN_SYN" || fail "run --help synopsis lacks --$f"
done

[ $fails -eq 0 ] && echo "inputs: all checks passed"
exit $((fails > 0))
