#!/usr/bin/env bash
# The vocabulary autohet profile and autohet run use is the model's, by the rule autohet train uses
# (ah_dataset_vocab: the model's vocabulary on token data, the 256 byte values on text): a config.json
# model with vocab_size 1000 profiles its head at the padded 1024 logits, and autohet run plans it with
# vocabulary 1000 on token data and 256 on text.
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
[ $fails -eq 0 ] && echo "cli_model_vocab: all checks passed"
exit $fails
