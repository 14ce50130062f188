#!/usr/bin/env python3
"""Turn measured runs published with Sailor (SOSP'25, MIT license) into an autohet measured set.

Sailor's repository keeps, per validation run, a plan configuration with the measured iteration time
(sailor/Planner/simulations/validation/<cluster>/<model>/N*/plan_config_*.json: "pipeline_list", "mbs", "gbs",
"real") and per-layer profiles of every model and GPU (sailor/Planner/simulations/profiles_tmp.json). This writes,
for one cluster and model, what bench/measured_bench.sh reads (the layout of ../shared/data/measured-runs):

    OUT/runs.json              [{"run", "plan", "measured_iteration_s", "gpus", "global_batch", "micro_batch",
                                 "pp", "dp", "tp"}, ...]
    OUT/plans/*.plan.json      each run in autohet's plan format (version 1)
    OUT/<dev>-<model>-profile.json   the model's per-layer times on that GPU (autohet profile format)

A Sailor stage lists one entry per data-parallel replica, each a node of `gpus` GPUs of one type at TP degree
`tmp`; replica r's stage s becomes node "<GPU>-r<r>s<s>" (the naming of ../shared/data/measured-runs). A
one-stage pipeline holds the whole model whatever its layer list says.

usage: bench/sailor_runs.py SAILOR_REPO CLUSTER MODEL_DIR MODEL_JSON OUT
  SAILOR_REPO  a checkout of eth-easl/sailor (or a directory with the same paths)
  CLUSTER      validation cluster folder, e.g. clariden
  MODEL_DIR    its model folder, e.g. GPT-NEO
  MODEL_JSON   the model in plan-document form plus "profile_name" (Sailor's name in profiles_tmp.json),
               "nic_gbit" (per node, as the set's devices file gives it)
"""
import glob
import json
import os
import sys


def stage_nodes(pipe, gpu_type):
    """[(replica, stage, gpu type, gpus, tp)] of one Sailor pipeline."""
    out = []
    for s, replicas in enumerate(pipe["tmp_per_stage"]):
        for r, entry in enumerate(replicas):
            (placement, tp) = entry
            gtype, gpus, _zone = placement[0]
            if gtype != gpu_type:
                raise SystemExit(f"sailor_runs: stage {s} replica {r}: GPU {gtype}, expected {gpu_type}")
            out.append((r, s, gtype, gpus, tp))
    return out


def convert(cfg, model, gpu_type, nic_gbit):
    if len(cfg["pipeline_list"]) != 1:
        raise SystemExit("sailor_runs: more than one pipeline kind is not converted")
    pipe = cfg["pipeline_list"][0]
    n_layers = model["n_layers"] + 2
    stages = pipe["num_stages"]
    dp = pipe["dp"][0]
    if any(d != dp for d in pipe["dp"]):
        raise SystemExit("sailor_runs: stages of different data-parallel degrees")
    bounds = []
    first = 0
    for s, layers in enumerate(pipe["layers_per_stage"]):
        last = n_layers if stages == 1 or s == stages - 1 else layers[-1] + 1
        bounds.append([first, last])
        first = last
    nodes, index = [], {}
    tps = set()
    for r, s, gtype, gpus, tp in stage_nodes(pipe, gpu_type):
        index[(r, s)] = len(nodes)
        nodes.append({"name": f"{gtype}-r{r}s{s}", "gpu_type": gtype, "gpus": gpus, "nic_gbit": nic_gbit})
        tps.add(tp)
    if len(tps) != 1:
        raise SystemExit("sailor_runs: stages of different TP degrees")
    tp = tps.pop()
    mb, gb = cfg["mbs"], cfg["gbs"]
    per_replica = gb // mb // dp
    if per_replica * mb * dp != gb or per_replica < 1:
        raise SystemExit(f"sailor_runs: global batch {gb} is not {dp} replicas of whole micro-batches of {mb}")
    replicas = []
    for r in range(dp):
        replicas.append({"micro_batches": per_replica,
                         "stages": [{"node_index": index[(r, s)], "gpus": list(range(tp)), "layers": bounds[s]}
                                    for s in range(stages)]})
    doc_model = {k: v for k, v in model.items() if k not in ("profile_name", "nic_gbit")}
    plan = {"format": "autohet-plan", "version": 1, "model": doc_model,
            "train": {"seq": 2048, "recompute": "none"}, "cluster": {"nodes": nodes}, "tp": tp,
            "micro_batch": mb, "global_batch": gb, "replicas": replicas}
    summary = {"gpus": cfg["N"], "global_batch": gb, "micro_batch": mb, "pp": stages, "dp": dp, "tp": tp}
    return plan, summary


def main():
    if len(sys.argv) != 6:
        sys.stderr.write(__doc__)
        return 2
    repo, cluster, model_dir, model_json, out = sys.argv[1:]
    model = json.load(open(model_json))
    val = os.path.join(repo, "sailor/Planner/simulations/validation", cluster, model_dir)
    cfgs = sorted(glob.glob(os.path.join(val, "N*", "plan_config_*.json")),
                  key=lambda p: (int(os.path.basename(os.path.dirname(p))[1:]), p))
    if not cfgs:
        raise SystemExit(f"sailor_runs: no plan_config_*.json under {val}")
    profiles = json.load(open(os.path.join(repo, "sailor/Planner/simulations/profiles_tmp.json")))
    first = json.load(open(cfgs[0]))
    gpu_type = first["pipeline_list"][0]["tmp_per_stage"][0][0][0][0][0]
    os.makedirs(os.path.join(out, "plans"), exist_ok=True)
    runs = []
    for path in cfgs:
        cfg = json.load(open(path))
        plan, summary = convert(cfg, model, gpu_type, model["nic_gbit"])
        rel = os.path.relpath(path, os.path.join(repo, "sailor/Planner/simulations/validation"))
        name = rel.replace("/", "_").replace(".json", ".plan.json")
        with open(os.path.join(out, "plans", name), "w") as f:
            json.dump(plan, f, indent=1)
            f.write("\n")
        runs.append({"run": rel, "plan": "plans/" + name, "measured_iteration_s": cfg["real"], **summary})
    with open(os.path.join(out, "runs.json"), "w") as f:
        json.dump(runs, f, indent=1)
        f.write("\n")
    pname = model["profile_name"]
    prof = {"format": "autohet-profile", "version": 1, "model": pname, "seq": 2048,
            "source": f"Sailor planner profiles, {gpu_type} as published with Sailor (MIT)",
            "devices": {gpu_type: profiles[pname][gpu_type]}}
    tag = gpu_type.lower().replace("-", "")
    with open(os.path.join(out, f"{tag}-{pname.lower().replace('-', '').replace('.', '')}-profile.json"), "w") as f:
        json.dump(prof, f)
        f.write("\n")
    print(f"sailor_runs: {len(runs)} runs of {model_dir} on {cluster} ({gpu_type}) written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
