#!/usr/bin/python3
"""Hugging Face model files for tests/cli_hf_weights.sh, without the transformers or
safetensors packages (neither is in Debian 12): safetensors read and written by hand with
numpy, and hand-written PyTorch forwards of GPT-2 (GPT2LMHeadModel) and LLaMA
(LlamaForCausalLM: rotate-half RoPE, GQA, SwiGLU, RMSNorm), in float64.

  make  --arch gpt2|llama|qwen2 --out DIR [--seed S] [--dtype F32|F16|BF16] [--shards N] [--vocab V]
        [--no-prefix] [--untied] [--buffers]  a small random model directory; --buffers adds what real
                                           files carry besides the weights (GPT-2's attn.bias masks and
                                           attn.masked_bias, LLaMA's rotary_emb.inv_freq, a tied head's
                                           lm_head.weight copy), the weights unchanged
  loss  DIR TOKENS.bin                     mean next-token loss of the uint16 tokens
  generate DIR 1,2,3 N                     N greedy tokens after the prompt
  compare A B                              every tensor of A equals B's bit for bit (as fp32)
Several commands separated by "--" run in one process (torch is imported once).
"""
import json
import math
import os
import struct
import sys

import numpy as np

torch = None  # imported by the commands that compute (make and compare do not)

DT = {"F32": np.float32, "F16": np.float16}
PREFIX = "transformer."


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hl,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hl])
    data = raw[8 + hl:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = data[b:end]
        if e["dtype"] == "BF16":  # the upper half of an fp32
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(buf, dtype=DT[e["dtype"]]).astype(np.float32)
        out[name] = a.reshape(e["shape"])
    return out


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        if dtype == "BF16":  # round to nearest even
            u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
            b = u.tobytes()
        else:
            b = np.ascontiguousarray(a, dtype=DT[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(d, f)))
    return json.load(open(os.path.join(d, "config.json"))), w


def make(argv):
    a = dict(arch="gpt2", out=None, seed="1", dtype="F32", shards="1", vocab="256")
    flags = set()
    i = 0
    while i < len(argv):
        if argv[i] in ("--no-prefix", "--untied", "--buffers"):
            flags.add(argv[i]); i += 1
        else:
            a[argv[i][2:]] = argv[i + 1]; i += 2
    rng = np.random.default_rng(int(a["seed"]))
    C, L, H, V = 64, 4, 4, int(a["vocab"])
    def n(*shape, s=0.2):
        return (rng.standard_normal(shape) * s).astype(np.float32)
    def ones(c):
        return (1 + n(c, s=0.1)).astype(np.float32)
    t = {}
    tied = "--untied" not in flags
    if a["arch"] == "gpt2":
        F, P = 256, 256
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": P,
               "n_ctx": P, "n_embd": C, "n_layer": L, "n_head": H, "n_inner": None, "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "tie_word_embeddings": tied}
        p = "" if "--no-prefix" in flags else PREFIX
        t[p + "wte.weight"] = n(V, C, s=0.25)
        t[p + "wpe.weight"] = n(P, C, s=0.1)
        for b in range(L):
            h = f"{p}h.{b}."
            t[h + "ln_1.weight"], t[h + "ln_1.bias"] = ones(C), n(C, s=0.1)
            t[h + "attn.c_attn.weight"], t[h + "attn.c_attn.bias"] = n(C, 3 * C), n(3 * C, s=0.1)
            t[h + "attn.c_proj.weight"], t[h + "attn.c_proj.bias"] = n(C, C), n(C, s=0.1)
            t[h + "ln_2.weight"], t[h + "ln_2.bias"] = ones(C), n(C, s=0.1)
            t[h + "mlp.c_fc.weight"], t[h + "mlp.c_fc.bias"] = n(C, F), n(F, s=0.1)
            t[h + "mlp.c_proj.weight"], t[h + "mlp.c_proj.bias"] = n(F, C), n(C, s=0.1)
        t[p + "ln_f.weight"], t[p + "ln_f.bias"] = ones(C), n(C, s=0.1)
        if not tied:
            t["lm_head.weight"] = n(V, C, s=0.25)
        if "--buffers" in flags:  # GPT2Attention's buffers, as the hub's gpt2 files hold them
            for b in range(L):
                t[f"{p}h.{b}.attn.bias"] = np.tril(np.ones((P, P), dtype=np.float32)).reshape(1, 1, P, P)
                t[f"{p}h.{b}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    else:
        F, KV, D = 192, 2, C // H
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": a["arch"], "vocab_size": V, "hidden_size": C,
               "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256, "hidden_act": "silu",
               "tie_word_embeddings": tied}
        if a["arch"] == "mistral":  # every layer sees the last sliding_window positions
            cfg["architectures"], cfg["sliding_window"] = ["MistralForCausalLM"], int(a.get("window", "16"))
        t["model.embed_tokens.weight"] = n(V, C, s=0.25)
        for b in range(L):
            h = f"model.layers.{b}."
            t[h + "input_layernorm.weight"] = ones(C)
            t[h + "self_attn.q_proj.weight"] = n(H * D, C, s=0.4)
            t[h + "self_attn.k_proj.weight"] = n(KV * D, C, s=0.4)
            t[h + "self_attn.v_proj.weight"] = n(KV * D, C)
            t[h + "self_attn.o_proj.weight"] = n(C, H * D)
            if a["arch"] == "qwen2":  # Qwen2Attention: q/k/v with biases
                for x, rows in (("q", H * D), ("k", KV * D), ("v", KV * D)):
                    t[h + f"self_attn.{x}_proj.bias"] = n(rows, s=0.3)
            t[h + "post_attention_layernorm.weight"] = ones(C)
            t[h + "mlp.gate_proj.weight"], t[h + "mlp.up_proj.weight"] = n(F, C), n(F, C)
            t[h + "mlp.down_proj.weight"] = n(C, F)
        t["model.norm.weight"] = ones(C)
        if not tied:
            t["lm_head.weight"] = n(V, C, s=0.25)
        if "--buffers" in flags:  # older LlamaRotaryEmbedding buffers
            for b in range(L):
                t[f"model.layers.{b}.self_attn.rotary_emb.inv_freq"] = \
                    (1.0 / 10000.0 ** (np.arange(0, D, 2) / D)).astype(np.float32)
    if "--buffers" in flags and tied:  # the head's copy of the embedding, written although tied
        t["lm_head.weight"] = (t["model.embed_tokens.weight"] if a["arch"] != "gpt2" else t[p + "wte.weight"]).copy()
    os.makedirs(a["out"], exist_ok=True)
    json.dump(cfg, open(os.path.join(a["out"], "config.json"), "w"), indent=2)
    shards = int(a["shards"])
    if shards == 1:
        write_safetensors(os.path.join(a["out"], "model.safetensors"), t, a["dtype"])
        return
    names, wm = list(t), {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: t[k] for k in names[s::shards]}
        write_safetensors(os.path.join(a["out"], fn), part, a["dtype"])
        wm.update({k: fn for k in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": wm},
              open(os.path.join(a["out"], "model.safetensors.index.json"), "w"), indent=2)


def T(a):
    return torch.from_numpy(np.array(a, dtype=np.float64))


def causal_attention(q, k, v, window=None):  # [H, T, D] each; window: keys i - j < window only (Mistral)
    Tn, D = q.shape[1], q.shape[2]
    s = q @ k.transpose(1, 2) / math.sqrt(D)
    s = s.masked_fill(torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1), float("-inf"))
    if window:
        s = s.masked_fill(torch.tril(torch.ones(Tn, Tn, dtype=torch.bool), -window), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def layernorm(x, w, b, eps):
    m = x.mean(-1, keepdim=True)
    var = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / torch.sqrt(var + eps) * w + b


def gpt2_logits(cfg, w, tok):
    g = lambda name: T(w[name] if name in w else w[name[len(PREFIX):]])
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    eps, Tn, D = cfg.get("layer_norm_epsilon", 1e-5), len(tok), cfg["n_embd"] // cfg["n_head"]
    x = g(PREFIX + "wte.weight")[tok] + g(PREFIX + "wpe.weight")[:Tn]
    act = lambda u: 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
    for b in range(L):
        p = f"{PREFIX}h.{b}."
        h = layernorm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = h @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")  # Conv1D: x @ W[in, out]
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(Tn, H, D).transpose(0, 1) for i in range(3))
        y = causal_attention(q, k, v).transpose(0, 1).reshape(Tn, C)
        x = x + y @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        h = layernorm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        x = x + act(h @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias")) @ g(p + "mlp.c_proj.weight") \
            + g(p + "mlp.c_proj.bias")
    x = layernorm(x, g(PREFIX + "ln_f.weight"), g(PREFIX + "ln_f.bias"), eps)
    head = T(w["lm_head.weight"]) if not cfg.get("tie_word_embeddings", True) else g(PREFIX + "wte.weight")
    return x @ head.T


def rope_rotate_half(x, theta):  # x [H, T, D], HF's LlamaRotaryEmbedding + apply_rotary_pos_emb
    D, Tn = x.shape[2], x.shape[1]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    f = torch.outer(torch.arange(Tn, dtype=torch.float64), inv)
    emb = torch.cat([f, f], dim=-1)
    rot = torch.cat([-x[..., D // 2:], x[..., :D // 2]], dim=-1)
    return x * emb.cos() + rot * emb.sin()


def llama_logits(cfg, w, tok):
    g = lambda name: T(w[name])
    C, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    KV, eps, theta = cfg.get("num_key_value_heads", H), cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 1e4)
    Tn, D = len(tok), C // H
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) is not False else None
    if window and window >= cfg.get("max_position_embeddings", 1 << 30):
        window = None
    rms = lambda x, wt: x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * wt
    x = g("model.embed_tokens.weight")[tok]
    for b in range(L):
        p = f"model.layers.{b}."
        h = rms(x, g(p + "input_layernorm.weight"))
        lin = lambda x, n: h @ g(p + f"self_attn.{x}_proj.weight").T + (
            g(p + f"self_attn.{x}_proj.bias") if p + f"self_attn.{x}_proj.bias" in w else 0)
        q = lin("q", H).reshape(Tn, H, D).transpose(0, 1)
        k = lin("k", KV).reshape(Tn, KV, D).transpose(0, 1)
        v = lin("v", KV).reshape(Tn, KV, D).transpose(0, 1)
        q, k = rope_rotate_half(q, theta), rope_rotate_half(k, theta)
        k, v = k.repeat_interleave(H // KV, dim=0), v.repeat_interleave(H // KV, dim=0)  # repeat_kv
        y = causal_attention(q, k, v, window).transpose(0, 1).reshape(Tn, C)
        x = x + y @ g(p + "self_attn.o_proj.weight").T
        h = rms(x, g(p + "post_attention_layernorm.weight"))
        gate, up = h @ g(p + "mlp.gate_proj.weight").T, h @ g(p + "mlp.up_proj.weight").T
        x = x + (torch.nn.functional.silu(gate) * up) @ g(p + "mlp.down_proj.weight").T
    x = rms(x, g("model.norm.weight"))
    head = g("model.embed_tokens.weight") if cfg.get("tie_word_embeddings", False) else g("lm_head.weight")
    return x @ head.T


def logits_of(cfg, w, tok):
    return (gpt2_logits if cfg["model_type"] == "gpt2" else llama_logits)(cfg, w, torch.tensor(tok))


def loss(d, tokens):
    cfg, w = read_dir(d)
    tok = np.fromfile(tokens, dtype="<u2").astype(np.int64)
    lg = logits_of(cfg, w, tok[:-1].tolist())
    print("%.9f" % torch.nn.functional.cross_entropy(lg, torch.from_numpy(tok[1:])).item())


def generate(d, prompt, n):
    cfg, w = read_dir(d)
    tok = [int(x) for x in prompt.split(",")]
    for _ in range(int(n)):
        tok.append(int(torch.argmax(logits_of(cfg, w, tok)[-1]).item()))
    print(",".join(map(str, tok)))


def compare(a, b):
    strip = lambda w: {k[len(PREFIX):] if k.startswith(PREFIX) else k: v for k, v in w.items()}
    (ca, wa), (cb, wb) = read_dir(a), read_dir(b)
    wa, wb = strip(wa), strip(wb)
    if ca.get("tie_word_embeddings", ca["model_type"] == "gpt2"):
        wa.pop("lm_head.weight", None)
    bad = [k for k in set(wa) | set(wb) if k not in wa or k not in wb or wa[k].shape != wb[k].shape
           or not np.array_equal(wa[k].view(np.uint32), wb[k].view(np.uint32))]
    if bad:
        print("differ:", sorted(bad)[:8], file=sys.stderr)
        sys.exit(1)
    print("%d tensors equal bit for bit" % len(wa))


if __name__ == "__main__":
    # several commands in one process (torch starts once): CMD ARGS -- CMD ARGS ...
    argv, cmds = sys.argv[1:], [[]]
    for x in argv:
        if x == "--":
            cmds.append([])
        else:
            cmds[-1].append(x)
    if any(c and c[0] in ("loss", "generate") for c in cmds):
        import torch
    for c in cmds:
        cmd, args = c[0], c[1:]
        {"make": lambda: make(args), "loss": lambda: loss(*args), "generate": lambda: generate(*args),
         "compare": lambda: compare(*args)}[cmd]()
