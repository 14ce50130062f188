#!/usr/bin/env python3
"""The plans of bench/emulated_bench.sh: pipelines of emulated devices (bench/emu-devices.json: emu-fast, and
emu-slow at half its speed) for the model bench/emu-gpt-16l.json (18 plan layers), micro-batch 2, seq 64:
2 to 16 stages, uneven micro-batch counts between replicas, mixed devices and per-stage TP, at most 16 ranks.
Usage: emulated_plans.py OUT_DIR  (writes OUT_DIR/NAME.json, prints the names)"""
import json
import os
import sys

L = 18  # embedding + 16 blocks + head

# name: [(micro_batches, [(device, layers, tp), ...]), ...]; device f = emu-fast, s = emu-slow
PLANS = {
    "p2-m4": [(4, [("f", 9, 1), ("f", 9, 1)])],
    "p2-m8-het": [(8, [("f", 11, 1), ("s", 7, 1)])],
    "p3-m6-imbalanced": [(6, [("f", 12, 1), ("f", 3, 1), ("f", 3, 1)])],
    "p4-m4": [(4, [("f", 5, 1), ("f", 4, 1), ("f", 4, 1), ("f", 5, 1)])],
    "p4-m8-het": [(8, [("f", 6, 1), ("s", 3, 1), ("f", 6, 1), ("s", 3, 1)])],
    "p4-m16": [(16, [("f", 5, 1), ("f", 4, 1), ("f", 4, 1), ("f", 5, 1)])],
    "p6-m5-het": [(5, [("f", 4, 1), ("f", 4, 1), ("s", 2, 1), ("s", 2, 1), ("f", 3, 1), ("s", 3, 1)])],
    "p8-m8": [(8, [("f", 3, 1)] + [("f", 2, 1)] * 6 + [("f", 3, 1)])],
    "p8-m16-het": [(16, [("f", 3, 1), ("s", 2, 1)] * 3 + [("f", 2, 1), ("s", 1, 1)])],
    "p12-m12": [(12, [("f", 2, 1)] * 6 + [("f", 1, 1)] * 6)],
    "p16-m8": [(8, [("f", 2, 1)] + [("f", 1, 1)] * 14 + [("f", 2, 1)])],
    "p16-m16": [(16, [("f", 2, 1)] + [("f", 1, 1)] * 14 + [("f", 2, 1)])],
    "p16-m16-het": [(16, [("f", 2, 1)] + [("s", 1, 1), ("f", 1, 1)] * 7 + [("f", 2, 1)])],
    "p16-m32": [(32, [("f", 2, 1)] + [("f", 1, 1)] * 14 + [("f", 2, 1)])],
    "2r-p2-p2-m6-2": [(6, [("f", 9, 1), ("f", 9, 1)]), (2, [("s", 9, 1), ("s", 9, 1)])],
    "2r-p4-p2-m6-2": [(6, [("f", 5, 1), ("f", 4, 1), ("f", 4, 1), ("f", 5, 1)]), (2, [("s", 9, 1), ("s", 9, 1)])],
    "2r-p8-p4-m10-6": [(10, [("f", 3, 1)] + [("f", 2, 1)] * 6 + [("f", 3, 1)]),
                       (6, [("s", 5, 1), ("s", 4, 1), ("s", 4, 1), ("s", 5, 1)])],
    "2r-p8-p8-m8-8": [(8, [("f", 3, 1)] + [("f", 2, 1)] * 6 + [("f", 3, 1)]),
                      (8, [("s", 3, 1)] + [("s", 2, 1)] * 6 + [("s", 3, 1)])],
    "3r-p1-p2-p4": [(6, [("f", 18, 1)]), (2, [("s", 9, 1), ("s", 9, 1)]),
                    (4, [("f", 6, 1), ("s", 3, 1), ("f", 6, 1), ("s", 3, 1)])],
    "tp-p2-m4": [(4, [("f", 9, 2), ("s", 9, 1)])],
    "tp-p4-m8": [(8, [("f", 5, 1), ("s", 4, 2), ("s", 4, 2), ("f", 5, 1)])],
    "tp-2r-m6-2": [(6, [("s", 9, 2), ("s", 9, 2)]), (2, [("f", 9, 1), ("f", 9, 1)])],
    "tp-p3-m6": [(6, [("s", 6, 2), ("f", 6, 1), ("s", 6, 2)])],
}


def plan(name, replicas):
    used = {"f": 0, "s": 0}
    reps = []
    for m, stages in replicas:
        assert sum(n for _, n, _ in stages) == L, name
        first, st = 0, []
        for dev, n, tp in stages:
            g = list(range(used[dev], used[dev] + tp))
            used[dev] += tp
            st.append({"node_index": 0 if dev == "f" else 1, "gpus": g, "layers": [first, first + n], "tp": tp})
            first += n
        reps.append({"micro_batches": m, "stages": st})
    assert used["f"] + used["s"] <= 16, name
    mb = 2
    model = {"name": "emu-gpt-16l", "arch": "gpt", "hidden": 64, "n_layers": 16, "n_heads": 4, "n_kv_heads": 4,
             "ffn_hidden": 256, "vocab": 256, "max_positions": 256, "tied_embeddings": True}  # bench/emu-gpt-16l.json
    # fp32: the engine sends and all-reduces 4-byte activations and gradients whatever its --precision
    return {"format": "autohet-plan", "version": 2, "model": model, "train": {"seq": 64, "precision": "fp32"},
            "cluster": {"nodes": [{"name": "fast", "gpu_type": "emu-fast", "gpus": 16},
                                  {"name": "slow", "gpu_type": "emu-slow", "gpus": 16}]},
            "micro_batch": mb, "global_batch": mb * sum(m for m, _ in replicas), "replicas": reps}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, reps in PLANS.items():
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(plan(name, reps), f)
        print(name)


if __name__ == "__main__":
    main()
