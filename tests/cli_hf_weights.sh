#!/usr/bin/env bash
# Weights in and out in Hugging Face format (docs/weights.md), checked against
# hand-written PyTorch forwards (tests/hf/hf_model.py, Debian's python3-torch
# under /usr/bin/python3; no transformers, no downloads). For a random GPT-2
# (hub-style names without "transformer.", tied head) and a random LLaMA (GQA,
# untied head): autohet's loss from --init-from equals PyTorch's on the same
# tokens (1e-4); --init-from -> checkpoint of step 0 -> export gives the same
# tensors bit for bit; a trained step exported and read back by PyTorch gives
# autohet's loss on it; sharded files with an index, and BF16/F16 files, load;
# a 2-stage x TP2 plan on 4 MPI ranks loads the same weights (its export is
# byte-identical to one process's) and computes the same loss; generate's
# greedy tokens are PyTorch's argmax tokens. Bad inputs are one line and exit 2.
. "$(dirname "$0")/common.sh"
PY=/usr/bin/python3
HF="$(cd "$(dirname "$0")" && pwd)/hf/hf_model.py"
if ! "$PY" -c "import torch, numpy" 2>"$TMP/py.err"; then
  echo "FAIL: $PY cannot import torch and numpy (install python3-torch python3-numpy: scripts/deps.sh): $(tail -1 "$TMP/py.err")"
  exit 1
fi
MPIRUN=(timeout 300 mpirun -np 4 --bind-to none)
export AUTOHET_SGEMM_PEAK=1e11 # only the MFU column reads it: no timed sgemm loop per run
TOK="$TMP/tok.bin" # 65 uint16 tokens: every row of a batch of seq 64 is the whole file
"$PY" -c "import numpy as np; np.random.default_rng(5).integers(0, 256, 65).astype('<u2').tofile('$TOK')"
RUN=(--data "$TOK" --val-data "$TOK" --eval-every 0)
ONE=(--seq 64 --global-batch 2 --micro-batch 1)
close() { # a b tol: |a - b| <= tol
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t && a == a && b == b) }'
}
loss_of() { jq -r 'select(.step == 1) | .loss' "$1"; }

check_arch() { # arch make-flags...
  local a=$1 d="$TMP/$1"
  shift
  "$PY" "$HF" make --arch "$a" --out "$d/hf" --seed 7 "$@" || { fail "$a: fixture"; return; }
  # the loss of the HF weights, autohet against PyTorch
  "$BIN" train --init-from "$d/hf" "${RUN[@]}" "${ONE[@]}" --steps 1 --log "$d/one.log" >"$d/one.out" 2>&1 \
    || { tail -3 "$d/one.out"; fail "$a: train --init-from"; return; }
  local la lb
  la=$(loss_of "$d/one.log")
  # round trip: init-from -> checkpoint of step 0 -> export, bit for bit
  "$BIN" train --init-from "$d/hf" "${RUN[@]}" "${ONE[@]}" --steps 0 --ckpt-dir "$d/ck0" --ckpt-every 1 \
    >"$d/ck0.out" 2>&1 || { tail -3 "$d/ck0.out"; fail "$a: --steps 0 checkpoint"; }
  "$BIN" export --ckpt "$d/ck0" --model "$d/hf/config.json" --out "$d/ex0" >"$d/ex0.out" 2>&1 \
    || { cat "$d/ex0.out"; fail "$a: export"; }
  "$PY" "$HF" compare "$d/hf" "$d/ex0" || fail "$a: the round trip changed tensors"
  # a trained step, exported and read back: PyTorch's loss on it is autohet's
  "$BIN" train --init-from "$d/hf" "${RUN[@]}" "${ONE[@]}" --steps 1 --ckpt-dir "$d/ck1" --ckpt-every 1 \
    >"$d/ck1.out" 2>&1 || fail "$a: train 1 step"
  "$BIN" export --ckpt "$d/ck1" --model "$d/hf/config.json" --out "$d/ex1" >/dev/null 2>&1 || fail "$a: export step 1"
  "$BIN" train --init-from "$d/ex1" "${RUN[@]}" "${ONE[@]}" --steps 1 --log "$d/two.log" >/dev/null 2>&1 \
    || fail "$a: --init-from the export"
  lb=$(loss_of "$d/two.log")
  close "$lb" "$la" 1e-3 && fail "$a: the trained step did not change the loss ($la -> $lb)"
  # sharded files (2 + index) of the same weights: the same loss, bit for bit
  "$PY" "$HF" make --arch "$a" --out "$d/sh" --seed 7 --shards 2 "$@" || fail "$a: sharded fixture"
  "$BIN" train --init-from "$d/sh" "${RUN[@]}" "${ONE[@]}" --steps 1 --log "$d/sh.log" >/dev/null 2>&1 \
    || fail "$a: --init-from sharded"
  [ "$(loss_of "$d/sh.log")" = "$la" ] || fail "$a: sharded: loss $(loss_of "$d/sh.log"), unsharded $la"
  # 2 stages x TP2 on 4 ranks: every rank loads its own layers' shards
  cat >"$d/plan.json" <<JSON
{"format": "autohet-plan", "version": 1, "model": {"name": "hf/config.json"}, "train": {"seq": 64},
 "cluster": {"nodes": [{"name": "n0", "gpu_type": "cpu", "gpus": 2}, {"name": "n1", "gpu_type": "cpu", "gpus": 2}]},
 "tp": 2, "micro_batch": 1, "global_batch": 2,
 "replicas": [{"micro_batches": 2, "stages": [{"node_index": 0, "gpus": [0, 1], "layers": [0, 3]},
                                              {"node_index": 1, "gpus": [0, 1], "layers": [3, 6]}]}]}
JSON
  "${MPIRUN[@]}" "$BIN" train --init-from "$d/hf" --plan "$d/plan.json" "${RUN[@]}" --steps 0 --ckpt-dir "$d/ck4" \
    --ckpt-every 1 >"$d/ck4.out" 2>&1 || { tail -3 "$d/ck4.out"; fail "$a: 4 ranks --steps 0"; }
  ls "$d/ck4/n1" | grep -q 'L005-tp1of2-s0' || fail "$a: 4 ranks: no TP=2 shard of the head"
  "$BIN" export --ckpt "$d/ck4" --model "$d/hf/config.json" --out "$d/ex4" >/dev/null 2>&1 || fail "$a: export TP2"
  cmp -s "$d/ex4/model.safetensors" "$d/ex0/model.safetensors" || fail "$a: 2x TP2 export differs from 1 process's"
  "${MPIRUN[@]}" "$BIN" train --init-from "$d/hf" --plan "$d/plan.json" "${RUN[@]}" --steps 1 --log "$d/four.log" \
    >"$d/four.out" 2>&1 || { tail -3 "$d/four.out"; fail "$a: 4 ranks train"; }
  close "$(loss_of "$d/four.log")" "$la" 1e-5 || fail "$a: 4 ranks: loss $(loss_of "$d/four.log"), 1 process $la"
  echo "$a: 2 stages x TP2 on 4 ranks: loss $(loss_of "$d/four.log"), 1 process $la"
  # generate: greedy is PyTorch's argmax, from the HF files and from the TP2 checkpoint alike
  # PyTorch (one process): the loss of the HF files and of the trained export, the greedy tokens
  local ref lt ltb want got
  ref=$("$PY" "$HF" loss "$d/hf" "$TOK" -- loss "$d/ex1" "$TOK" -- generate "$d/hf" 72,101,108 6) \
    || fail "$a: the PyTorch forward"
  lt=$(sed -n 1p <<<"$ref") ltb=$(sed -n 2p <<<"$ref") want=$(sed -n 3p <<<"$ref")
  close "$la" "$lt" 1e-4 || fail "$a: autohet's loss $la, PyTorch's $lt"
  close "$lb" "$ltb" 1e-4 || fail "$a: trained export: autohet's loss $lb, PyTorch's $ltb"
  echo "$a: loss of the HF files: autohet $la, PyTorch $lt; after one step (exported): autohet $lb, PyTorch $ltb"
  got=$("$BIN" generate --init-from "$d/hf" --prompt-tokens 72,101,108 --max-new-tokens 6 | sed -n 's/^tokens: //p' | sed 's/ | /,/; s/ //g')
  [ "$got" = "$want" ] || fail "$a: generate: $got, PyTorch $want"
  got=$("$BIN" generate --ckpt "$d/ck4" --model "$d/hf/config.json" --prompt-tokens 72,101,108 --max-new-tokens 6 \
    | sed -n 's/^tokens: //p' | sed 's/ | /,/; s/ //g')
  [ "$got" = "$want" ] || fail "$a: generate --ckpt: $got, PyTorch $want"
}

check_arch gpt2 --no-prefix
check_arch llama --untied
# Mistral: every layer sees the last 4 positions (sliding_window 4 < seq 64, and < the 9 tokens generated)
check_arch mistral --untied --window 4
jq -e '.sliding_window == 4 and .model_type == "mistral"' "$TMP/mistral/ex0/config.json" >/dev/null || fail "mistral: export without its sliding_window"

# sampling: a seed gives the same tokens, the text of a byte-level model is printed
g1=$("$BIN" generate --init-from "$TMP/gpt2/hf" --prompt-tokens 72,105 --max-new-tokens 12 --temperature 1 --top-k 20 --seed 4)
g2=$("$BIN" generate --init-from "$TMP/gpt2/hf" --prompt-tokens 72,105 --max-new-tokens 12 --temperature 1 --top-k 20 --seed 4)
g3=$("$BIN" generate --init-from "$TMP/gpt2/hf" --prompt-tokens 72,105 --max-new-tokens 12 --temperature 1 --top-k 20 --seed 5)
[ -n "$g1" ] && [ "$g1" = "$g2" ] || fail "sampling with one seed is not repeatable"
[ "$g1" != "$g3" ] || fail "two seeds sampled the same 12 tokens"
echo "$g1" | grep -q '^text: Hi|' || fail "no text line for a byte-level model: $g1"

# BF16 and F16 files: read as fp32 (the export holds exactly the upcast values)
for dt in BF16 F16; do
  "$PY" "$HF" make --arch llama --out "$TMP/$dt" --seed 7 --dtype "$dt" || fail "$dt fixture"
  "$BIN" train --init-from "$TMP/$dt" "${RUN[@]}" "${ONE[@]}" --steps 0 --ckpt-dir "$TMP/$dt-ck" --ckpt-every 1 \
    >/dev/null 2>&1 || fail "$dt: --init-from"
  "$BIN" export --ckpt "$TMP/$dt-ck" --model "$TMP/$dt/config.json" --out "$TMP/$dt-ex" >/dev/null 2>&1 || fail "$dt: export"
  "$PY" "$HF" compare "$TMP/$dt" "$TMP/$dt-ex" >/dev/null || fail "$dt: the export is not the upcast values"
done

# a vocabulary that is not a multiple of 64 (the head GEMM's padded rows) and an untied GPT-2 head
"$PY" "$HF" make --arch gpt2 --out "$TMP/v300" --seed 9 --vocab 300 --untied || fail "vocab-300 fixture"
"$BIN" train --init-from "$TMP/v300" "${RUN[@]}" "${ONE[@]}" --steps 1 --log "$TMP/v300.log" >/dev/null 2>&1 \
  || fail "vocab 300: --init-from"
l300=$(loss_of "$TMP/v300.log") t300=$("$PY" "$HF" loss "$TMP/v300" "$TOK")
close "$l300" "$t300" 1e-4 || fail "vocab 300, untied: autohet's loss $l300, PyTorch's $t300"

# Qwen2: LLaMA blocks with q/k/v biases (the q/k biases permuted like their rows)
"$PY" "$HF" make --arch qwen2 --out "$TMP/qwen2" --seed 11 || fail "qwen2 fixture"
"$BIN" train --init-from "$TMP/qwen2" "${RUN[@]}" "${ONE[@]}" --steps 1 --log "$TMP/qwen2.log" >/dev/null 2>&1 \
  || fail "qwen2: --init-from"
"$BIN" train --init-from "$TMP/qwen2" "${RUN[@]}" "${ONE[@]}" --steps 0 --ckpt-dir "$TMP/qwen2-ck" --ckpt-every 1 \
  >/dev/null 2>&1 || fail "qwen2: --steps 0"
"$BIN" export --ckpt "$TMP/qwen2-ck" --model "$TMP/qwen2/config.json" --out "$TMP/qwen2-ex" >/dev/null 2>&1 \
  || fail "qwen2: export"
jq -e '.model_type == "qwen2" and .use_sliding_window == false' "$TMP/qwen2-ex/config.json" >/dev/null \
  || fail "qwen2: the exported config.json"
"$PY" "$HF" compare "$TMP/qwen2" "$TMP/qwen2-ex" >/dev/null || fail "qwen2: the round trip changed tensors"
lq=$(loss_of "$TMP/qwen2.log") tq=$("$PY" "$HF" loss "$TMP/qwen2" "$TOK")
close "$lq" "$tq" 1e-4 || fail "qwen2: autohet's loss $lq, PyTorch's $tq"
echo "qwen2: loss autohet $lq, PyTorch $tq; vocabulary 300, untied GPT-2: autohet $l300, PyTorch $t300"

# bad inputs: one line naming the file / tensor / field, exit 2
bad() { # name expected-regex command...
  local name=$1 re=$2
  shift 2
  "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$name: exit $rc, expected 2 ($(head -c 300 "$TMP/bad.err"))"
  [ "$(wc -l <"$TMP/bad.err")" -eq 1 ] || fail "$name: not one line on stderr: $(head -c 300 "$TMP/bad.err")"
  grep -Eq -- "$re" "$TMP/bad.err" || fail "$name: '$(cat "$TMP/bad.err")' does not match /$re/"
}
G="$TMP/gpt2/hf"
mk() { rm -rf "$TMP/b"; cp -r "$G" "$TMP/b"; }
T1=(train "${RUN[@]}" "${ONE[@]}" --steps 1 --init-from "$TMP/b")
mk; head -c 5 "$G/model.safetensors" >"$TMP/b/model.safetensors"
bad truncated "model.safetensors: 5 bytes: not a safetensors file" "$BIN" "${T1[@]}"
mk; head -c 100000 "$G/model.safetensors" >"$TMP/b/model.safetensors"
bad "cut data" "model.safetensors: tensor '.*': data_offsets: .* outside the [0-9]+-byte data section" "$BIN" "${T1[@]}"
mk; printf '\xff\xff\xff\xff\x00\x00\x00\x00' | dd of="$TMP/b/model.safetensors" conv=notrunc 2>/dev/null
bad "header length" "model.safetensors: header length 4294967295: beyond the file" "$BIN" "${T1[@]}"
mk; "$PY" - "$TMP/b/model.safetensors" <<'PYEOF'
import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); i = b.find(b'"F32"'); b[i:i + 5] = b'"I64"'; open(p, "wb").write(b)
PYEOF
bad dtype "model.safetensors: tensor '.*': dtype 'I64' is not supported" "$BIN" "${T1[@]}"
mk; jq '.n_embd = 32' "$G/config.json" >"$TMP/b/config.json"
bad "config differs" "--init-from .*config.json is a gpt of 4 blocks, hidden 32" "$BIN" train "${RUN[@]}" "${ONE[@]}" \
  --steps 1 --model "$G/config.json" --init-from "$TMP/b"
mk; jq '.n_embd = 32 | .n_head = 2' "$G/config.json" >"$TMP/b/config.json"
bad "shape" "model.safetensors: tensor 'wte.weight': shape \[256, 64\], the model needs \[256, 32\]" "$BIN" "${T1[@]}"
mk; jq '.vocab_size = 300' "$G/config.json" >"$TMP/b/config.json"
bad "vocabulary" "tensor 'wte.weight': shape \[256, 64\], the model needs \[300, 64\]" "$BIN" "${T1[@]}"
rm -rf "$TMP/b"; cp -r "$TMP/gpt2/sh" "$TMP/b"; rm "$TMP/b/model-00002-of-00002.safetensors"
bad "missing shard" "model-00002-of-00002.safetensors" "$BIN" "${T1[@]}"
rm -rf "$TMP/b"; cp -r "$TMP/gpt2/sh" "$TMP/b"
jq '.weight_map["wte.weight"] = "../x.safetensors"' "$G/../sh/model.safetensors.index.json" >"$TMP/b/model.safetensors.index.json"
bad "index path" "weight_map 'wte.weight': expected a plain file name" "$BIN" "${T1[@]}"
jq '.model_type = "opt"' "$G/config.json" >"$TMP/b/config.json"
bad "opt" "config.json|OPT" "$BIN" generate --init-from "$TMP/b" --prompt-tokens 1
# a weight that is not finite: the element named, for every reader (train, generate, run's ranks)
poke() { # file tensor index value: set one element (F32, F16 or BF16) in place
  "$PY" - "$@" <<'PYEOF'
import json, struct, sys, numpy as np
p, name, i, v = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
b = bytearray(open(p, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; t = json.loads(b[8:8 + n])[name]
dt = {"F32": "<f4", "F16": "<f2", "BF16": "<f4"}[t["dtype"]]
raw = np.array([v], dtype=dt).tobytes()[2:] if t["dtype"] == "BF16" else np.array([v], dtype=dt).tobytes()
at = 8 + n + t["data_offsets"][0] + i * len(raw); b[at:at + len(raw)] = raw; open(p, "wb").write(b)
PYEOF
}
mk; poke "$TMP/b/model.safetensors" wte.weight 0 nan
bad "NaN, generate" "b/model.safetensors: tensor 'wte.weight': element 0 \(\[0, 0\]\) is NaN" "$BIN" generate \
  --init-from "$TMP/b" --prompt-tokens 72,101 --max-new-tokens 4
bad "NaN, train" "b/model.safetensors: tensor 'wte.weight': element 0 \(\[0, 0\]\) is NaN" "$BIN" "${T1[@]}"
mk; poke "$TMP/b/model.safetensors" h.3.mlp.c_fc.bias 5 -inf
bad "-inf" "tensor 'h.3.mlp.c_fc.bias': element 5 is -inf: weights must be finite" "$BIN" "${T1[@]}"
rm -rf "$TMP/b"; cp -r "$TMP/BF16" "$TMP/b"; poke "$TMP/b/model.safetensors" model.layers.1.self_attn.k_proj.weight 70 inf
bad "BF16 inf" "tensor 'model.layers.1.self_attn.k_proj.weight': element 70 \(\[1, 6\]\) is inf" "$BIN" generate \
  --init-from "$TMP/b" --prompt-tokens 1
# a tensor the model of config.json does not have is an error naming it (config.json's n_layer 2 over 4 blocks,
# q/k/v biases under a LLaMA config); what real files carry besides the weights (GPT-2's attn.bias masks and
# attn.masked_bias, LLaMA's rotary_emb.inv_freq, a tied head's lm_head.weight) is ignored: the same tokens
mk; jq '.n_layer = 2' "$G/config.json" >"$TMP/b/config.json"
bad "extra blocks, generate" "b/model.safetensors: tensor 'h.2.attn.c_attn.bias': not a weight of the model of config.json \(gpt, 2 blocks\)" \
  "$BIN" generate --init-from "$TMP/b" --prompt-tokens 72,101 --max-new-tokens 4
bad "extra blocks, train" "tensor 'h.2.attn.c_attn.bias': not a weight of the model of config.json" "$BIN" "${T1[@]}"
rm -rf "$TMP/b"; cp -r "$TMP/llama/sh" "$TMP/b"; jq '.num_hidden_layers = 3' "$TMP/llama/sh/config.json" >"$TMP/b/config.json"
bad "extra blocks, sharded" "b/model-0000[12]-of-00002.safetensors: tensor 'model.layers.3.[a-z_.]+': not a weight .*llama, 3 blocks" \
  "$BIN" generate --init-from "$TMP/b" --prompt-tokens 1
rm -rf "$TMP/b"; cp -r "$TMP/qwen2" "$TMP/b"; jq '.model_type = "llama"' "$TMP/qwen2/config.json" >"$TMP/b/config.json"
bad "biases under llama" "tensor 'model.layers.0.self_attn.k_proj.bias': not a weight of the model" "$BIN" "${T1[@]}"
for a in gpt2 llama; do
  "$PY" "$HF" make --arch "$a" --out "$TMP/buf-$a" --seed 7 --no-prefix --buffers || fail "$a buffers fixture"
  "$PY" "$HF" make --arch "$a" --out "$TMP/nobuf-$a" --seed 7 --no-prefix || fail "$a fixture"
  g1=$("$BIN" generate --init-from "$TMP/buf-$a" --prompt-tokens 72,101 --max-new-tokens 6 2>&1 | head -1)
  g2=$("$BIN" generate --init-from "$TMP/nobuf-$a" --prompt-tokens 72,101 --max-new-tokens 6 | head -1)
  [ -n "$g2" ] && [ "$g1" = "$g2" ] || fail "$a with buffers and a tied lm_head.weight: '$g1', without: '$g2'"
done
jq '.n_layer = 3' "$TMP/buf-gpt2/config.json" >"$TMP/buf-gpt2/c3" && mv "$TMP/buf-gpt2/c3" "$TMP/buf-gpt2/config.json"
bad "a mask of an extra block" "tensor 'h.3.[a-z_.]+': not a weight .*gpt, 3 blocks" "$BIN" generate \
  --init-from "$TMP/buf-gpt2" --prompt-tokens 1
bad "not a dir" "--init-from .*tok.bin: not a directory" "$BIN" "${T1[@]:0:${#T1[@]}-1}" "$TOK"
"$PY" "$HF" make --arch llama --out "$TMP/v320" --vocab 320 || fail "vocab-320 fixture"
bad "text data" "the weights' vocabulary is 320 .*, the run's is 256 \(text data" "$BIN" train --init-from "$TMP/v320" \
  --data "$FIX/text" --steps 1 --seq 64
bad "init+resume" "--init-from starts a run" "$BIN" "${T1[@]}" --resume "$TMP/gpt2/ck0"
bad "steps 0" "--steps 0 writes" "$BIN" train "${RUN[@]}" --model tiny-gpt --steps 0
# an older checkpoint: state.json without model_config
cp -r "$TMP/gpt2/ck0" "$TMP/old-ck" && jq 'del(.model_config)' "$TMP/gpt2/ck0/state.json" >"$TMP/old-ck/state.json"
bad "export no model" "state.json: model 'hf' is not a preset: give --model" "$BIN" export --ckpt "$TMP/old-ck" --out "$TMP/x"
bad "export step" "layer 0 .*step 9" "$BIN" export --ckpt "$TMP/gpt2/ck0" --model "$G/config.json" --step 9 --out "$TMP/x"
bad "generate token" "--prompt-tokens: token 300 \(item 2\) is not below the vocabulary 256" "$BIN" generate \
  --init-from "$G" --prompt-tokens 1,300
bad "generate positions" "--prompt-tokens \(1 id\) \+ --max-new-tokens 300: 300 positions, model .* has 256" "$BIN" generate --init-from "$G" --prompt-tokens 1 \
  --max-new-tokens 300
bad "generate both" "give one of --ckpt DIR and --init-from" "$BIN" generate --prompt-tokens 1
"$BIN" export --help | grep -q -- "--ckpt DIR" || fail "export --help"
"$BIN" generate --help | grep -q -- "--prompt-tokens" || fail "generate --help"

# the KV cache: greedy tokens with it are the tokens of the uncached full forward (--no-kv-cache, the
# reference) for GPT-2 (tied, and untied with vocabulary 300), LLaMA (GQA) and Qwen2 (q/k/v biases),
# from a prompt of 1 and of 5 tokens; sampling takes the same tokens too
for m in gpt2/hf llama/hf v300 qwen2; do
  for p in 7 72,101,108,108,111; do
    G1=(generate --init-from "$TMP/$m" --prompt-tokens "$p" --max-new-tokens 24)
    c1=$("$BIN" "${G1[@]}" | head -1) u1=$("$BIN" "${G1[@]}" --no-kv-cache | head -1)
    [ -n "$c1" ] && [ "$c1" = "$u1" ] || fail "kv cache $m, prompt $p: '$c1', uncached '$u1'"
  done
done
c1=$("$BIN" generate --init-from "$TMP/llama/hf" --prompt-tokens 3,4 --max-new-tokens 16 --temperature 0.8 --top-k 9)
u1=$("$BIN" generate --init-from "$TMP/llama/hf" --prompt-tokens 3,4 --max-new-tokens 16 --temperature 0.8 --top-k 9 \
  --no-kv-cache)
[ "$c1" = "$u1" ] || fail "kv cache, sampled: '$c1', uncached '$u1'"

# state.json keeps the model config: a checkpoint of a config.json model exports and generates without
# --model (the same as with it); a --model that differs, or a bad stored value, is one line naming the field
MC="$TMP/mc"
"$BIN" train --model "$TMP/llama/hf/config.json" "${RUN[@]}" "${ONE[@]}" --steps 2 --ckpt-dir "$MC" --ckpt-every 2 \
  >"$TMP/mc.out" 2>&1 || { tail -3 "$TMP/mc.out"; fail "model_config: train a config.json model"; }
jq -e '.model_config | .arch == "llama" and .n_kv_heads == 2 and .hidden == 64' "$MC/state.json" >/dev/null \
  || fail "model_config: state.json: $(jq -c .model_config "$MC/state.json")"
"$BIN" export --ckpt "$MC" --out "$TMP/mc-ex" >/dev/null 2>&1 || fail "model_config: export without --model"
"$BIN" export --ckpt "$MC" --model "$TMP/llama/hf/config.json" --out "$TMP/mc-ex2" >/dev/null 2>&1 \
  || fail "model_config: export with --model"
cmp -s "$TMP/mc-ex/model.safetensors" "$TMP/mc-ex2/model.safetensors" || fail "model_config: exports differ"
g1=$("$BIN" generate --ckpt "$MC" --prompt-tokens 5,6 --max-new-tokens 6 | head -1)
g2=$("$BIN" generate --init-from "$TMP/mc-ex" --prompt-tokens 5,6 --max-new-tokens 6 | head -1)
[ -n "$g1" ] && [ "$g1" = "$g2" ] || fail "model_config: generate --ckpt '$g1', from its export '$g2'"
jq '.num_attention_heads = 8' "$TMP/llama/hf/config.json" >"$TMP/mc-h8.json"
bad "model_config mismatch" "--model .*mc-h8.json: n_heads 8, the checkpoint's state.json model_config has 4" \
  "$BIN" export --ckpt "$MC" --model "$TMP/mc-h8.json" --out "$TMP/x"
# an architecture by its name, not the enum's number ("arch 1, ... has 0")
bad "model_config arch" "--model tiny-gpt: arch gpt, the checkpoint's state.json model_config has llama" \
  "$BIN" export --ckpt "$MC" --model tiny-gpt --out "$TMP/x"
cp -r "$MC" "$TMP/mc-bad" && jq '.model_config.n_kv_heads = 3' "$MC/state.json" >"$TMP/mc-bad/state.json"
bad "model_config bad" "mc-bad/state.json: model_config.n_kv_heads: 3 does not divide 4" "$BIN" generate \
  --ckpt "$TMP/mc-bad" --prompt-tokens 1
jq '.model_config.hidden = "x"' "$MC/state.json" >"$TMP/mc-bad/state.json"
bad "model_config type" "mc-bad/state.json: model_config.hidden" "$BIN" export --ckpt "$TMP/mc-bad" --out "$TMP/x"

# a fine-tune under the elastic supervisor: autohet run --init-from (+ --val-data, --eval-batches) on 2 nodes;
# its first loss is train --init-from's, its log has the averaged validation loss; bad input: one line, exit 2
d="$TMP/gpt2"
"$BIN" train --init-from "$d/hf" "${RUN[@]}" "${ONE[@]}" --steps 1 --log "$TMP/ft-one.log" >/dev/null 2>&1 \
  || fail "run --init-from: the one-process reference"
# (no --model: --init-from's config.json, as train takes it)
timeout 300 "$BIN" run --cluster 2x1xcpu --init-from "$d/hf" --data "$TOK" \
  --val-data "$TOK" --eval-batches 2 --eval-every 1 --steps 3 --seq 64 --global-batch 2 --micro-batch 1 \
  --run-dir "$TMP/ft.run" --log "$TMP/ft.log" >"$TMP/ft.out" 2>&1 || { tail -5 "$TMP/ft.out"; fail "run --init-from"; }
close "$(loss_of "$TMP/ft.log")" "$(loss_of "$TMP/ft-one.log")" 1e-4 \
  || fail "run --init-from: first loss $(loss_of "$TMP/ft.log"), train --init-from's $(loss_of "$TMP/ft-one.log")"
jq -se 'map(select(.val_loss > 0)) | length >= 1' "$TMP/ft.log" >/dev/null || fail "run --val-data: no val_loss: $(cat "$TMP/ft.log")"
jq -e '.options.eval_batches == 2 and (.options.init_from | endswith("/hf")) and (.options.model | endswith("/hf/config.json"))' \
  "$TMP/ft.run/run.json" >/dev/null \
  || fail "run: run.json lacks eval_batches/init_from (run --resume would drop them)"
bad "run --init-from" "--init-from $TMP/none: not a directory" "$BIN" run --cluster 2x1xcpu \
  --model "$d/hf/config.json" --init-from "$TMP/none" --data "$TOK" --val-data "$TOK" "${ONE[@]}" --steps 1
bad "run --data-dtype" "--data-dtype: expected uint16 or uint32" "$BIN" run --cluster 2x1xcpu --model tiny-gpt \
  --data "$TOK" --data-dtype int8

[ $fails -eq 0 ] && echo "hf weights: all checks passed"
exit $((fails > 0))
