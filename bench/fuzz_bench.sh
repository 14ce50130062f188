#!/usr/bin/env bash
# Longer libFuzzer campaign over every parser (fuzz/run.sh): SECONDS per harness (default 120), corpora
# kept in build-fuzz/fuzz-bench between runs; prints executions and findings per harness, with the CPU.
# usage: bench/fuzz_bench.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh --fuzz
grep -m1 'model name' /proc/cpuinfo || true
FUZZ_OUT=build-fuzz/fuzz-bench fuzz/run.sh "${1:-120}"
