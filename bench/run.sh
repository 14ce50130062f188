#!/usr/bin/env bash
# Build in Release, run the benchmarks and write BENCHMARKS.md.
# Usage: bench/run.sh [--runs N] [--only SECTION[,SECTION..]]
#   sections: planner replan verify mixtp calib simulator measured emulated emulated_hosts engine engine_ab attention memory schedules overlap ckpt recovery recovery_hosts goodput chaos slurm diagnose spot comm tokenize threads
#   (default: all)
#   engine_ab builds the revision $ENGINE_BASE (default: the last one before issue #12) beside this one;
#   attention builds $ATTN_BASE (default: the last one before the flash-style attention)
#   planner: with SAILOR=DIR (a checkout of eth-easl/sailor with its planner module built, bench/sailor_planner.py)
#   Sailor's planner is timed on the same pools in the same run
# Each section's text is kept in bench/results/SECTION.md; --only reruns just those sections and
# BENCHMARKS.md is assembled from every section's latest results (each says when and where it ran).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=5
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --only) ONLY=",$2,"; shift 2 ;;
    *) echo "usage: bench/run.sh [--runs N] [--only SECTION[,SECTION..]]" >&2; exit 2 ;;
  esac
done
SECTIONS=(planner replan verify mixtp calib simulator measured emulated emulated_hosts engine engine_ab attention memory schedules overlap ckpt recovery recovery_hosts goodput chaos slurm diagnose spot comm tokenize threads)
scripts/build.sh >/dev/null
mkdir -p out bench/results
CPU="$(nproc --all) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') (model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
stamp() { echo "_Measured by \`bench/run.sh --only $1\` on $(date -u +%Y-%m-%d), $CPU, Release build._"; }

section_planner() {
  echo "## Planner (\`autohet plan\`)"
  echo
  stamp planner
  echo
  echo "Predicted iteration time (seconds) of the AutoHet plan, the Whale-style \`proportional\` baseline"
  echo "(symmetric pipelines, batch in proportion to replica speed) and the \`megatron\` baseline"
  echo "(symmetric 3D parallelism, equal batch), all under the cost model of docs/cost-model.md and each"
  echo "the best of its own plan space. Speedup = baseline time / AutoHet time. Planning time: median of"
  echo "$RUNS runs, one core. Targets (issue #11): <= 1 s up to 64 GPUs of 3 types, <= 10 s for 1,024"
  echo "GPUs of 6 types."
  echo
  ./build/plan_bench --runs "$RUNS" --markdown out/plan_bench.md >&2
  cat out/plan_bench.md
  echo
  awk -F'|' 'NR>2 { gpus=$4+0; t=$7+0; if (gpus<=64 && t>m64) m64=t; if (gpus>=1024 && t>m1k) m1k=t }
       END { printf("Slowest planning time: %.3f s for clusters of <= 64 GPUs, %.3f s at 1,024 GPUs.\n", m64, m1k) }' out/plan_bench.md
  echo
  echo "### Wall time of the whole process on the Sailor comparison's pools (issue #30)"
  echo
  echo "\`autohet plan\` start to finish (start-up, profile loading, search, JSON), OPT-350M with Sailor's profiles,"
  echo "global batch 1024. Target (issue #30): <= 50 ms on small pools."
  if [ -n "${SAILOR:-}" ]; then
    echo "Beside it, in the same run on the same CPU, the public Sailor planner (eth-easl/sailor, its C++ search behind"
    echo "a pybind11 module, built from its repository; \`bench/sailor_planner.py\`) on the same pools as its artifact"
    echo "scripts run it (OPT-350 profiles, measured GCP links, global batch 1024, objective throughput, fp16 off):"
    echo "its search alone (median of $RUNS fresh planner objects, after one) and its whole process (Python start, its"
    echo "input files, the search). Its pick's time is its own estimate (Tpp) under its own cost model, not comparable"
    echo "with autohet's iteration column; both search single-threaded."
    echo
    bench/plan_wall_bench.sh --build build --runs "$RUNS" --sailor "$SAILOR"
  else
    echo "Sailor's own search takes 0.02-0.04 s on such pools (issue #30's figure; \`SAILOR=DIR bench/run.sh --only"
    echo "planner\` times it beside)."
    echo
    bench/plan_wall_bench.sh --build build --runs "$RUNS"
  fi
  cat bench/planner_notes.md
}

section_replan() {
  echo "## Replanning after a loss (\`autohet replan\`, issue #30)"
  echo
  stamp replan
  echo
  echo "The 1,024-GPU, 6-type pool of the planner table (llama2-13b, global batch 2048) planned once with its replans"
  echo "computed ahead (\`autohet plan --replans 4\`: the full search of the survivors of every loss of up to 4 nodes,"
  echo "one per loss vector over the 6 node classes, on every core: docs/planner.md \"Replans computed ahead\"); then"
  echo "nodes the plan uses are lost at random (seeded, RUNS trials each) and the survivors replanned three ways: looked"
  echo "up in the plan document's replans, \`autohet replan --fast\` (the replicas whose nodes all survive kept, the nodes"
  echo "of broken replicas planned on their own, the micro-batches dealt out again: docs/planner.md \"Replanning after a"
  echo "loss\") and the full search of the survivors (\`--exact\`, one core). *computed ahead vs full*: the looked-up plan"
  echo "has the full search's search value and evaluated iteration time; a loss deeper than the replans takes the entry"
  echo "of 4 of its nodes and repairs it for the rest (the faster of that and the fast replan is kept, gap to the full"
  echo "search given). *replan command wall*: \`autohet replan --fast\`"
  echo "from process start to exit (the plan document read, the lookup or the repair, the new document written)."
  echo "Target (issue #30): a replan <= 100 ms at 1,024 GPUs."
  echo
  bench/replan_bench.sh --build build --runs "$RUNS" --depth 4
}

section_verify() {
  echo "## Closed form vs simulation, and the peer planners' plans (issue #11)"
  echo
  stamp verify
  echo
  echo "For every pool: the 20 best distinct plans of \`autohet plan\` (the best of each configuration),"
  echo "each simulated (\`autohet simulate --overlap-dp\`, 1F1B). Worst |closed form / simulated - 1|, Kendall tau"
  echo "between the two rankings, the pick's simulated time and its regret (over the best simulated time"
  echo "among the 20). Peer pools: OPT-350M, global batch 1024, seq 2048, 4-GPU nodes, the Sailor"
  echo "profiles and Sailor's measured GCP links; Metis's best plan for the same inputs"
  echo "(bench/peer-plans/README.md) simulated the same way. Negative = autohet's pick is faster."
  echo
  ./build/verify_bench --top 20 --markdown out/verify_bench.md >&2
  cat out/verify_bench.md
  echo
  cat bench/verify_notes.md
}

section_mixtp() {
  echo "## Closed form vs simulation on plans of mixed TP degrees (issue #11)"
  echo
  stamp mixtp
  echo
  echo "Hand-made plans whose stages have different TP degrees (tests/plans/sim-mixtp-*.json): replicas of"
  echo "different degrees holding one bucket (its all-reduce cut into TP=T slices), pipelines whose stages"
  echo "change degree, misaligned boundaries. OPT-350M plans on the Sailor profiles and GCP links, the"
  echo "\`an-\` ones on the analytic model; 1F1B. The planner's own mixed-degree picks are in the verify"
  echo "section above (TP column \`mix\`)."
  echo
  bench/mixtp_bench.sh ./build/autohet out/mixtp_bench.md >&2
  cat out/mixtp_bench.md
}

section_calib() {
  bench/calib_bench.sh --build build --out out/calib_bench.md >&2
  cat bench/calib_notes.md
  echo
  cat out/calib_bench.md
}

section_measured() {
  echo "## The simulator against measured GPU runs (issue #30)"
  echo
  stamp measured
  echo
  echo "The measured sets of ../shared/data/measured-runs and bench/measured (real GPUs; each set's README says whose):"
  echo "every run simulated as it stands, then with the set's calibration (\`autohet calibrate\`, docs/calibration.md):"
  echo "in sample, left out one at a time, and fitted on the small runs to predict the large ones; then each set predicted"
  echo "by another set's calibration (held out by model: the same GPUs; held out by GPUs: the same model on other GPUs"
  echo "and links). Targets (issue #30): mean error <= 5%, every run within 12% on the GH200 OPT-350M set; on held-out"
  echo "sets mean <= 8%, every run within 15%."
  echo
  bench/measured_bench.sh --build build --out out/measured.md >&2
  cat out/measured.md
  echo
  echo "### Megatron-LM's weak-scaling table (10 runs on A100-80G, analytic model)"
  echo
  echo "Table 1 of the Megatron-LM paper (SC'21): GPT models of 1.7 B to 1 T parameters on 32 to 3,072 A100-80G, each"
  echo "run's iteration time from its published TFLOP/s (bench/megatron-table1/README.md). No profile: the analytic model"
  echo "(docs/calibration.md), nothing fitted to these runs. Each row planned as Megatron laid it out (\`--baseline megatron\`"
  echo "with its TP, PP, DP and micro-batch, \`--recompute full\`) and simulated as is (blocking DP all-reduce). Target"
  echo "(issue #30, held-out sets): mean |error| <= 8%, every run within 15%."
  echo
  bench/megatron_table1.sh --build build
}

section_emulated() {
  echo "## The simulator against the engine on emulated pipelines (issue #30)"
  echo
  stamp emulated
  echo
  echo "\`bench/emulated_bench.sh\`: 23 plans of \`bench/emulated_plans.py\` (2-16 stages, uneven micro-batch counts"
  echo "between replicas, mixed devices, per-stage TP; the model \`bench/emu-gpt-16l.json\`, 16 blocks of hidden 64,"
  echo "micro-batch 2, seq 64) trained by \`autohet train --emulate analytic\` on the devices of"
  echo "\`bench/emu-devices.json\` (emu-fast, and emu-slow at half its speed): every compute op lasts the analytic"
  echo "model's time for it on its rank's device (computed, then slept to that time), so up to 16 ranks share the"
  echo "2 cores with their real 1F1B schedule, MPI sends, TP and DP all-reduces and optimizer steps; 6 steps, the"
  echo "median of steps 3-6. Simulated: \`autohet simulate\` of the same plan with the same model and devices."
  echo "Error = simulated / measured - 1. The compute times agree by construction; what is compared is everything"
  echo "else: the schedule's dependencies, fill and drain, uneven micro-batches, the replicas' tails. Construction"
  echo "has one leak the last column measures: an op's sleep to its modelled end wakes up late (the OS's wake-up on"
  echo "cores that 12-16 ranks share; the engine asks for no timer slack), time the emulated device would not lose,"
  echo "so the deepest pipelines, with the most ops on their critical path, read a few per cent slower than modelled."
  echo
  bash bench/emulated_bench.sh ./build/autohet tests/fixtures 6
}

section_emulated_hosts() {
  echo "## Same-node sends against sends between hosts, measured (issue #30)"
  echo
  stamp emulated_hosts
  echo
  echo "\`bench/emulated_hosts_bench.sh\`: the plans autohet's simulator and Sailor's disagree on are deep pipelines"
  echo "whose sends stay inside a node, which Sailor's prices at the network's speed. Two hosts made of network"
  echo "namespaces, each host's link held to 20 Mbit/s (tc tbf, a bucket of two frames), four emulated GPUs on each (emu-fast); pipelines of"
  echo "the emulated bench's model whose stages sit on one host, then the other (\`same\`), or alternate between them,"
  echo "trained by \`autohet train --emulate analytic\` (compute slept to the analytic model's time; sends of 32 KiB"
  echo "fp32 activations and gradients, the tied exchange and the step reduction are real MPI over TCP). Each plan simulated"
  echo "with the links \`commbench --pairs hosts\` measured on the same hosts a moment before: as autohet prices them"
  echo "(same host: the same-host fit; between the hosts: the pair's), and with every send at the pair's figures."
  echo "6 steps, the median of steps 3-6; error = simulated / measured - 1."
  echo
  bash bench/emulated_hosts_bench.sh ./build/autohet tests/fixtures 6 20mbit
  echo
  cat bench/emulated_hosts_notes.md
}

section_simulator() {
  echo "## Simulator (\`autohet simulate\`)"
  echo
  stamp simulator
  echo
  ./build/sim_bench --runs "$RUNS" --markdown out/sim_bench.md >&2
  cat out/sim_bench.md
  echo
  cat bench/sim_notes.md
}

section_engine() {
  echo "## Training engine (\`autohet train\`)"
  echo
  stamp engine
  echo
  bench/engine_bench.sh ./build/autohet out/engine_bench.md >&2
  cat out/engine_bench.md
  cat bench/engine_notes.md
}

section_engine_ab() {
  local rev="${ENGINE_BASE:-9d48f6f}"
  echo "## Engine throughput against an earlier build"
  echo
  stamp engine_ab
  echo
  rm -rf out/base-src && mkdir -p out/base-src
  git archive "$rev" | tar -x -C out/base-src
  cmake -S out/base-src -B out/base-src/build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build out/base-src/build -j"$(nproc)" --target autohet >/dev/null
  bench/engine_compare.sh out/base-src/build/autohet ./build/autohet out/engine_ab.md "$RUNS" "$rev" >&2
  cat out/engine_ab.md
  cat bench/engine_ab_notes.md
}

section_attention() {
  local rev="${ATTN_BASE:-64046c3}"
  echo "## Causal attention: flash-style against the full T x T kernel (issue #15)"
  echo
  stamp attention
  echo
  rm -rf out/attn-base-src && mkdir -p out/attn-base-src
  git archive "$rev" | tar -x -C out/attn-base-src
  cmake -S out/attn-base-src -B out/attn-base-src/build -DCMAKE_BUILD_TYPE=Release -DAUTOHET_CUDA=OFF >/dev/null
  cmake --build out/attn-base-src/build -j"$(nproc)" --target autohet >/dev/null
  bench/attention_bench.sh out/attn-base-src/build/autohet ./build/autohet out/attention_bench.md "$RUNS" \
    ./build/attention_bench >&2
  cat out/attention_bench.md
  echo "The same with one thread (no OpenMP barriers: on a shared, oversubscribed machine a parallel region"
  echo "waits for a descheduled thread, which inflates the 2-thread figures of both kernels):"
  echo
  ATTN_BENCH_THREADS=1 bench/attention_bench.sh out/attn-base-src/build/autohet ./build/autohet \
    out/attention_bench_1t.md "$RUNS" >&2
  cat out/attention_bench_1t.md
  echo "The kernel is described in docs/engine.md (\"Attention\"); its tests compare it with the earlier one"
  echo "(\`tests/test_attention.c\`: outputs and gradients within 1e-6, every instruction set of the CPU)."
}

section_memory() {
  echo "## Memory: the engine against the cost model (issue #11)"
  echo
  stamp memory
  echo
  echo "\`autohet train\` (fp32, CPU) runs each plan for 2 steps; its summary reports every rank's high-water"
  echo "mark of backend tensors (weights, gradients, AdamW moments, activations, scratch: every buffer the"
  echo "engine allocates through the backend seam) and the planner's stage memory for the same layers, degree,"
  echo "micro-batch and schedule (state + the schedule program's largest sum of in-flight activations)."
  echo "Error = cost model / measured - 1, the rank furthest off (docs/engine.md, \"Memory\")."
  echo
  bench/memory_bench.sh ./build/autohet out/memory_bench.md >&2
  cat out/memory_bench.md
}

section_schedules() {
  echo "## Pipeline schedules"
  echo
  stamp schedules
  echo
  bench/schedule_bench.sh ./build/autohet out/schedule_bench.md 3 >&2
  cat out/schedule_bench.md
}

section_overlap() {
  echo "## Overlapped data-parallel all-reduce"
  echo
  stamp overlap
  echo
  bench/overlap_bench.sh ./build/autohet out/overlap_bench.md 15 >&2
  cat out/overlap_bench.md
  cat bench/overlap_notes.md
}

section_ckpt() {
  echo "## Checkpoints"
  echo
  stamp ckpt
  echo
  : >out/ckpt_bench.md
  bench/ckpt_bench.sh ./build/autohet out/ckpt_bench.md >&2
  cat out/ckpt_bench.md
}

section_recovery() {
  echo "## Recovery after preemption (\`autohet run\`)"
  echo
  stamp recovery
  echo
  : >out/recovery_bench.md
  bench/recovery_bench.sh ./build/autohet out/recovery_bench.md >&2
  cat out/recovery_bench.md
  cat bench/recovery_notes.md
}

section_recovery_hosts() {
  echo "## Recovery and links between hosts (network namespaces, issue #14)"
  echo
  stamp recovery_hosts
  echo
  bench/recovery_hosts.sh ./build/autohet out/recovery_hosts.md >&2
  cat out/recovery_hosts.md
}

section_goodput() {
  echo "## Goodput under faults without notice (issue #26)"
  echo
  stamp goodput
  echo
  bench/goodput_bench.sh ./build/autohet out/goodput_bench.md >&2
  cat out/goodput_bench.md
}

section_slurm() {
  echo "## autohet run under a real Slurm (\`sbatch scripts/autohet.sbatch\`)"
  echo
  stamp slurm
  echo
  echo "tests/cli_run_slurm.sh, 3 times: slurmctld and one slurmd per network-namespace host (Slurm 22.05), the"
  echo "template submitted with sbatch on 3 nodes for a 3-node plan of tiny-gpt (20 steps, every step evaluating 40"
  echo "validation batches), the node of n1 set down with \`scontrol update\` once the run has passed step 5; the run"
  echo "ends every step on the other two (parameters within 1e-4 of one process). The recovery of each run:"
  echo
  bash bench/slurm_bench.sh ./build/autohet tests/fixtures ./build/compare_floats 3
}

section_diagnose() {
  CPU="$CPU" bash bench/diagnose_bench.sh ./build/autohet tests/fixtures --seed 6212 --keep out/diagnose
}

section_chaos() {
  echo "## Chaos: faults injected from outside at random (issue #26)"
  echo
  stamp chaos
  echo
  local n=${CHAOS_TRIALS:-100}
  bash tests/chaos.sh ./build/autohet tests/fixtures ./build/compare_floats "$n" --markdown out/chaos.md >&2 || true
  cat out/chaos.md
}

section_tokenize() { # measured by hand (issue #29): its text is kept in bench/results/tokenize.md
  cat bench/results/tokenize.md
}

section_spot() {
  echo "## Spot traces (\`autohet spot-sim\`)"
  echo
  stamp spot
  echo
  : >out/spot_bench.md
  bench/spot_bench.sh ./build/autohet out/spot_bench.md >&2
  cat out/spot_bench.md
  cat bench/spot_notes.md
}

section_threads() {
  echo "## Threads per rank (ranks that share cores)"
  echo
  stamp threads
  echo
  bench/threads_bench.sh ./build/autohet out/threads_bench.md "$RUNS" >&2
  cat out/threads_bench.md
}

section_comm() {
  echo "## Communication (\`autohet commbench\`)"
  echo
  stamp comm
  echo
  bench/commbench.sh ./build/autohet out/commbench.md >&2
  cat out/commbench.md
}

for s in "${SECTIONS[@]}"; do
  if [ -z "$ONLY" ] || [[ "$ONLY" == *",$s,"* ]]; then
    echo "== $s" >&2
    "section_$s" >"out/section_$s.md"
    mv "out/section_$s.md" "bench/results/$s.md"
  fi
done
{
  echo "# Benchmarks"
  echo
  echo "Generated by \`bench/run.sh\` from \`bench/results/\`; every section says when and on which CPU it"
  echo "was measured (\`bench/run.sh --only SECTION\` refreshes one). This machine is shared and noisy: times"
  echo "are medians, speedups are ratios measured side by side in one run."
  for s in "${SECTIONS[@]}"; do
    echo
    [ -f "bench/results/$s.md" ] && cat "bench/results/$s.md"
  done
} >BENCHMARKS.md
echo "wrote BENCHMARKS.md" >&2
