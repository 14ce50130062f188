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
one-stage pipeline holds the whole model whatever its layer list says. Replicas may be of different GPU types
(Sailor's heterogeneous "mit" cluster).

With --links, every node also gets a host ("<gpu>-<gpus>g-<k>": the k-th node of that type and size in the run)
and OUT/<tag>-links.json is a comm profile (docs/commbench.md) with the `links` matrix between all those hosts,
from Sailor's measured node-to-node bandwidths (sailor/providers/multizone_bandwidths_het.json: per pair of GPU
types and node size, a bandwidth curve over the message size), so `--comm-profile` costs each send and ring hop on
its own pair: `latency_us` and `bandwidth_GBps` are the line through Sailor's curve at 1 MiB and 64 MiB (the mean
of its two directions), the bandwidth per GPU (the node's figure over its GPUs, as autohet shares a NIC); its
inter-node class fit is the fastest pair's. The nodes' `nic_gbit` is each type's own-type figure, and
OUT/<tag>-devices.json gives each type's intra-node bandwidth (sailor/providers/intra_node_bandwidths.json at the
largest node size) and that NIC.

usage: bench/sailor_runs.py SAILOR_REPO CLUSTER MODEL_DIR MODEL_JSON OUT [--links ZONE] [--profiles DIR]
  SAILOR_REPO  a checkout of eth-easl/sailor (or a directory with the same paths)
  CLUSTER      validation cluster folder, e.g. clariden
  MODEL_DIR    its model folder, e.g. GPT-NEO (empty: the cluster folder holds N*/ itself, as "mit" does)
  MODEL_JSON   the model in plan-document form plus "profile_name" (Sailor's name in profiles_tmp.json),
               "nic_gbit" (per node, as the set's devices file gives it; with --links, ignored)
  --links ZONE the Sailor zone whose measured links to use (e.g. us-central1-a)
  --profiles DIR  per-GPU profiles DIR/<GPU>.json (../shared/data/profiles/sailor/<model>) instead of
               profiles_tmp.json
"""
import glob
import json
import math
import os
import sys


def stage_nodes(pipe):
    """[(replica, stage, gpu type, gpus, tp)] of one Sailor pipeline."""
    out = []
    for s, replicas in enumerate(pipe["tmp_per_stage"]):
        for r, entry in enumerate(replicas):
            (placement, tp) = entry
            if len(placement) != 1:
                raise SystemExit(f"sailor_runs: stage {s} replica {r}: {len(placement)} nodes in one TP group")
            gtype, gpus, _zone = placement[0]
            out.append((r, s, gtype, gpus, tp))
    return out


def host_kind(gtype, gpus):
    return f"{gtype.lower()}-{gpus}g"


def sailor_bw_gbs(coeffs, nbytes):
    """Sailor's bandwidth curve (GB/s) at a message of nbytes: a polynomial in log2 of the size in MB
    (sailor/providers/gcp/model_networking.py, get_bw_on_config)."""
    x = math.log2(nbytes / 1e6)
    return sum(c * x ** (len(coeffs) - i - 1) for i, c in enumerate(coeffs))


def sailor_link(net, zone, a, b):
    """(latency s, node bandwidth GB/s) of the link between nodes a and b ((gpu type, gpus)): the line
    through Sailor's curve at 1 MiB and 64 MiB; None where Sailor has not measured it."""
    try:
        coeffs, _peak = net[zone][a[0]][str(a[1])][zone][b[0]][str(b[1])]
    except KeyError:
        return None
    m0, m1 = 1 << 20, 64 << 20
    t0, t1 = m0 / 1e9 / sailor_bw_gbs(coeffs, m0), m1 / 1e9 / sailor_bw_gbs(coeffs, m1)
    beta = (m1 - m0) / (t1 - t0) / 1e9
    return max(0.0, t0 - m0 / (beta * 1e9)), beta


def convert(cfg, model, nic_of, with_hosts):
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
    nodes, index, kinds = [], {}, {}
    tps = set()
    for r, s, gtype, gpus, tp in stage_nodes(pipe):
        index[(r, s)] = len(nodes)
        node = {"name": f"{gtype}-r{r}s{s}", "gpu_type": gtype, "gpus": gpus, "nic_gbit": nic_of(gtype, gpus)}
        if with_hosts:
            k = kinds.get((gtype, gpus), 0)
            kinds[(gtype, gpus)] = k + 1
            node["host"] = f"{host_kind(gtype, gpus)}-{k}"
        nodes.append(node)
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
    summary = {"gpus": sum(n["gpus"] for n in nodes), "nodes": len(nodes), "global_batch": gb, "micro_batch": mb, "pp": stages, "dp": dp, "tp": tp}
    return plan, summary, kinds


def parse_args(argv):
    pos, opts = [], {"links": None, "profiles": None}
    it = iter(argv)
    for a in it:
        if a in ("--links", "--profiles"):
            opts[a[2:]] = next(it, None)
            if opts[a[2:]] is None:
                raise SystemExit(f"sailor_runs: {a} needs a value")
        else:
            pos.append(a)
    if len(pos) != 5:
        sys.stderr.write(__doc__)
        raise SystemExit(2)
    return pos, opts


def write_json(path, doc, indent=1):
    with open(path, "w") as f:
        json.dump(doc, f, indent=indent)
        f.write("\n")


def links_profile(net, zone, kinds):
    """A comm profile (version 2) whose links matrix covers every host the runs name: max count per kind."""
    hosts = [(g, n, f"{host_kind(g, n)}-{k}") for (g, n), c in sorted(kinds.items()) for k in range(c)]
    lat, bw = [], []
    for a in hosts:
        la, ba = [], []
        for b in hosts:
            ab, ba_ = sailor_link(net, zone, a[:2], b[:2]), sailor_link(net, zone, b[:2], a[:2])
            link = None if ab is None or ba_ is None else ((ab[0] + ba_[0]) / 2, (ab[1] + ba_[1]) / 2)
            if link is None:  # never in one run (2- and 8-GPU nodes): unmeasured, the class fit applies
                la.append(None)
                ba.append(None)
                continue
            la.append(round(link[0] * 1e6, 3))
            ba.append(round(link[1] / min(a[1], b[1]), 6))  # per GPU, as autohet shares a node's NIC
        lat.append(la)
        bw.append(ba)
    n = len(hosts)
    fast = max((bw[i][j], lat[i][j]) for i in range(n) for j in range(n) if i != j and bw[i][j] is not None)
    fit = lambda op, a, b: {"op": op, "link_class": "inter-node", "statistic": "median", "alpha_us": a,
                            "beta_GBps": b, "max_rel_error": 0.0,
                            "regimes": [{"min_bytes": 0, "max_bytes": None, "alpha_us": a, "beta_GBps": b,
                                         "max_rel_error": 0.0, "sizes": 2}]}
    return {"format": "autohet-comm-profile", "version": 2, "sync": "none",
            "source": f"Sailor's measured links (sailor/providers/multizone_bandwidths_het.json, zone {zone}, MIT)",
            "results": [], "fits": [fit("latency", fast[1], fast[0]), fit("bw", fast[1], fast[0])],
            "hosts": [h[2] for h in hosts],
            "links": {"hosts": [h[2] for h in hosts], "latency_us": lat, "bandwidth_GBps": bw,
                      "max_rel_error": [[0.0] * n for _ in range(n)], "pairs": [[None] * n for _ in range(n)]}}


def main():
    (repo, cluster, model_dir, model_json, out), opts = parse_args(sys.argv[1:])
    model = json.load(open(model_json))
    val = os.path.join(repo, "sailor/Planner/simulations/validation", cluster, model_dir)
    cfgs = sorted(glob.glob(os.path.join(val, "N*", "plan_config_*.json")),
                  key=lambda p: (int(os.path.basename(os.path.dirname(p))[1:]), p))
    if not cfgs:
        raise SystemExit(f"sailor_runs: no plan_config_*.json under {val}")
    pname = model["profile_name"]
    net, zone = None, opts["links"]
    if zone:
        net = json.load(open(os.path.join(repo, "sailor/providers/multizone_bandwidths_het.json")))
        nic_of = lambda g, n: round(sailor_link(net, zone, (g, n), (g, n))[1] * 8, 2)  # Gbit/s
    else:
        nic_of = lambda g, n: model["nic_gbit"]
    os.makedirs(os.path.join(out, "plans"), exist_ok=True)
    runs, gpu_types, all_kinds = [], [], {}
    for path in cfgs:
        cfg = json.load(open(path))
        plan, summary, kinds = convert(cfg, model, nic_of, zone is not None)
        for k, c in kinds.items():
            all_kinds[k] = max(all_kinds.get(k, 0), c)
        for n in plan["cluster"]["nodes"]:
            if n["gpu_type"] not in gpu_types:
                gpu_types.append(n["gpu_type"])
        rel = os.path.relpath(path, os.path.join(repo, "sailor/Planner/simulations/validation"))
        name = rel.replace("/", "_").replace(".json", ".plan.json")
        write_json(os.path.join(out, "plans", name), plan)
        runs.append({"run": rel, "plan": "plans/" + name, "measured_iteration_s": cfg["real"], **summary})
    write_json(os.path.join(out, "runs.json"), runs)
    if opts["profiles"]:
        tables = {g: json.load(open(os.path.join(opts["profiles"], g + ".json"))) for g in gpu_types}
        origin = f"{opts['profiles']}/<GPU>.json"
    else:
        profiles = json.load(open(os.path.join(repo, "sailor/Planner/simulations/profiles_tmp.json")))
        tables = {g: profiles[pname][g] for g in gpu_types}
        origin = "profiles_tmp.json"
    prof = {"format": "autohet-profile", "version": 1, "model": pname, "seq": 2048,
            "source": f"Sailor planner profiles of {', '.join(gpu_types)} as published with Sailor (MIT, {origin})",
            "devices": tables}
    tag = "-".join(g.lower().replace("-", "") for g in gpu_types) if len(gpu_types) < 3 else cluster
    with open(os.path.join(out, f"{tag}-{pname.lower().replace('-', '').replace('.', '')}-profile.json"), "w") as f:
        json.dump(prof, f)
        f.write("\n")
    if zone:
        write_json(os.path.join(out, f"{tag}-links.json"), links_profile(net, zone, all_kinds))
        intra = json.load(open(os.path.join(repo, "sailor/providers/intra_node_bandwidths.json")))
        devs = []
        for g in gpu_types:
            size = max(n for (t, n) in all_kinds if t == g)
            devs.append({"name": g, "intra_bw_gbs": round(intra[g][str(size)][1] / 1e9, 2), "nic_gbit": nic_of(g, size)})
        write_json(os.path.join(out, f"{tag}-devices.json"), {"devices": devs}, indent=None)
    print(f"sailor_runs: {len(runs)} runs of {model_dir or cluster} on {cluster} ({', '.join(gpu_types)}) "
          f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
