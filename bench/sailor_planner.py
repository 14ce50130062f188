#!/usr/bin/env python3
"""Time the public Sailor planner (eth-easl/sailor, SOSP'25) on one pool, for bench/plan_wall_bench.sh --sailor.

Sailor's planner is C++ behind a pybind11 module (sailor/Planner/sailor_planner/cpp_src, `make libplanner.so`);
this script does not build it: SAILOR is a checkout of eth-easl/sailor whose cpp_src holds a built module for this
Python (libplanner.cpython-3XY-*.so). It is called as Sailor's own planner.py calls it, with the inputs its
artifact scripts use (ae_scripts/planner -> simulations/simulator.py --planner SAILOR): the OPT-350 profiles under
sailor/Planner/sailor_planner/profiles, the measured GCP links, the OPT-350 training configuration (global batch
1024, sequence 2048), objective "throughput", no cost or throughput bound, fp16 off (the artifact scripts never pass
--fp16; with it, Sailor's search crashes on mixed pools: it reads a V100-16 profile entry at micro-batch 8, TP 1
that does not exist).

    bench/sailor_planner.py SAILOR A100-40=16,V100-16=16 [--reps N]

Prints one JSON object: `search_s` (median over N fresh planner objects of get_sorted_plans alone, after one
untimed; a second call on one object returns its cached result; --reps 0: one run, for timing the whole process), `search_s_all`, `construct_s` (median), `plans`, and `best` (Sailor's
estimated iteration time `Tpp_s`, micro-batch, pipeline depth, GPUs per type). Sailor's C++ prints a lot on stdout:
it goes to /dev/null.
"""
import json
import os
import statistics
import sys
import time

ZONE = "us-central1-a"


class Quiet:
    """fd 1 to /dev/null while the C++ runs."""

    def __enter__(self):
        sys.stdout.flush()
        self.saved, self.null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        os.dup2(self.null, 1)

    def __exit__(self, *exc):
        sys.stdout.flush()
        os.dup2(self.saved, 1)
        os.close(self.saved)
        os.close(self.null)


def main():
    args = sys.argv[1:]
    reps = 5
    if "--reps" in args:
        i = args.index("--reps")
        reps = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    src, spec = args
    pool = {k: int(v) for k, v in (e.split("=") for e in spec.split(","))}
    sys.path.insert(0, os.path.join(src, "sailor/Planner/sailor_planner/cpp_src"))
    try:
        import libplanner
    except ImportError as e:
        sys.stderr.write(f"sailor_planner: no built Sailor planner under {src} ({e})\n")
        return 2
    tmpdir = os.environ.get("TMPDIR", "/tmp")
    quotas = os.path.join(tmpdir, f"sailor-quotas-{os.getpid()}.json")
    with open(quotas, "w") as f:
        json.dump({g: {ZONE: n} for g, n in pool.items()}, f)
    gpus = sorted(pool)
    p = lambda rel: os.path.join(src, rel)
    construct, search, best, plans = [], [], None, 0
    try:
        for rep in range(reps + 1 if reps else 1):  # the first warms the page cache (--reps 0: one run, timed)
            with Quiet():
                t0 = time.perf_counter()
                planner = libplanner.SailorPlanner(
                    p("sailor/Planner/sailor_planner/profiles/OPT-350/"),
                    p("sailor/providers/multizone_bandwidths_het.json"),
                    p("sailor/Planner/simulations/configs/training_config_opt_350.json"),
                    p("sailor/Planner/llm_info.json"), p("sailor/providers/gcp/communication_cost.json"),
                    True, False, quotas, "throughput")
                t1 = time.perf_counter()
                configs = planner.get_sorted_plans({ZONE: dict(pool)}, 0.0, 0.0)
                t2 = time.perf_counter()
            if rep or not reps:
                construct.append(t1 - t0)
                search.append(t2 - t1)
            plans = len(configs)
            if configs and best is None:
                c = configs[0]
                used = {}
                for stage in c.get_config_per_stage():
                    for gpu_idx, tp, _zone in stage:
                        used[gpus[gpu_idx]] = used.get(gpus[gpu_idx], 0) + tp
                best = {"Tpp_s": c.get_Tpp(), "micro_batch": c.get_mbs(), "pp": len(c.get_config_per_stage()),
                        "gpus_used": used}
            del configs, planner
    finally:
        os.unlink(quotas)
    print(json.dumps({"pool": pool, "search_s": statistics.median(search), "search_s_all": search,
                      "construct_s": statistics.median(construct), "plans": plans, "best": best}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
