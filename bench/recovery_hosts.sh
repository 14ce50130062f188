#!/usr/bin/env bash
# Recovery between hosts, and commbench's link matrix, on hosts made of network namespaces
# (tests/tools/netns_hosts.sh; root).
#  1. The 38M GPT of bench/recovery_bench.sh (2 replicas x 2 stages) on 4 namespace hosts from a hostfile,
#     each with a /dev/shm of its own (NETNS_PRIVATE_SHM=1: the memory tiers are host-local);
#     host 1 is lost after step 4 of 5 (--preempt HOST@4: its rank killed on it through the rsh agent, its
#     memory and disk tiers gone); `autohet run` replans on the 3 survivors and resumes: autohet's
#     layer-bitmap recovery (layers from the surviving hosts' tiers, over TCP with MPI one-sided, osc pt2pt)
#     vs a full reload from the cloud tier (a shared directory held to --cloud-bandwidth per node). Every
#     host's link unthrottled and throttled to 1 Gbit/s (tc tbf); median of RUNS runs, interleaved.
#  2. commbench --pairs hosts on 4 hosts (ranks 0, 1 on host 0; one rank on each other host), host 3's
#     link at 1 Gbit/s: the all-pairs link matrix (latency from the small-message regime, bandwidth from
#     the large one) and the fit's largest relative error per link.
# Usage: bench/recovery_hosts.sh BIN OUT.md   (bench/run.sh --only recovery_hosts refreshes BENCHMARKS.md)
#   RECOVERY_HOSTS_RUNS (default 3), RECOVERY_BENCH_CLOUD_MBS (default 100)
set -uo pipefail
BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
OUT="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/../tests/tools/netns_hosts.sh"
TMP=$(mktemp -d)
trap 'netns_down; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
RUNS="${RECOVERY_HOSTS_RUNS:-3}"
CLOUD="${RECOVERY_BENCH_CLOUD_MBS:-100}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
die() { echo "recovery_hosts: $*" >&2; exit 1; }

NETNS_PRIVATE_SHM=1 netns_up 4 || die "cannot make network-namespace hosts (see above): this benchmark needs root and iproute2"
H=("${NETNS_HOSTS[@]}")
printf '%s slots=1\n' "${H[@]}" >"$TMP/hostfile"
export OMPI_MCA_plm_rsh_agent="$NETNS_AGENT" OMPI_MCA_oob_tcp_if_include="$NETNS_SUBNET" OMPI_MCA_btl=tcp,self
export OMPI_MCA_btl_tcp_if_include="$NETNS_SUBNET" OMPI_MCA_mpi_yield_when_idle=1

one() { # label mode round
  local out="$TMP/$1-$2-$3"
  timeout 600 "$BIN" run --plan "$HERE/plans/gpt-38m-4node.json" --model "$HERE/gpt-38m-bytes.json" \
    --data "$HERE/../tests/fixtures/text" --steps 5 --seed 1 --eval-every 0 --ckpt-every 3 \
    --hostfile "$TMP/hostfile" --preempt "${H[1]}@4" --recovery "$2" --cloud-bandwidth "$CLOUD" \
    --run-dir "$out.run" --report "$out.json" >"$out.out" 2>&1 \
    || { tail -20 "$out.out" >&2; die "$1 $2 round $3 failed"; }
  jq -e '.completed and (.recoveries | length) == 1' "$out.json" >/dev/null || die "$1 $2 round $3: not completed"
  rm -rf "$out.run"
}
med() { sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'; }
rows() { # label
  local mode
  for mode in layer-bitmap full-reload; do
    f=("$TMP/$1-$mode-"*.json)
    col() { for j in "${f[@]}"; do jq ".recoveries[0] | $1" "$j"; done | med; }
    echo "| $([ "$1" = 1gbit ] && echo "1 Gbit/s" || echo "$1") | $mode | $(col .detection_s) | $(col '.replan_s + .assign_s') | $(col .relaunch_s) | $(col .restore_s) | $(col '.bytes_by_tier.peer / 1e6') | $(col '.bytes_by_tier.cloud / 1e6') | $(col .steps_lost) | $(col .seconds) |"
  done
  local ratios
  ratios=$(for ((r = 1; r <= RUNS; r++)); do
    echo "$(jq '.recoveries[0].seconds' "$TMP/$1-full-reload-$r.json") / $(jq '.recoveries[0].seconds' "$TMP/$1-layer-bitmap-$r.json")" | bc -l
  done | med)
  echo "$1 $ratios" >>"$TMP/ratios"
}

t0=$(date +%s)
for ((r = 1; r <= RUNS; r++)); do
  for mode in layer-bitmap full-reload; do one unthrottled "$mode" "$r"; done
done
for ((i = 0; i < 4; i++)); do netns_throttle "$i" 1gbit || die "cannot throttle host $i (tc tbf)"; done
for ((r = 1; r <= RUNS; r++)); do
  for mode in layer-bitmap full-reload; do one 1gbit "$mode" "$r"; done
done
t1=$(date +%s)
{
  echo "### Recovery between hosts (issue #14)"
  echo
  echo "The 38M GPT of the recovery section (2 replicas x 2 stages, AdamW, checkpoints every 3 steps, cloud"
  echo "tier at $CLOUD MB/s per node) on 4 hosts made of network namespaces (veth pairs on a bridge, TCP only,"
  echo "Open MPI started on them through an rsh agent, a private /dev/shm each); host 1 is lost after step 4 (its rank killed on it, its"
  echo "memory and disk tiers gone), the next generation runs on the 3 survivors. Layer-bitmap recovery takes"
  echo "the layers it lacks from the surviving hosts' tiers over TCP (MPI one-sided, osc pt2pt); full reload"
  echo "restarts every node from the cloud tier's last checkpoint. Links: unthrottled (veth, memory speed) and"
  echo "every host's link held to 1 Gbit/s each way (tc tbf). Median of $RUNS runs each (seconds; MB moved;"
  echo "recovery = detection to the first step of the new generation; the step a full reload loses is trained
again after that, not counted here)."
  echo
  echo "| links | recovery | detection s | replan+assign s | relaunch s | restore s | peer MB | cloud MB | steps lost | recovery s |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  : >"$TMP/ratios"
  rows unthrottled
  rows 1gbit
  echo
  while read -r lab ratio; do echo "- $lab: full reload / layer-bitmap = ${ratio}x (median of the per-round ratios)"; done \
    <"$TMP/ratios" | sed "s/^- 1gbit/- 1 Gbit\/s links/; s/^- unthrottled/- unthrottled links/"
  echo "- $((RUNS * 4)) runs in $((t1 - t0)) s."
  echo
} >"$OUT"

# commbench: every pair of hosts, host 3 at 1 Gbit/s (the others are still throttled too: unthrottle first)
netns_down
netns_up 4 || die "cannot make network-namespace hosts for commbench"
H=("${NETNS_HOSTS[@]}")
export OMPI_MCA_plm_rsh_agent="$NETNS_AGENT" OMPI_MCA_oob_tcp_if_include="$NETNS_SUBNET"
export OMPI_MCA_btl_tcp_if_include="$NETNS_SUBNET"
netns_throttle 3 1gbit || die "cannot throttle host 3 (tc tbf)"
timeout 300 mpirun -np 5 --host "${H[0]}:2,${H[1]}:1,${H[2]}:1,${H[3]}:1" --bind-to none \
  "$BIN" commbench --pairs hosts --ops latency --min-size 4 --max-size 4194304 --iters 20 \
  --json "$TMP/cb.json" >"$TMP/cb.out" 2>&1 || { tail -20 "$TMP/cb.out" >&2; die "commbench --pairs hosts"; }
{
  echo "### commbench's link matrix across hosts (issue #14)"
  echo
  echo "\`mpirun -np 5 --host H0:2,H1:1,H2:1,H3:1 autohet commbench --pairs hosts --ops latency\` on 4 namespace"
  echo "hosts, sizes 4 B - 4 MiB, 20 iterations a size; host 3's link held to 1 Gbit/s (tc tbf), the others"
  echo "unthrottled. Each cell: the point-to-point fit of that pair of hosts (H0-H0 is host 0's two ranks):"
  echo "latency α from the small-message regime, bandwidth β from the large-message one, and the piecewise fit's"
  echo "largest relative error. This matrix is the comm profile's \`links\`, which \`autohet plan\` and"
  echo "\`autohet simulate\` read with \`--comm-profile\` (per-pair α-β)."
  echo
  jq -r '.links as $l | ($l.hosts | length) as $n |
    "| host | " + ([range(0; $n) | "H\(.)"] | join(" | ")) + " |",
    "|---" + ([range(0; $n) | "|---"] | join("")) + "|",
    (range(0; $n) as $a | "| H\($a) | " + ([range(0; $n) as $b |
      if $l.latency_us[$a][$b] == null then "-" else
      "\($l.latency_us[$a][$b] * 10 | round / 10) µs, \($l.bandwidth_GBps[$a][$b] * 1000 | round / 1000) GB/s (\($l.max_rel_error[$a][$b] * 1000 | round / 10)%)" end]
      | join(" | ")) + " |")' "$TMP/cb.json"
  echo
  echo "Cells: latency, bandwidth (largest relative error of the fit). 1 Gbit/s = 0.125 GB/s."
} >>"$OUT"
cat "$OUT"
