#!/usr/bin/env bash
# autohet train on token data and the model's vocabulary: an llm.c token file and a nanoGPT raw .bin
# train; a config.json model with vocab_size 1000 (padded to 1024 for the head GEMM) starts at a loss
# of ln(1000) and gives the same losses over 4 MPI ranks (2 replicas x 2 stages) as on one process;
# --val-data is the validation split; a token id >= the vocabulary and a truncated llm.c header are
# one line naming the file, exit 2. A plan may name a config.json model by path. The start-up line
# names the BLAS kernel (the environment as found: OPENBLAS_CORETYPE is neither set nor changed here).
. "$(dirname "$0")/common.sh"

python3 - "$TMP" <<'PY'
import struct, sys, random
d = sys.argv[1]
random.seed(7)
def tokens(n, vocab):  # a little structure so that the loss can fall: runs of a repeating pattern
    out, pat = [], [random.randrange(vocab) for _ in range(17)]
    while len(out) < n:
        out += pat if random.random() < 0.7 else [random.randrange(vocab) for _ in range(17)]
    return out[:n]
def llmc(path, toks, count=None, cut=None):
    blob = struct.pack('<256i', 20240520, 1, len(toks) if count is None else count, *([0] * 253))
    blob += struct.pack('<%dH' % len(toks), *toks)
    open(path, 'wb').write(blob[:cut] if cut else blob)
t256, t1000 = tokens(20000, 256), tokens(20000, 1000)
llmc(d + '/llmc.bin', t256)
open(d + '/raw.bin', 'wb').write(struct.pack('<%dH' % len(t1000), *t1000))
open(d + '/val.bin', 'wb').write(struct.pack('<%dH' % 3000, *t1000[:3000]))
bad = list(t256); bad[1234] = 1000
llmc(d + '/bad.bin', bad)
llmc(d + '/trunc.bin', t256, cut=700)
PY
cat >"$TMP/v1000.json" <<'JSON'
{"model_type": "gpt2", "n_layer": 4, "n_embd": 64, "n_head": 4, "n_positions": 256, "vocab_size": 1000}
JSON
ARGS=(--steps 4 --seed 3 --global-batch 8 --micro-batch 2 --seq 64 --eval-every 2)

# llm.c token file, tiny-gpt (vocabulary 256)
"$BIN" train --model tiny-gpt --data "$TMP/llmc.bin" "${ARGS[@]}" >"$TMP/llmc.out" 2>&1 || { cat "$TMP/llmc.out"; fail "llm.c file"; }
head -1 "$TMP/llmc.out" >"$TMP/start.txt"
grep -q "vocabulary 256; data $TMP/llmc.bin (18000 train tokens, 2000 validation; " "$TMP/start.txt" || fail "start-up line: $(cat "$TMP/start.txt")"
# the BLAS kernel: with the variable as found
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  grep -q "OpenBLAS [A-Za-z0-9]* (OPENBLAS_CORETYPE as set)" "$TMP/start.txt" || fail "kernel: $(cat "$TMP/start.txt")"
elif grep -qw avx512bw <<<"$flags" && grep -qw avx512vl <<<"$flags" && grep -qw avx512dq <<<"$flags"; then
  grep -Eq "OpenBLAS (SkylakeX|Cooperlake|SapphireRapids) \(" "$TMP/start.txt" || fail "AVX-512 CPU, kernel: $(cat "$TMP/start.txt")"
elif grep -qw avx2 <<<"$flags" && grep -qw fma <<<"$flags"; then
  grep -Eq "OpenBLAS (Haswell|Zen|SkylakeX|Cooperlake) \(" "$TMP/start.txt" || fail "AVX2 CPU, kernel: $(cat "$TMP/start.txt")"
else
  grep -q "OpenBLAS " "$TMP/start.txt" || fail "kernel: $(cat "$TMP/start.txt")"
fi

# nanoGPT raw .bin and a 1000-token vocabulary from config.json; --val-data
"$BIN" train --model "$TMP/v1000.json" --data "$TMP/raw.bin" --val-data "$TMP/val.bin" "${ARGS[@]}" \
  --log "$TMP/one.log" >"$TMP/one.out" 2>&1 || { cat "$TMP/one.out"; fail "raw .bin, vocab 1000"; }
grep -q "vocabulary 1000; data $TMP/raw.bin (20000 train tokens, 3000 validation from $TMP/val.bin; " "$TMP/one.out" || fail "vocab 1000 start-up: $(head -1 "$TMP/one.out")"
jq -e -s '(.[0].loss - (1000 | log) | fabs) < 0.3' "$TMP/one.log" >/dev/null || fail "first loss is not ~ln(1000): $(jq -s '.[0].loss' "$TMP/one.log")"
jq -e -s '[.[] | select(.val_loss >= 0)] | length == 2' "$TMP/one.log" >/dev/null || fail "validation on steps 2 and 4"
# the metrics log: time on every line, no sentinels (val_loss only where evaluated), tokens counted,
# the MFU against the nominal peak (the plan's "cpu" devices: 0.1 TFLOP/s each), the probed sgemm apart
jq -e -s 'length == 4 and all(.[]; (.time_s | type) == "number" and .time_s > 0 and .step_s > 0 and .unix_s > 1.7e9)
  and ([.[] | has("val_loss")] == [false, true, false, true]) and ([.[] | .val_batches // 0] == [0, 1, 0, 1])
  and ([.[] | .tokens] == [512, 1024, 1536, 2048]) and ([.[] | .time_s] | . == sort)
  and all(.[]; .peak_tflops == 0.1 and ((.mfu - .tflops / .peak_tflops) | fabs) < 1e-6 * .mfu + 1e-12
              and .sgemm_util > 0)' "$TMP/one.log" >/dev/null || fail "metrics log: $(head -2 "$TMP/one.log")"
grep -q '"val_loss": -1' "$TMP/one.log" && fail "a val_loss sentinel"
# --eval-batches 3: the mean of 3 validation batches; batch 0 is the one --eval-batches 1 evaluates
"$BIN" train --model "$TMP/v1000.json" --data "$TMP/raw.bin" --val-data "$TMP/val.bin" "${ARGS[@]}" --eval-batches 3 \
  --log "$TMP/eb3.log" >"$TMP/eb3.out" 2>&1 || { cat "$TMP/eb3.out"; fail "--eval-batches 3"; }
jq -e -s --slurpfile r "$TMP/one.log" '[.[] | .loss] == [$r[] | .loss] and [.[] | .val_batches // 0] == [0, 3, 0, 3]
  and ([.[] | .val_loss // empty] != [$r[] | .val_loss // empty])' "$TMP/eb3.log" >/dev/null ||
  fail "--eval-batches 3: $(jq -c '[.loss, .val_loss, .val_batches]' "$TMP/eb3.log" | tr '\n' ' ')"
# --devices: the nominal peak from the overridden catalog
echo '{"devices": [{"name": "cpu", "fp32_tflops": 2.5}]}' >"$TMP/devices.json"
"$BIN" train --model "$TMP/v1000.json" --data "$TMP/raw.bin" "${ARGS[@]}" --steps 1 --devices "$TMP/devices.json" \
  --log "$TMP/dev.log" >"$TMP/dev.out" 2>&1 || { cat "$TMP/dev.out"; fail "--devices"; }
jq -e '.peak_tflops == 2.5' "$TMP/dev.log" >/dev/null || fail "--devices peak: $(cat "$TMP/dev.log")"
grep -q "nominal peak 2.5 TFLOP/s; sgemm peak [0-9.]* GFLOP/s/rank (probed)" "$TMP/dev.out" || fail "--devices start-up: $(head -1 "$TMP/dev.out")"
# 2 replicas x 2 stages compute the same model (the padded head on the last stages); the plan names
# only the model, by the config.json's path relative to the plan
jq '.model = {"name": "v1000.json"}' "$PLANS/tiny-2x2.json" >"$TMP/plan-v1000.json"
mpirun -np 4 --bind-to none "$BIN" train --model "$TMP/v1000.json" --data "$TMP/raw.bin" --val-data "$TMP/val.bin" \
  "${ARGS[@]}" --plan "$TMP/plan-v1000.json" --global-batch 8 --micro-batch 2 --seq 64 --log "$TMP/four.log" \
  >"$TMP/four.out" 2>&1 || { cat "$TMP/four.out"; fail "4 ranks, vocab 1000"; }
jq -s -r '.[] | [.loss, (.val_loss // 0)] | @tsv' "$TMP/one.log" >"$TMP/one.tsv"
jq -s -r '.[] | [.loss, (.val_loss // 0)] | @tsv' "$TMP/four.log" >"$TMP/four.tsv"
paste "$TMP/one.tsv" "$TMP/four.tsv" | awk '{ for (i = 1; i <= 2; i++) { d = $i - $(i+2); if (d < 0) d = -d;
  if (d > 1e-5 * ($i < 0 ? -$i : $i) + 1e-7) bad = 1 } } END { exit bad }' || fail "4 ranks differ: $(paste "$TMP/one.tsv" "$TMP/four.tsv")"

# bad data: one line naming the file, exit 2
expect_bad() { # NAME EXPECTED-TEXT ARGS...
  local name="$1" want="$2"
  shift 2
  "$BIN" train "$@" --steps 1 >"$TMP/$name.out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, want 2"
  [ "$(wc -l <"$TMP/$name.out")" -eq 1 ] || fail "$name: not one line: $(cat "$TMP/$name.out")"
  grep -qF -- "$want" "$TMP/$name.out" || fail "$name: $(cat "$TMP/$name.out")"
}
expect_bad above "$TMP/bad.bin: token id 1000 at byte offset 3492 is not below the vocabulary 256 of model tiny-gpt" \
  --model tiny-gpt --data "$TMP/bad.bin"
expect_bad trunc "$TMP/trunc.bin: truncated llm.c header: 700 bytes, the header is 1024" --model tiny-gpt --data "$TMP/trunc.bin"
expect_bad valkind "text data, but --data $TMP/raw.bin is tokens" --model "$TMP/v1000.json" --data "$TMP/raw.bin" \
  --val-data "$FIX/text"
expect_bad evalb "--eval-batches" --model tiny-gpt --data "$TMP/llmc.bin" --eval-batches 0
expect_bad devices "--devices $TMP/nope.json" --model tiny-gpt --data "$TMP/llmc.bin" --devices "$TMP/nope.json"
[ "$fails" -eq 0 ] && echo "cli_train_data: all passed"
exit $((fails > 0))
