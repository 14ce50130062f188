#!/usr/bin/env bash
# Model configs end to end.
#  - The vocabulary autohet profile and autohet run use is the model's, by the rule autohet train uses
#    (ah_dataset_vocab: the model's vocabulary on token data, the 256 byte values on text): a config.json
#    model with vocab_size 1000 profiles its head at the padded 1024 logits, and autohet run plans it
#    with vocabulary 1000 on token data and 256 on text.
#  - Qwen2 (q/k/v biases), GPT-Neo (bias-free q/k/v, unscaled scores, a local layer with a 16-token
#    window at seq 64) and OPT-350m's layout (512 -> here 32-wide embeddings with project_in/out, tied;
#    post-LN, ReLU) train to the same losses on a 2-stage x TP-2 plan over 4 ranks as on one process.
#  - A config the engine does not compute is one line naming the field, exit 2.
. "$(dirname "$0")/common.sh"
cat >"$TMP/v1000.json" <<'JSON'
{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128, "vocab_size": 1000}
JSON
python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<6000H', *[(i*37)%1000 for i in range(6000)]))" \
  "$TMP/tok.bin"

# profile: head activations = (2NC + 2N + N*Vp + N) floats, N = 32 tokens, C = 64, Vp = 1024 -> 0.14 MiB
# (with the byte vocabulary, Vp = 256, they were 0.05 MiB)
"$BIN" profile --model "$TMP/v1000.json" --out "$TMP/p.json" --seq 32 --tp 1 --mb 1 --reps 1 >"$TMP/prof.out" 2>&1 \
  || { cat "$TMP/prof.out"; fail "profile run"; }
awk '$3 == "head" { print $7 }' "$TMP/prof.out" >"$TMP/head_acts"
[ "$(cat "$TMP/head_acts")" = "0.14" ] || fail "profile head activations $(cat "$TMP/head_acts") MiB, expected 0.14 (vocabulary 1000)"

# run: the first plan's model vocabulary is the one autohet train will use
runv() { # name data expected-vocab
  timeout 300 "$BIN" run --model "$TMP/v1000.json" --cluster 1x1xcpu --data "$2" --steps 1 --seed 1 \
    --global-batch 2 --micro-batch 1 --seq 32 --run-dir "$TMP/$1.run" >"$TMP/$1.out" 2>&1 \
    || { tail "$TMP/$1.out"; fail "$1: autohet run"; }
  jq -e --argjson v "$3" '.model.vocab == $v' "$TMP/$1.run/plan-0.json" >/dev/null \
    || fail "$1: plan vocab $(jq .model.vocab "$TMP/$1.run/plan-0.json"), expected $3"
}
runv tokens "$TMP/tok.bin" 1000
runv text "$FIX/text" 256

# the families on one rank and on a 2-stage x TP-2 plan (4 ranks)
cat >"$TMP/qwen2.json" <<'JSON'
{"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
 "intermediate_size": 128, "vocab_size": 256, "rope_theta": 1000000.0, "tie_word_embeddings": true}
JSON
cat >"$TMP/neo.json" <<'JSON'
{"model_type": "gpt_neo", "hidden_size": 64, "num_heads": 4, "num_layers": 4, "max_position_embeddings": 256,
 "vocab_size": 256, "attention_types": [[["global", "local"], 2]], "window_size": 16}
JSON
cat >"$TMP/opt.json" <<'JSON'
{"model_type": "opt", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4, "ffn_dim": 256,
 "max_position_embeddings": 256, "vocab_size": 256, "word_embed_proj_dim": 32, "do_layer_norm_before": false,
 "activation_function": "relu"}
JSON
TARGS=(--data "$FIX/text" --steps 3 --seed 5 --global-batch 8 --micro-batch 2 --seq 64 --eval-every 0)
for fam in qwen2 neo opt; do
  "$BIN" train --model "$TMP/$fam.json" "${TARGS[@]}" --log "$TMP/$fam-1.log" >"$TMP/$fam-1.out" 2>&1 \
    || { cat "$TMP/$fam-1.out"; fail "$fam: one rank"; continue; }
  jq '.model = {"name": "'"$fam"'.json"}' "$PLANS/tiny-tp2-2s.json" >"$TMP/plan-$fam.json"
  mpirun -np 4 --bind-to none "$BIN" train --model "$TMP/$fam.json" "${TARGS[@]}" --plan "$TMP/plan-$fam.json" \
    --log "$TMP/$fam-4.log" >"$TMP/$fam-4.out" 2>&1 || { tail "$TMP/$fam-4.out"; fail "$fam: 4 ranks"; continue; }
  jq -s -r '.[] | .loss' "$TMP/$fam-1.log" >"$TMP/$fam-1.tsv"
  jq -s -r '.[] | .loss' "$TMP/$fam-4.log" >"$TMP/$fam-4.tsv"
  [ "$(wc -l <"$TMP/$fam-1.tsv")" -eq 3 ] || fail "$fam: $(wc -l <"$TMP/$fam-1.tsv") logged steps"
  paste "$TMP/$fam-1.tsv" "$TMP/$fam-4.tsv" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (!(d <= 1e-5 * $1)) bad = 1 }
    END { exit bad }' || fail "$fam: 4 ranks differ: $(paste "$TMP/$fam-1.tsv" "$TMP/$fam-4.tsv" | tr '\n' ' ')"
done

# refused by field, exit 2
cat >"$TMP/neox.json" <<'JSON'
{"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 128, "vocab_size": 256,
 "activation_function": "gelu"}
JSON
"$BIN" train --model "$TMP/neox.json" "${TARGS[@]}" >"$TMP/neox.out" 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$TMP/neox.out")" -eq 1 ] && grep -q "activation_function 'gelu'" "$TMP/neox.out" \
  || fail "gelu (erf) model: exit $rc, $(cat "$TMP/neox.out")"
[ $fails -eq 0 ] && echo "cli_model_configs: all checks passed"
exit $fails
