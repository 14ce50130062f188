#!/usr/bin/env bash
# Same-node sends against sends between hosts, settled by measurement (issue #30: the plans autohet's simulator
# and Sailor's disagree on are deep pipelines whose sends stay inside a node, which Sailor's simulator prices at
# the network's speed). Two hosts made of network namespaces (tests/tools/netns_hosts.sh; root), both links held
# to RATE (tc tbf), four emulated GPUs on each (bench/emu-devices.json, emu-fast); pipelines of
# bench/emu-gpt-16l.json whose stages sit on one host, then the other, or alternate between them, trained by
# `autohet train --emulate analytic` (compute ops last the analytic model's time; sends, the tied exchange and the
# step reduction are real MPI over TCP, within a host or across the throttled link). Each plan is simulated twice
# with the links `commbench --pairs hosts` measured on the same hosts: as autohet prices them (a same-host send at
# the measured same-host figures, a send between the hosts at that pair's), and with every send at the pair's
# figures (the same-host fit replaced by the pair's: Sailor's pricing). Prints markdown on stdout.
# Usage: bench/emulated_hosts_bench.sh BIN FIXTURES [STEPS] [RATE]   (RATE default 20mbit; ONLY=TEXT: the plans
# whose name contains TEXT)
set -uo pipefail
BIN="$(realpath "$1")" FIX="$(realpath "$2")" STEPS="${3:-6}" RATE="${4:-20mbit}"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/../tests/tools/netns_hosts.sh"
. "$HERE/lib.sh" # median
TMP=$(mktemp -d)
trap 'netns_down; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
die() { echo "emulated_hosts_bench: $*" >&2; exit 1; }
DEV="$HERE/emu-devices.json"

netns_up 2 || die "cannot make network-namespace hosts (see above): this benchmark needs root and iproute2"
H0=${NETNS_HOSTS[0]} H1=${NETNS_HOSTS[1]}
export OMPI_MCA_plm_rsh_agent="$NETNS_AGENT" OMPI_MCA_oob_tcp_if_include="$NETNS_SUBNET" OMPI_MCA_btl=tcp,self
export OMPI_MCA_btl_tcp_if_include="$NETNS_SUBNET" OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_oob_tcp_dynamic_ipv4_ports="$NETNS_PORTS"
# the shared links before the throttle (two flows at once against one across the bare veth link), for the
# notes: what a link that is not one token bucket gives
timeout 300 mpirun -np 4 --host "$H0:2,$H1:2" --bind-to none "$BIN" commbench --pairs hosts --ops bw \
  --min-size 65536 --max-size 131072 --iters 5 >"$TMP/cb-free.out" 2>&1 \
  || { tail -20 "$TMP/cb-free.out" >&2; die "commbench --pairs hosts (unthrottled)"; }
# a bucket of two frames: the default (16 KB) sends half a 32 KiB activation at once after an idle moment, a link
# that no alpha-beta fit describes (tests/tools/netns_hosts.sh)
for i in 0 1; do netns_throttle "$i" "$RATE" 3028 || die "cannot throttle host $i's link (tc tbf)"; done
printf '%s slots=4\n%s slots=4\n' "$H0" "$H1" >"$TMP/hostfile"

# the links: two ranks on each host (the same-host fit of H0 and the H0-H1 pair), sizes around the activations
# (32 KiB) and the tied exchange (64 KiB)
timeout 300 mpirun -np 4 --host "$H0:2,$H1:2" --bind-to none "$BIN" commbench --pairs hosts --ops latency,bw \
  --min-size 1024 --max-size 131072 --iters 10 --json "$TMP/cb.json" >"$TMP/cb.out" 2>&1 \
  || { tail -20 "$TMP/cb.out" >&2; die "commbench --pairs hosts"; }
# Sailor's pricing: the same-host fit replaced by the pair's (every send at the network's figures)
python3 - "$TMP/cb.json" "$TMP/cb-net.json" <<'PY' || die "cannot write the network-priced profile"
import json, sys
p = json.load(open(sys.argv[1]))
lat = [f for f in p["fits"] if f["op"] == "latency"]
intra = [f for f in lat if f["link_class"] == "intra-node"]
inter = [f for f in lat if f["link_class"] != "intra-node"]
assert intra and inter, [f["link_class"] for f in lat]
for f in intra:
    for k in ("alpha_us", "beta_GBps", "regimes", "single_line", "max_rel_error", "max_abs_error_us"):
        f[k] = inter[0][k]
n = len(p["links"]["hosts"])
for key in ("latency_us", "bandwidth_GBps"):
    for a in range(n):
        p["links"][key][a][a] = p["links"][key][0][1]
json.dump(p, open(sys.argv[2], "w"))
PY

# plans: stages as (host, layers); emu-fast GPUs, 4 per host, the next free one of its host for each stage
python3 - "$TMP/plans" "$H0" "$H1" >"$TMP/names" <<'PY' || die "cannot write the plans"
import json, os, sys
out, hosts = sys.argv[1], sys.argv[2:]
os.makedirs(out, exist_ok=True)
PLANS = {  # name: (micro_batches, [(host, layers), ...]); 18 plan layers (embedding, 16 blocks, head)
    "p4-same-2+2-m8": (8, [(0, 5), (0, 4), (1, 4), (1, 5)]),
    "p4-alternate-m8": (8, [(0, 5), (1, 4), (0, 4), (1, 5)]),
    "p8-same-4+4-m8": (8, [(0, 3)] + [(0, 2)] * 3 + [(1, 2)] * 3 + [(1, 3)]),
    "p8-same-4+4-m16": (16, [(0, 3)] + [(0, 2)] * 3 + [(1, 2)] * 3 + [(1, 3)]),
    "p8-alternate-m8": (8, [(0, 3)] + [(1, 2), (0, 2)] * 3 + [(1, 3)]),
    "p6-same-4+2-m6": (6, [(0, 3), (0, 3), (0, 3), (0, 3), (1, 3), (1, 3)]),
}
# fp32: the engine sends 4-byte activations and gradients whatever its --precision (its matmuls' operands)
model = {"name": "emu-gpt-16l", "arch": "gpt", "hidden": 64, "n_layers": 16, "n_heads": 4, "n_kv_heads": 4,
         "ffn_hidden": 256, "vocab": 256, "max_positions": 256, "tied_embeddings": True}  # bench/emu-gpt-16l.json
for name, (m, stages) in PLANS.items():
    assert sum(n for _, n in stages) == 18, name
    used, first, st = [0, 0], 0, []
    for h, n in stages:
        st.append({"node_index": h, "gpus": [used[h]], "layers": [first, first + n], "tp": 1})
        used[h] += 1
        first += n
    plan = {"format": "autohet-plan", "version": 2, "model": model, "train": {"seq": 64, "precision": "fp32"},
            "cluster": {"nodes": [{"name": f"h{i}", "gpu_type": "emu-fast", "gpus": 4, "host": hosts[i]}
                                  for i in range(2)]},
            "micro_batch": 2, "global_batch": 2 * m, "replicas": [{"micro_batches": m, "stages": st}]}
    json.dump(plan, open(os.path.join(out, name + ".json"), "w"), indent=1)
    if os.environ.get("ONLY", name) in name:
        print(name)
PY

# train PLAN-NAME STEPS ARGS...: the plan's ranks on their hosts (the rankfile's hosts in rank order, for Open
# MPI's sequential mapper: a rankfile's slot is a core, and the 8 ranks of two 4-GPU nodes share 2 cores)
train() {
  local name="$1" steps="$2"
  shift 2
  timeout 600 mpirun -np "$(wc -l <"$TMP/$name.seq")" --hostfile "$TMP/$name.seq" --mca rmaps seq --bind-to none \
    "$BIN" train --model "$HERE/emu-gpt-16l.json" --data "$FIX/text" --plan "$TMP/plans/$name.json" --devices "$DEV" \
    --emulate analytic --steps "$steps" --eval-every 0 "$@" </dev/null >"$TMP/$name.out" 2>&1 \
    || die "train $name: $(tail -20 "$TMP/$name.out")"
}

echo "| plan | stages | micro-batches | sends between hosts / within a host (boundaries) | measured step (median of steps 3-$STEPS) | autohet: simulated | error | every send at the network's figures (Sailor's pricing) | error | analyze --diagnose of a traced run: top finding |"
echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---|"
: >"$TMP/errs"
while read -r name; do
  p="$TMP/plans/$name.json"
  n=$(jq '[.replicas[].stages[]] | length' "$p")
  cross=$(jq '[.replicas[0].stages as $s | range(1; $s | length) | select($s[.].node_index != $s[. - 1].node_index)] | length' "$p")
  for prof in cb cb-net; do
    "$BIN" simulate "$p" --devices "$DEV" --comm-profile "$TMP/$prof.json" --quiet --json "$TMP/$name.$prof.sim" \
      >"$TMP/$name.$prof.out" 2>&1 || die "simulate $name ($prof): $(cat "$TMP/$name.$prof.out")"
  done
  sim=$(jq .iteration_time_s "$TMP/$name.cb.sim") net=$(jq .iteration_time_s "$TMP/$name.cb-net.sim")
  "$BIN" hosts --plan "$p" --devices "$DEV" --hostfile "$TMP/hostfile" --rankfile "$TMP/$name.rf" >"$TMP/$name.hosts" 2>&1 \
    || die "autohet hosts $name: $(cat "$TMP/$name.hosts")"
  sed 's/^rank [0-9]*=\([^ ]*\) .*/\1/' "$TMP/$name.rf" >"$TMP/$name.seq"
  train "$name" "$STEPS" --log "$TMP/$name.log"
  meas=$(jq -s '.[2:] | map(.step_s) | .[]' "$TMP/$name.log" | median)
  # a second, traced run (untimed: tracing is not in the measured steps) and its diagnosis on the same links
  train "$name" 4 --trace "$TMP/$name.trace.json"
  "$BIN" analyze "$TMP/$name.trace.json" --diagnose --comm-profile "$TMP/cb.json" --plan "$p" --devices "$DEV" \
    --top 0 --json "$TMP/$name.diag.json" >/dev/null 2>"$TMP/$name.diag.err" || die "analyze $name: $(cat "$TMP/$name.diag.err")"
  top=$(jq -r '[.findings[] | select(.significant)][0]
               | if . == null then "none" else "\(.kind) (\(.share * 100 | floor) %)" end' "$TMP/$name.diag.json")
  e1=$(echo "($sim / $meas - 1) * 100" | bc -l) e2=$(echo "($net / $meas - 1) * 100" | bc -l)
  echo "$e1 $e2" >>"$TMP/errs"
  printf "| %s | %d | %s | %d / %d | %.4f s | %.4f s | %+.1f%% | %.4f s | %+.1f%% | %s |\n" "$name" "$n" \
    "$(jq '.replicas[0].micro_batches' "$p")" "$cross" $((n - 1 - cross)) "$meas" "$sim" "$e1" "$net" "$e2" "$top"
  printf "  %-18s measured %.4f s  autohet %.4f s (%+.1f%%)  network-priced %.4f s (%+.1f%%)\n" "$name" "$meas" "$sim" \
    "$e1" "$net" "$e2" >&2
done <"$TMP/names"
echo
awk '{ for (k = 1; k <= 2; k++) { a = $k < 0 ? -$k : $k; s[k] += a; if (a > w[k]) w[k] = a } n++ }
     END { printf "%d plans: autohet mean |error| %.1f%%, worst %.1f%%; every send at the network'"'"'s figures %.1f%%, worst %.1f%%.\n",
                  n, s[1] / n, w[1], s[2] / n, w[2] }' "$TMP/errs"
echo
echo "Links measured by \`commbench --pairs hosts\` on the same hosts (latency fit, $RATE per host link):"
echo
echo '```'
grep '^# ' "$TMP/cb.out" | tail -6
echo '```'
echo
echo "The same hosts before the throttle (\`commbench --pairs hosts --ops bw\`, bare veth links):"
echo
echo '```'
grep '^# ' "$TMP/cb-free.out" | sed -n '/^# shared links/,$p'
echo '```'
