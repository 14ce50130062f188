#!/usr/bin/env bash
# The token-file formats of --data (docs/data.md), written with numpy as the tools that make them do:
# llm.c version 2 (uint32) trains a LLaMA-3-style vocabulary of 128,256 (first loss ~ ln(128256)),
# also across 2 ranks; Megatron's indexed .bin/.idx (as megatron/core/datasets/indexed_dataset.py's
# _IndexWriter lays it out; named by the .bin, the .idx or the prefix) gives the same losses as the
# llm.c file of the same tokens; raw uint32 with --data-dtype; every corrupted header field of the
# .idx and of llm.c's header is one line naming the file and the field, exit 2; a token id >= the
# vocabulary names the file and the byte offset.
. "$(dirname "$0")/common.sh"

/usr/bin/python3 - "$TMP" <<'PY' || fail "numpy fixtures"
import sys, struct
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(5)
def tokens(n, vocab):  # runs of a repeating pattern, so that the loss can fall
    pat = rng.integers(0, vocab, 17)
    out = np.concatenate([pat if rng.random() < 0.7 else rng.integers(0, vocab, 17) for _ in range(n // 17 + 1)])
    return out[:n]
def llmc(path, toks, version, dtype):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, version, len(toks)]
    with open(path, 'wb') as f:
        f.write(header.tobytes()); f.write(np.asarray(toks, dtype=dtype).tobytes())
def megatron(prefix, docs, dtype, code):
    # _IndexWriter: magic, <Q version 1, <B dtype code, <Q sequence count, <Q document count,
    # int32 sequence_lengths, int64 sequence_pointers, int64 document_indices ([0, ..., S])
    lens = np.array([len(x) for x in docs], dtype=np.int32)
    ptrs = np.concatenate([[0], np.cumsum(lens.astype(np.int64) * np.dtype(dtype).itemsize)[:-1]]).astype(np.int64)
    doc_idx = np.arange(len(docs) + 1, dtype=np.int64)
    with open(prefix + '.bin', 'wb') as f:
        for x in docs:
            f.write(np.asarray(x, dtype=dtype).tobytes())
    with open(prefix + '.idx', 'wb') as f:
        f.write(b'MMIDIDX\x00\x00'); f.write(struct.pack('<Q', 1)); f.write(struct.pack('<B', code))
        f.write(struct.pack('<Q', len(docs))); f.write(struct.pack('<Q', len(doc_idx)))
        f.write(lens.tobytes()); f.write(ptrs.tobytes()); f.write(doc_idx.tobytes())
big = tokens(12000, 128256)
assert big.max() > 65535
llmc(d + '/v2.bin', big, 2, np.uint32)
big.astype(np.uint32).tofile(d + '/raw32.bin')
small = tokens(12000, 1000)
llmc(d + '/v1.bin', small, 1, np.uint16)
docs = np.split(small, [1000, 1001, 5000, 9999])  # documents of unequal lengths, one of a single token
megatron(d + '/mega_u16', docs, np.uint16, 8)
megatron(d + '/mega_i32', np.split(big, [3000, 7000]), np.int32, 4)
# corrupted copies of a good index, one field each
good = open(d + '/mega_u16.idx', 'rb').read()
S, D = 5, 6
def bad(name, blob):
    open(d + '/' + name + '.idx', 'wb').write(blob)
    open(d + '/' + name + '.bin', 'wb').write(open(d + '/mega_u16.bin', 'rb').read())
def put(off, fmt, v):
    b = bytearray(good); struct.pack_into(fmt, b, off, v); return bytes(b)
lens_at, ptrs_at, docs_at = 34, 34 + 4 * S, 34 + 12 * S
bad('b_magic', b'MMIDIDY' + good[7:])
bad('b_version', put(9, '<Q', 2))
bad('b_dtype', put(17, '<B', 7))
bad('b_dtype9', put(17, '<B', 9))
bad('b_count', put(18, '<Q', S + 1))
bad('b_short', good[:20])
bad('b_len', put(lens_at + 4, '<i', -1))
bad('b_ptr', put(ptrs_at + 8 * 2, '<q', 7))
bad('b_doc0', put(docs_at, '<q', 1))
bad('b_doclast', put(docs_at + 8 * (D - 1), '<q', S - 1))
bad('b_modes', good + b'\x00' * S)
bad('b_binsize', good)
open(d + '/b_binsize.bin', 'ab').write(b'\x00\x00')
over = small.copy(); over[777] = 1000
megatron(d + '/over', [over], np.uint16, 8)
neg = big.astype(np.int32).copy(); neg[5] = -3
megatron(d + '/neg', [neg], np.int32, 4)
PY
cat >"$TMP/llama3.json" <<'JSON'
{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
 "rope_theta": 500000.0, "tie_word_embeddings": false, "vocab_size": 128256}
JSON
cat >"$TMP/v1000.json" <<'JSON'
{"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 4, "n_positions": 128, "vocab_size": 1000}
JSON
ARGS=(--steps 3 --seed 3 --global-batch 4 --micro-batch 2 --seq 32 --eval-every 3)

# llm.c version 2 and a LLaMA-3 vocabulary: the first loss is ~ln(128256) = 11.76
"$BIN" train --model "$TMP/llama3.json" --data "$TMP/v2.bin" "${ARGS[@]}" --log "$TMP/v2.log" >"$TMP/v2.out" 2>&1 ||
  { cat "$TMP/v2.out"; fail "llm.c v2, vocabulary 128256"; }
grep -q "vocabulary 128256; data $TMP/v2.bin" "$TMP/v2.out" || fail "v2 start-up line: $(head -1 "$TMP/v2.out")"
jq -e -s '(.[0].loss - (128256 | log) | fabs) < 0.3' "$TMP/v2.log" >/dev/null ||
  fail "v2: first loss is not ~ln(128256): $(jq -s '.[0].loss' "$TMP/v2.log")"
# the same tokens as raw uint32 (--data-dtype) and as Megatron int32: the same losses
"$BIN" train --model "$TMP/llama3.json" --data "$TMP/raw32.bin" --data-dtype uint32 "${ARGS[@]}" \
  --log "$TMP/raw32.log" >"$TMP/raw32.out" 2>&1 || { cat "$TMP/raw32.out"; fail "raw uint32"; }
"$BIN" train --model "$TMP/llama3.json" --data "$TMP/mega_i32" "${ARGS[@]}" --log "$TMP/mi32.log" \
  >"$TMP/mi32.out" 2>&1 || { cat "$TMP/mi32.out"; fail "Megatron int32 by prefix"; }
for f in raw32 mi32; do
  [ "$(jq -c .loss "$TMP/v2.log")" = "$(jq -c .loss "$TMP/$f.log")" ] ||
    fail "$f losses differ from llm.c v2: $(jq -c .loss "$TMP/$f.log" | tr '\n' ' ')"
done
# 2 ranks (2 stages) on the v2 file: the losses of one process
cat >"$TMP/pp2.json" <<'JSON'
{"format": "autohet-plan", "version": 1, "model": {"name": "llama3.json"}, "train": {"seq": 32},
 "cluster": {"nodes": [{"name": "n0", "gpu_type": "cpu", "gpus": 2}]},
 "tp": 1, "micro_batch": 2, "global_batch": 4,
 "replicas": [{"micro_batches": 2, "stages": [{"node_index": 0, "gpus": [0], "layers": [0, 2]},
                                              {"node_index": 0, "gpus": [1], "layers": [2, 4]}]}]}
JSON
mpirun -np 2 --bind-to none "$BIN" train --model "$TMP/llama3.json" --data "$TMP/v2.bin" "${ARGS[@]}" \
  --plan "$TMP/pp2.json" --log "$TMP/v2-2.log" >"$TMP/v2-2.out" 2>&1 || { cat "$TMP/v2-2.out"; fail "2 ranks on v2"; }
jq -s -r '.[] | .loss' "$TMP/v2.log" >"$TMP/a.txt"
jq -s -r '.[] | .loss' "$TMP/v2-2.log" >"$TMP/b.txt"
paste "$TMP/a.txt" "$TMP/b.txt" | awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1 }
  END { exit bad + (NR != 3) }' || fail "2 ranks differ: $(paste "$TMP/a.txt" "$TMP/b.txt" | tr '\n' ' ')"

# Megatron uint16 by its .bin, its .idx and its prefix = the llm.c v1 file of the same tokens
"$BIN" train --model "$TMP/v1000.json" --data "$TMP/v1.bin" "${ARGS[@]}" --log "$TMP/v1.log" >"$TMP/v1.out" 2>&1 ||
  { cat "$TMP/v1.out"; fail "llm.c v1"; }
for name in mega_u16.bin mega_u16.idx mega_u16; do
  "$BIN" train --model "$TMP/v1000.json" --data "$TMP/$name" "${ARGS[@]}" --log "$TMP/m.log" >"$TMP/m.out" 2>&1 ||
    { cat "$TMP/m.out"; fail "Megatron $name"; }
  grep -q "data $TMP/$name (" "$TMP/m.out" || fail "Megatron $name start-up: $(head -1 "$TMP/m.out")"
  [ "$(jq -c .loss "$TMP/v1.log")" = "$(jq -c .loss "$TMP/m.log")" ] || fail "Megatron $name losses differ from llm.c"
done

# bad input: one line naming the file and the field, exit 2
expect_bad() { # NAME EXPECTED-TEXT ARGS...
  local name="$1" want="$2"
  shift 2
  "$BIN" train "$@" --steps 1 --seq 32 --global-batch 4 --micro-batch 2 >"$TMP/$name.out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, want 2"
  [ "$(wc -l <"$TMP/$name.out")" -eq 1 ] || fail "$name: not one line: $(cat "$TMP/$name.out")"
  grep -qF -- "$want" "$TMP/$name.out" || fail "$name: $(cat "$TMP/$name.out")"
}
M=(--model "$TMP/v1000.json")
expect_bad magic "$TMP/b_magic.idx: magic: not \"MMIDIDX\\0\\0\"" "${M[@]}" --data "$TMP/b_magic.bin"
expect_bad version "$TMP/b_version.idx: version 2: only version 1 is read" "${M[@]}" --data "$TMP/b_version.bin"
expect_bad dtype "$TMP/b_dtype.idx: dtype code 7: floating-point, not token ids" "${M[@]}" --data "$TMP/b_dtype.bin"
expect_bad dtype9 "$TMP/b_dtype9.idx: dtype code 9: unknown" "${M[@]}" --data "$TMP/b_dtype9"
expect_bad count "$TMP/b_count.idx: sequence_count 6 and document_count 6 need more than the 142 bytes of the file" "${M[@]}" --data "$TMP/b_count.bin"
expect_bad short "$TMP/b_short.idx: header: 20 bytes, the MMIDIDX header is 34" "${M[@]}" --data "$TMP/b_short.bin"
expect_bad len "$TMP/b_len.idx: sequence_lengths[1] = -1 is negative" "${M[@]}" --data "$TMP/b_len.bin"
expect_bad ptr "$TMP/b_ptr.idx: sequence_pointers[2] = 7, the sequences before it end at byte 2002" "${M[@]}" --data "$TMP/b_ptr.bin"
expect_bad doc0 "$TMP/b_doc0.idx: document_indices[0] = 1: must rise from 0 to sequence_count 5" "${M[@]}" --data "$TMP/b_doc0.bin"
expect_bad doclast "$TMP/b_doclast.idx: document_indices[5] = 4" "${M[@]}" --data "$TMP/b_doclast.bin"
expect_bad modes "(sequence_modes: a multimodal index is not read)" "${M[@]}" --data "$TMP/b_modes.bin"
expect_bad binsize "$TMP/b_binsize.bin: 24002 bytes, its index $TMP/b_binsize.idx says 24000 (sequence_lengths x uint16)" "${M[@]}" --data "$TMP/b_binsize.bin"
expect_bad over "$TMP/over.bin: token id 1000 at byte offset 1554 is not below the vocabulary 1000 of model v1000" "${M[@]}" --data "$TMP/over.bin"
expect_bad neg "$TMP/neg.bin: token id -3 at byte offset 20 is negative" --model "$TMP/llama3.json" --data "$TMP/neg.bin"
expect_bad rawvocab "$TMP/raw32.bin: a raw token file says nothing of its token type: with the vocabulary 128256 give --data-dtype uint32" \
  --model "$TMP/llama3.json" --data "$TMP/raw32.bin"
expect_bad dtypeflag "--data-dtype 'int8': expected uint16 or uint32" "${M[@]}" --data "$TMP/v1.bin" --data-dtype int8
head -c 1000 "$TMP/v2.bin" >"$TMP/v2cut.bin"
expect_bad v2cut "$TMP/v2cut.bin: truncated llm.c header: 1000 bytes, the header is 1024" "${M[@]}" --data "$TMP/v2cut.bin"
head -c 5000 "$TMP/v2.bin" >"$TMP/v2short.bin"
expect_bad v2short "$TMP/v2short.bin: the llm.c header says 12000 tokens, the file holds 3976 bytes after it (truncated)" \
  "${M[@]}" --data "$TMP/v2short.bin"
[ "$fails" -eq 0 ] && echo "cli_data_formats: all passed"
exit $((fails > 0))
