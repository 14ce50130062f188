#!/usr/bin/env bash
# Runs the libFuzzer harnesses (fuzz/fuzz_*.c, built with CC=clang cmake -DAUTOHET_FUZZ=ON) for
# SECONDS each, on corpora seeded from the repository's fixtures and from a checkpoint, a trace and a
# plan that the fuzz build's autohet writes, and prints executions and findings per harness.
# usage: fuzz/run.sh SECONDS [HARNESS...]      (default: every harness)
#   FUZZ_BUILD  the fuzz build directory (default build-fuzz)
#   FUZZ_OUT    corpora, logs and crash inputs (default $FUZZ_BUILD/fuzz-out; corpora grow run to run)
# Exit status 1 when a harness found a crash, a leak, undefined behaviour or a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${FUZZ_BUILD:-build-fuzz}
OUT=${FUZZ_OUT:-$B/fuzz-out}
SECS=$1
shift
ALL=(model cluster devices plan profile calibration comm_profile spot_trace manifest safetensors state recovery chrome_trace hosts data hf_weights token_headers run_state beat)
NAMES=("${@:-${ALL[@]}}")
[ $# -gt 0 ] || NAMES=("${ALL[@]}")
mkdir -p "$OUT/gen"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0

# a real checkpoint, trace and plan to start from (written once per output directory)
G="$OUT/gen"
if [ ! -f "$G/ck/state.json" ]; then
  "$B/autohet" train --model tiny-gpt --data tests/fixtures/text --steps 2 --seq 16 --global-batch 2 \
    --micro-batch 1 --eval-every 0 --ckpt-dir "$G/ck" --ckpt-every 1 --trace "$G/trace.json" >"$G/train.out" 2>&1
  "$B/autohet" plan --model gpt3-1.3b --cluster 2x8xA100-40G,1x8xH800 --global-batch 64 --seq 2048 \
    --replans 1 --json "$G/plan.json" --quiet >/dev/null 2>&1 || true
fi

seeds() { # the seed files of a harness
  case $1 in
  model) ls examples/llama-config.json ;;
  cluster) ls fuzz/seeds/shorthand*.txt examples/inventory-mixed.json ;;
  devices) ls fuzz/seeds/devices.json ;;
  plan) ls tests/plans/*.json "$G/plan.json" 2>/dev/null ;;
  profile) ls tests/fixtures/sailor/*/*.json ;;
  comm_profile) ls fuzz/seeds/comm.json ;;
  calibration) ls fuzz/seeds/calib.json fuzz/seeds/calib-runs.json ;;
  spot_trace) ls tests/fixtures/spot-traces/*.csv ;;
  manifest) ls "$G"/ck/*/manifest.json ;;
  safetensors) ls "$G"/ck/*/*.safetensors ;;
  state) ls "$G/ck/state.json" ;;
  recovery) ls fuzz/seeds/recover.json ;;
  run_state) ls fuzz/seeds/run.json ;;
  beat) ls fuzz/seeds/beat*.txt ;;
  chrome_trace) ls fuzz/seeds/trace.json "$G/trace.json" ;;
  hosts) ls fuzz/seeds/hostfile.txt fuzz/seeds/nodelist.txt ;;
  hf_weights) ls fuzz/seeds/hf-tiny-gpt2*.safetensors "$G"/ck/*/*.safetensors ;;
  data) ls fuzz/seeds/llmc-tokens.bin fuzz/seeds/raw-tokens.bin tests/fixtures/text/MPL-2.0.txt ;;
  token_headers) ls fuzz/seeds/megatron-pair.bin fuzz/seeds/llmc-v2-tokens.bin fuzz/seeds/llmc-tokens.bin ;;
  esac
}

found=0
printf '%-14s %12s %10s %8s  %s\n' harness execs exec/s corpus findings
for n in "${NAMES[@]}"; do
  c="$OUT/corpus/$n"
  mkdir -p "$c"
  for f in $(seeds "$n"); do cp -n "$f" "$c/seed-$(basename "$(dirname "$f")")-$(basename "$f")"; done
  log="$OUT/$n.log"
  rc=0
  "$B/fuzz_$n" -max_total_time="$SECS" -close_fd_mask=3 -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$OUT/crash-$n-" "$c" >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  what="none"
  if [ $rc -ne 0 ]; then
    found=1
    what="rc $rc: $(grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error' "$log" || tail -1 "$log")"
  fi
  printf '%-14s %12s %10s %8s  %s\n' "$n" "${execs:-0}" "${rate:-0}" "$(ls "$c" | wc -l)" "$what"
done
exit $found
