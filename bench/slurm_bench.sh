#!/usr/bin/env bash
# autohet run under a real Slurm losing a node (tests/cli_run_slurm.sh: slurmctld + 3 slurmd on network-namespace
# hosts, sbatch of scripts/autohet.sbatch, one node set down past step 5), N runs, as markdown on stdout: each
# run's recovery (detection, replan, relaunch, restore, steps lost, bytes by tier) and the medians. Root.
#   bench/slurm_bench.sh BIN FIXTURES COMPARE_FLOATS [N]
set -uo pipefail
BIN="$1" FIX="$2" CMP="$3" N="${4:-3}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
for ((i = 1; i <= N; i++)); do
  AUTOHET_SLURM_REPORT="$TMP/r$i.json" bash "$HERE/tests/cli_run_slurm.sh" "$BIN" "$FIX" "$CMP" >"$TMP/o$i" 2>&1 ||
    { tail -20 "$TMP/o$i" >&2; echo "slurm_bench: run $i failed" >&2; exit 1; }
  echo "slurm_bench: run $i done" >&2
done
echo "| run | cause | steps lost | detection s | replan s | relaunch s | restore s | recovery s | memory MB | peer MB | cloud MB |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for ((i = 1; i <= N; i++)); do
  jq -r --arg i "$i" '.recoveries[0] | "| \($i) | \(.cause | sub(" \\(host [^)]*\\)"; "") | sub(" \\(left the job.s allocation.*"; "")) | \(.steps_lost) | \(.detection_s * 1000 | round / 1000) | \(.replan_s * 1000 | round / 1000) | \(.relaunch_s * 1000 | round / 1000) | \(.restore_s * 1000 | round / 1000) | \(.seconds * 1000 | round / 1000) | \(.bytes_by_tier.memory / 1e5 | round / 10) | \(.bytes_by_tier.peer / 1e5 | round / 10) | \(.bytes_by_tier.cloud / 1e5 | round / 10) |"' "$TMP/r$i.json"
done
echo
for f in detection_s relaunch_s seconds; do
  printf "median %s: %.3f s; " "$f" "$(for ((i = 1; i <= N; i++)); do jq ".recoveries[0].$f" "$TMP/r$i.json"; done | median)"
done
echo
