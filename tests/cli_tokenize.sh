#!/usr/bin/env bash
# scripts/tokenize.py (docs/data.md, "Tokenizing"): a byte-level BPE trained here with Hugging Face
# tokenizers on the fixture texts (nothing downloaded) encodes plain text and jsonl (non-ASCII
# included) into llm.c version-1 shards whose ids are exactly tokenizers' Tokenizer.encode ids, the
# first --val-fraction of them the "_val" shard; the shard directory trains (2 ranks = 1 rank) and
# export --tokenizer puts the tokenizer beside the weights; generate --tokenizer --prompt TEXT
# prints exactly what a transformers pipeline's generated_text would be (decoded here with
# tokenizers as the pipeline does), also for a LLaMA/SentencePiece-style byte-fallback tokenizer; a
# vocabulary over 65,536 (a word-level tokenizer of 70,000 words) writes version 2 (uint32) shards
# that train with a first loss of ~ln(70000); bad input is one line, exit 2.
. "$(dirname "$0")/common.sh"
TOK="$(cd "$(dirname "$0")/.." && pwd)/scripts/tokenize.py"
PYT=python3
if ! $PYT -c 'import tokenizers' 2>"$TMP/py.err"; then
  echo "FAIL: $PYT cannot import tokenizers (pip install tokenizers: scripts/deps.sh): $(tail -1 "$TMP/py.err")"
  exit 1
fi

$PYT - "$TMP" "$FIX/text" <<'PY' || fail "fixtures"
import glob, json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
d, text = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(text + '/*.txt'))
bpe = Tokenizer(models.BPE())
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.decoder = decoders.ByteLevel()
bpe.train(files, trainers.BpeTrainer(vocab_size=400, special_tokens=['<|endoftext|>'],
                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
bpe.save(d + '/bpe.json')
docs = ["Grüße aus Köln — naïve café", "日本語のテキスト and emoji 🚀🎉", "plain ASCII line\nwith two lines"] * 40
with open(d + '/docs.jsonl', 'w', encoding='utf-8') as f:
    for t in docs:
        f.write(json.dumps({"text": t, "id": 1}, ensure_ascii=False) + "\n")
# the same documents as a parquet file, in a column "body" (pyarrow: scripts/deps.sh)
import pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({'n': list(range(30)), 'body': docs[:30]}), d + '/docs.parquet')
# a word-level vocabulary of 70,000 words: ids past 65,535 need llm.c version 2
words = ['w%d' % i for i in range(70000)]
wl = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token='w0'))
wl.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
wl.save(d + '/words.json')
import random
random.seed(3)
pat = [random.randrange(70000) for _ in range(13)]
seq = []
while len(seq) < 30000:
    seq += pat if random.random() < 0.7 else [random.randrange(70000) for _ in range(13)]
open(d + '/words.txt', 'w').write(' '.join(words[i] for i in seq))
# LLaMA / SentencePiece style: "▁" for spaces, byte fallback (<0x00>..<0xFF> at ids 3..258) for
# characters outside the learnt alphabet, BOS <s> added by the post-processor
from tokenizers import normalizers
sp = Tokenizer(models.BPE(unk_token='<unk>'))
sp.normalizer = normalizers.Sequence([normalizers.Prepend('\u2581'), normalizers.Replace(' ', '\u2581')])
sp.train(files, trainers.BpeTrainer(vocab_size=500, special_tokens=['<unk>', '<s>', '</s>'], limit_alphabet=70,
                                    show_progress=False))
j = json.loads(sp.to_str())
vocab = {'<unk>': 0, '<s>': 1, '</s>': 2}
vocab.update({'<0x%02X>' % b: 3 + b for b in range(256)})
for t, _ in sorted(j['model']['vocab'].items(), key=lambda x: x[1]):
    vocab.setdefault(t, len(vocab))
j['model'].update(vocab=vocab, byte_fallback=True, fuse_unk=True)
for a in j['added_tokens']:
    a['id'] = vocab[a['content']]
j['decoder'] = {'type': 'Sequence', 'decoders': [{'type': 'Replace', 'pattern': {'String': '\u2581'}, 'content': ' '},
                {'type': 'ByteFallback'}, {'type': 'Fuse'}, {'type': 'Strip', 'content': ' ', 'start': 1, 'stop': 0}]}
j['post_processor'] = {'type': 'TemplateProcessing', 'single': [{'SpecialToken': {'id': '<s>', 'type_id': 0}},
                       {'Sequence': {'id': 'A', 'type_id': 0}}], 'pair': [{'Sequence': {'id': 'A', 'type_id': 0}},
                       {'Sequence': {'id': 'B', 'type_id': 1}}], 'special_tokens': {'<s>': {'id': '<s>', 'ids': [1], 'tokens': ['<s>']}}}
Tokenizer.from_str(json.dumps(j)).save(d + '/sp.json')
open(d + '/sp-vocab', 'w').write(str(len(vocab)))
PY

# the ids of every shard, concatenated in split order (val then train), against tokenizers' own
check_ids() { # TOKENIZER PREFIX EOT(-1: none) VERSION INPUT...
  $PYT - "$@" <<'PY'
import glob, json, struct, sys
from array import array
from tokenizers import Tokenizer
tj, prefix, eot, version, inputs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
tok = Tokenizer.from_file(tj)
want = []
for p in inputs:
    if p.endswith('.parquet'):
        import pyarrow.parquet as pq
        texts = pq.read_table(p).column('body').to_pylist()
    else:
        texts = [json.loads(l)['text'] for l in open(p, encoding='utf-8')] if p.endswith('.jsonl') else [open(p, encoding='utf-8').read()]
    for t in texts:
        want += tok.encode(t).ids + ([eot] if eot >= 0 else [])
got = []
for split in ('val', 'train'):
    for path in sorted(glob.glob(prefix + '_' + split + '_*.bin')):
        b = open(path, 'rb').read()
        magic, ver, n = struct.unpack('<3i', b[:12])
        assert magic == 20240520 and ver == version, (path, magic, ver)
        a = array('H' if ver == 1 else 'I'); a.frombytes(b[1024:])
        assert len(a) == n, (path, len(a), n)
        got += list(a)
assert got == want, 'ids differ from tokenizers: %d vs %d ids, first difference at %s' % (
    len(got), len(want), next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want))))
print(len(got), max(got))
PY
}

echo '{"no": "tokenizer"}' >"$TMP/notok.json"
# plain text + jsonl (non-ASCII), an end-of-text token after each document, 3 train shards
mkdir -p "$TMP/shards"
$PYT "$TOK" --tokenizer "$TMP/bpe.json" --out "$TMP/shards/corpus" --val-fraction 0.1 --shard-tokens 12000 \
  --eot '<|endoftext|>' "$FIX/text/GPL-3.txt" "$FIX/text/MPL-2.0.txt" "$TMP/docs.jsonl" >"$TMP/tok.out" 2>"$TMP/tok.err" ||
  { cat "$TMP/tok.err"; fail "tokenize"; }
grep -Eq "^tokenize: 122 documents, [0-9]+ bytes -> [0-9]+ tokens \([0-9]+ train in [0-9]+ shards, [0-9]+ validation in 1\); vocabulary 400: llm.c version 1 \(uint16\)" \
  "$TMP/tok.out" || fail "summary: $(cat "$TMP/tok.out")"
check_ids "$TMP/bpe.json" "$TMP/shards/corpus" 0 1 "$FIX/text/GPL-3.txt" "$FIX/text/MPL-2.0.txt" "$TMP/docs.jsonl" \
  >"$TMP/ids.txt" 2>&1 || fail "BPE ids: $(tail -1 "$TMP/ids.txt")"
[ -f "$TMP/shards/corpus_val_000000.bin" ] && [ -f "$TMP/shards/corpus_train_000002.bin" ] || fail "shards: $(ls "$TMP/shards")"
# parquet: the documents of one column (--text-field), the same ids as tokenizers gives
"$BIN" tokenize --tokenizer "$TMP/bpe.json" --out "$TMP/pq/c" --val-fraction 0.1 --text-field body "$TMP/docs.parquet" \
  >"$TMP/pq.out" 2>"$TMP/pq.err" || { cat "$TMP/pq.err"; fail "tokenize parquet"; }
grep -q "^tokenize: 30 documents" "$TMP/pq.out" || fail "parquet summary: $(cat "$TMP/pq.out")"
check_ids "$TMP/bpe.json" "$TMP/pq/c" -1 1 "$TMP/docs.parquet" >"$TMP/pqids.txt" 2>&1 ||
  fail "parquet ids: $(tail -1 "$TMP/pqids.txt")"
"$BIN" tokenize --tokenizer "$TMP/bpe.json" --out "$TMP/pq/d" --text-field nope "$TMP/docs.parquet" >"$TMP/pq2.out" 2>&1
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/pq2.out")" -eq 1 ] && grep -q "docs.parquet" "$TMP/pq2.out" ||
  fail "a parquet file without the column: $(cat "$TMP/pq2.out")"
# the shard directory trains: the _val shard is the validation split; 2 pipeline ranks = 1 rank
cat >"$TMP/v400.json" <<'JSON'
{"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 4, "n_positions": 128, "vocab_size": 400}
JSON
ARGS=(--steps 3 --seed 2 --global-batch 4 --micro-batch 2 --seq 32 --eval-every 3)
"$BIN" train --model "$TMP/v400.json" --data "$TMP/shards" "${ARGS[@]}" --log "$TMP/one.log" \
  --ckpt-dir "$TMP/ck" --ckpt-every 3 >"$TMP/one.out" 2>&1 ||
  { cat "$TMP/one.out"; fail "train on the shards"; }
grep -q "vocabulary 400; data $TMP/shards (" "$TMP/one.out" || fail "start-up: $(head -1 "$TMP/one.out")"
cat >"$TMP/pp2.json" <<'JSON'
{"format": "autohet-plan", "version": 1, "model": {"name": "v400.json"}, "train": {"seq": 32},
 "cluster": {"nodes": [{"name": "n0", "gpu_type": "cpu", "gpus": 2}]},
 "tp": 1, "micro_batch": 2, "global_batch": 4,
 "replicas": [{"micro_batches": 2, "stages": [{"node_index": 0, "gpus": [0], "layers": [0, 2]},
                                              {"node_index": 0, "gpus": [1], "layers": [2, 4]}]}]}
JSON
mpirun -np 2 --bind-to none "$BIN" train --model "$TMP/v400.json" --data "$TMP/shards" "${ARGS[@]}" \
  --plan "$TMP/pp2.json" --log "$TMP/two.log" >"$TMP/two.out" 2>&1 || { cat "$TMP/two.out"; fail "2 ranks"; }
paste <(jq -r .loss "$TMP/one.log") <(jq -r .loss "$TMP/two.log") | awk 'NF != 2 { bad = 1 }
  { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1 } END { exit bad + (NR != 3) }' ||
  fail "2 ranks differ: $(paste <(jq -r .loss "$TMP/one.log") <(jq -r .loss "$TMP/two.log") | tr '\n' ' ')"

# export --tokenizer: the tokenizer.json beside the weights (the same bytes), a tokenizer_config.json
# naming the fast tokenizer class; a tokenizer with ids past the vocabulary is refused before writing
"$BIN" export --ckpt "$TMP/ck" --out "$TMP/hf" --tokenizer "$TMP/bpe.json" >"$TMP/ex.out" 2>&1 ||
  { cat "$TMP/ex.out"; fail "export --tokenizer"; }
grep -q "> $TMP/hf/model.safetensors + tokenizer.json$" "$TMP/ex.out" || fail "export line: $(cat "$TMP/ex.out")"
cmp -s "$TMP/bpe.json" "$TMP/hf/tokenizer.json" || fail "tokenizer.json is not the given file"
jq -e '.tokenizer_class == "PreTrainedTokenizerFast" and .model_max_length == 128' "$TMP/hf/tokenizer_config.json" \
  >/dev/null || fail "tokenizer_config.json: $(cat "$TMP/hf/tokenizer_config.json")"
$PYT -c 'import sys; from tokenizers import Tokenizer; t = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json"); assert t.decode(t.encode("Grüße 🚀").ids) == "Grüße 🚀"' \
  "$TMP/hf" || fail "the exported tokenizer.json does not load"
# a directory of tokenizer files: each copied, its own tokenizer_config.json kept
mkdir -p "$TMP/tokdir" && cp "$TMP/bpe.json" "$TMP/tokdir/tokenizer.json" &&
  echo '{"tokenizer_class": "GPT2TokenizerFast", "eos_token": "<|endoftext|>"}' >"$TMP/tokdir/tokenizer_config.json"
"$BIN" export --ckpt "$TMP/ck" --out "$TMP/hf2" --tokenizer "$TMP/tokdir" >/dev/null 2>&1 || fail "export --tokenizer DIR"
cmp -s "$TMP/tokdir/tokenizer_config.json" "$TMP/hf2/tokenizer_config.json" || fail "the directory's tokenizer_config.json"
"$BIN" export --ckpt "$TMP/ck" --out "$TMP/hf3" --tokenizer "$TMP/words.json" >"$TMP/ex3.out" 2>&1
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/ex3.out")" -eq 1 ] && [ ! -e "$TMP/hf3" ] &&
  grep -qF "token id 69999 (\"w69999\") is not below the model's vocabulary 400" "$TMP/ex3.out" ||
  fail "a tokenizer past the vocabulary: $(cat "$TMP/ex3.out")"

# generate --tokenizer --prompt: the prompt's ids are tokenizers' (the same greedy ids as
# --prompt-tokens with them), stdout is only the pipeline's generated_text: the prompt, then the
# decoded continuation
gen_check() { # TOKENIZER_JSON HF_DIR PROMPT
  local tj="$1" hf="$2" prompt="$3" ids all
  ids=$($PYT -c 'import sys; from tokenizers import Tokenizer; print(",".join(map(str, Tokenizer.from_file(sys.argv[1]).encode(sys.argv[2]).ids)))' \
    "$tj" "$prompt")
  "$BIN" generate --init-from "$hf" --prompt-tokens "$ids" --max-new-tokens 12 >"$TMP/g-ids.out" 2>&1 ||
    { cat "$TMP/g-ids.out"; fail "generate --prompt-tokens"; return; }
  "$BIN" generate --init-from "$hf" --tokenizer "$hf/tokenizer.json" --prompt "$prompt" --max-new-tokens 12 \
    >"$TMP/g-text.out" 2>"$TMP/g-text.err" || { cat "$TMP/g-text.err"; fail "generate --prompt"; return; }
  all=$(sed -n 's/^tokens: //p' "$TMP/g-ids.out" | sed 's/ | /,/; s/ //g')
  [ "${all:0:${#ids}}" = "$ids" ] || fail "generate ids: $all (prompt $ids)"
  $PYT - "$tj" "$prompt" "$ids" "$all" "$TMP/want.txt" <<'PY' || fail "generated_text"
import sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
prompt, n, ids = sys.argv[2], len(sys.argv[3].split(',')), [int(x) for x in sys.argv[4].split(',')]
full = tok.decode(ids, skip_special_tokens=True)  # as TextGenerationPipeline.postprocess (return_full_text)
open(sys.argv[5], 'w', encoding='utf-8').write(prompt + full[len(tok.decode(ids[:n], skip_special_tokens=True)):] + '\n')
PY
  cmp -s "$TMP/want.txt" "$TMP/g-text.out" || fail "generate --prompt stdout: $(od -c "$TMP/g-text.out" | head -3) want $(od -c "$TMP/want.txt" | head -3)"
  [ -s "$TMP/g-text.err" ] && fail "generate --prompt wrote to stderr: $(cat "$TMP/g-text.err")"
  [[ "$(cat "$TMP/g-text.out")" == "$prompt"* ]] || fail "generated_text does not start with the prompt"
}
gen_check "$TMP/bpe.json" "$TMP/hf" "Grüße, this License — 🚀"
"$BIN" generate --init-from "$TMP/hf" --prompt "x" >"$TMP/g1.out" 2>&1
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/g1.out")" -eq 1 ] && grep -q "needs --tokenizer.*vocabulary is" "$TMP/g1.out" ||
  fail "--prompt without --tokenizer: $(cat "$TMP/g1.out")"

# a byte-level model (vocabulary 256) takes --prompt TEXT without a tokenizer: TEXT's bytes are the ids,
# stdout the prompt and the continuation's bytes (those of --prompt-tokens with the same ids), a newline
"$BIN" train --model tiny-gpt --data "$FIX/text" --steps 3 --seq 32 --global-batch 4 --micro-batch 2 \
  --ckpt-dir "$TMP/bytes-ck" --ckpt-every 3 >"$TMP/bytes-train.out" 2>&1 || fail "byte-level train: $(tail -3 "$TMP/bytes-train.out")"
btext="Grüße, the License"
bids=$(printf '%s' "$btext" | od -An -tu1 -v | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
"$BIN" generate --ckpt "$TMP/bytes-ck" --prompt "$btext" --max-new-tokens 20 --temperature 1 --seed 5 \
  >"$TMP/bytes-gen.out" 2>"$TMP/bytes-gen.err" || fail "generate --prompt on a byte-level model: $(cat "$TMP/bytes-gen.err")"
[ -s "$TMP/bytes-gen.err" ] && fail "generate --prompt (bytes) wrote to stderr: $(cat "$TMP/bytes-gen.err")"
new_ids=$("$BIN" generate --ckpt "$TMP/bytes-ck" --prompt-tokens "$bids" --max-new-tokens 20 --temperature 1 --seed 5 |
  sed -n 's/^tokens: .* | //p')
[ "$(echo "$new_ids" | tr ',' '\n' | wc -l)" -eq 20 ] || fail "generate --prompt-tokens gave: $new_ids"
{ printf '%s' "$btext"; for i in ${new_ids//,/ }; do printf "\\$(printf '%03o' "$i")"; done; echo; } >"$TMP/bytes-want.out"
cmp -s "$TMP/bytes-want.out" "$TMP/bytes-gen.out" ||
  fail "generate --prompt (bytes): $(od -c "$TMP/bytes-gen.out" | head -3) want $(od -c "$TMP/bytes-want.out" | head -3)"
"$BIN" generate --ckpt "$TMP/bytes-ck" --prompt "" >"$TMP/g0.out" 2>&1
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/g0.out")" -eq 1 ] && grep -q "1 to 4096 bytes" "$TMP/g0.out" || fail "--prompt '': $(cat "$TMP/g0.out")"
# a prompt past the model's positions names the flag given (--prompt, its bytes), not --prompt-tokens
"$BIN" generate --ckpt "$TMP/bytes-ck" --prompt "$(printf 'a%.0s' $(seq 300))" >"$TMP/g300.out" 2>&1
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/g300.out")" -eq 1 ] &&
  grep -qF -- "--prompt (300 bytes) + --max-new-tokens 16: 315 positions, model tiny-gpt has 256" "$TMP/g300.out" ||
  fail "a 300-byte --prompt: $(cat "$TMP/g300.out")"
# a tokenizer of another vocabulary than the checkpoint's model: named with both sizes before anything is
# encoded (a python that fails is never run)
AUTOHET_PYTHON=false "$BIN" generate --ckpt "$TMP/bytes-ck" --tokenizer "$TMP/bpe.json" --prompt abc >"$TMP/gv.out" 2>&1
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/gv.out")" -eq 1 ] &&
  grep -qF -- "--tokenizer $TMP/bpe.json: its vocabulary (400 ids) does not match model tiny-gpt's (256)" "$TMP/gv.out" ||
  fail "a 400-id tokenizer with a byte-level checkpoint: $(cat "$TMP/gv.out")"
"$BIN" generate --init-from "$TMP/hf" --tokenizer "$TMP/notok.json" --prompt "x" >"$TMP/g2.out" 2>&1
[ $? -eq 2 ] && [ "$(wc -l <"$TMP/g2.out")" -eq 1 ] && grep -q "notok.json: not a tokenizer.json" "$TMP/g2.out" ||
  fail "a bad tokenizer.json: $(cat "$TMP/g2.out")"

# LLaMA / SentencePiece byte-fallback style: characters outside the alphabet become <0xNN> ids, BOS
# first; the ids are tokenizers', the model trains, exports with it and generates the same text
"$BIN" tokenize --tokenizer "$TMP/sp.json" --out "$TMP/sp/c" --val-fraction 0.1 "$TMP/docs.jsonl" "$FIX/text/MPL-2.0.txt" \
  >"$TMP/sp.out" 2>"$TMP/sp.err" || { cat "$TMP/sp.err"; fail "tokenize, byte fallback"; }
check_ids "$TMP/sp.json" "$TMP/sp/c" -1 1 "$TMP/docs.jsonl" "$FIX/text/MPL-2.0.txt" >"$TMP/spids.txt" 2>&1 ||
  fail "byte-fallback ids: $(tail -1 "$TMP/spids.txt")"
$PYT -c 'import sys; from tokenizers import Tokenizer; ids = Tokenizer.from_file(sys.argv[1]).encode("日本 🚀").ids; assert ids[0] == 1 and sum(3 <= i < 259 for i in ids) >= 10, ids' \
  "$TMP/sp.json" || fail "the byte-fallback tokenizer does not fall back to bytes"
V=$(cat "$TMP/sp-vocab")
cat >"$TMP/vsp.json" <<JSON
{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "vocab_size": $V}
JSON
"$BIN" train --model "$TMP/vsp.json" --data "$TMP/sp" "${ARGS[@]}" --ckpt-dir "$TMP/spck" --ckpt-every 3 \
  >"$TMP/spt.out" 2>&1 || { cat "$TMP/spt.out"; fail "train, byte fallback"; }
"$BIN" export --ckpt "$TMP/spck" --out "$TMP/sphf" --tokenizer "$TMP/sp.json" >/dev/null 2>&1 || fail "export, byte fallback"
gen_check "$TMP/sp.json" "$TMP/sphf" "Grüße aus 日本 🚀 under this License"

# a vocabulary over 65,536 (through autohet tokenize, which runs the script): llm.c version 2, and it trains (first loss ~ ln 70000 = 11.16)
"$BIN" tokenize --tokenizer "$TMP/words.json" --out "$TMP/w/words" --val-fraction 0.05 "$TMP/words.txt" \
  >"$TMP/w.out" 2>"$TMP/w.err" || { cat "$TMP/w.err"; fail "tokenize 70,000 words"; }
grep -q "vocabulary 70000: llm.c version 2 (uint32)" "$TMP/w.out" || fail "v2 summary: $(cat "$TMP/w.out")"
check_ids "$TMP/words.json" "$TMP/w/words" -1 2 "$TMP/words.txt" >"$TMP/wids.txt" 2>&1 || fail "word ids: $(tail -1 "$TMP/wids.txt")"
awk '{ exit !($2 > 65535) }' "$TMP/wids.txt" || fail "no id past 65,535: $(cat "$TMP/wids.txt")"
cat >"$TMP/v70k.json" <<'JSON'
{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "vocab_size": 70000}
JSON
"$BIN" train --model "$TMP/v70k.json" --data "$TMP/w" "${ARGS[@]}" --log "$TMP/w.log" >"$TMP/wt.out" 2>&1 ||
  { cat "$TMP/wt.out"; fail "train on v2 shards"; }
jq -e -s '(.[0].loss - (70000 | log) | fabs) < 0.3' "$TMP/w.log" >/dev/null ||
  fail "first loss is not ~ln(70000): $(jq -s '.[0].loss' "$TMP/w.log")"

# bad input: one line, exit 2
expect_bad() { # NAME EXPECTED-TEXT ARGS...
  local name="$1" want="$2"
  shift 2
  $PYT "$TOK" "$@" >"$TMP/$name.out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, want 2"
  [ "$(wc -l <"$TMP/$name.out")" -eq 1 ] || fail "$name: not one line: $(cat "$TMP/$name.out")"
  grep -qF -- "$want" "$TMP/$name.out" || fail "$name: $(cat "$TMP/$name.out")"
}
printf '{"text": "ok"}\n{"txt": "no"}\n' >"$TMP/bad.jsonl"
printf '{"text": "ok"}\nnot json\n' >"$TMP/bad2.jsonl"
expect_bad notok "tokenize: $TMP/notok.json: not a tokenizer.json" --tokenizer "$TMP/notok.json" --out "$TMP/x" "$TMP/words.txt"
expect_bad missing "tokenize: $TMP/nope.txt: no such file" --tokenizer "$TMP/bpe.json" --out "$TMP/x" "$TMP/nope.txt"
expect_bad field "tokenize: $TMP/bad.jsonl:2: no string field \"text\"" --tokenizer "$TMP/bpe.json" --out "$TMP/x" "$TMP/bad.jsonl"
expect_bad json "tokenize: $TMP/bad2.jsonl:2: not a JSON object" --tokenizer "$TMP/bpe.json" --out "$TMP/x" "$TMP/bad2.jsonl"
expect_bad eot "tokenize: --eot '<eos>': not a token of" --tokenizer "$TMP/bpe.json" --out "$TMP/x" --eot '<eos>' "$TMP/words.txt"
expect_bad args "tokenize: the following arguments are required: --tokenizer (see --help)" --out "$TMP/x" "$TMP/words.txt"
expect_bad frac "tokenize: --val-fraction 1.5: outside [0, 1)" --tokenizer "$TMP/bpe.json" --out "$TMP/x" --val-fraction 1.5 "$TMP/words.txt"
expect_bad fifo "tokenize: /dev/zero: not a regular file" --tokenizer "$TMP/bpe.json" --out "$TMP/x" /dev/zero
expect_bad unknown "tokenize: unrecognized arguments: --bogus (see --help)" --bogus
# an output that cannot be written: refused before encoding, nothing created (only PREFIX's last
# directory component is made, as train --ckpt-dir)
expect_bad outdir "tokenize: --out $TMP/no/dir/c: $TMP/no is not a directory" --tokenizer "$TMP/bpe.json" \
  --out "$TMP/no/dir/c" "$TMP/words.txt"
[ -e "$TMP/no" ] && fail "--out with a missing parent created $(find "$TMP/no")"
expect_bad outfile "tokenize: --out $TMP/words.txt/c: $TMP/words.txt is not a directory" --tokenizer "$TMP/bpe.json" \
  --out "$TMP/words.txt/c" "$TMP/words.txt"
expect_bad outproc "tokenize: --out /proc/c: cannot create a file in /proc" --tokenizer "$TMP/bpe.json" \
  --out /proc/c "$TMP/words.txt"
"$BIN" tokenize --tokenizer "$TMP/bpe.json" --out "$TMP/x" "$TMP/nope.txt" >"$TMP/at.out" 2>&1
[ $? -eq 2 ] && [ "$(cat "$TMP/at.out")" = "tokenize: $TMP/nope.txt: no such file" ] || fail "autohet tokenize, bad input: $(cat "$TMP/at.out")"
[ "$fails" -eq 0 ] && echo "cli_tokenize: all passed"
exit $((fails > 0))
