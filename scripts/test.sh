#!/usr/bin/env bash
# Install dependencies, build, and run every test twice: in the Release build
# and in the AddressSanitizer + UndefinedBehaviorSanitizer build; then a short
# libFuzzer run of every parser (clang build in build-fuzz/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)")
# the CUDA backend (docs/cuda.md): compiled and its host-side tests run wherever the toolkit is;
# the GPU tests say "not run" (CTest: skipped) without a device
if [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/build.sh --cuda
  (cd build-cuda && ctest --output-on-failure -R '^(test_cuda_gemm|test_gpu_ops|test_gpu_ops_harness|test_gpu_train|test_gpu_train_harness|cli_device)$')
else
  echo "no CUDA toolkit at /usr/local/cuda: the CUDA backend is not built here" >&2
fi
scripts/build.sh --sanitize
# valgrind cannot run ASan binaries; the MPI tests keep ASan's error checks but not
# LeakSanitizer, which reports Open MPI's own never-freed runtime allocations. The chaos harness runs in
# the Release build only (cli_run_faults covers the same paths under the sanitizers in a fraction of the time).
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$(nproc)" -E '^(cli_valgrind|cli_train|cli_train_emulate|cli_train_data|cli_data_formats|cli_tokenize|cli_train_precision|cli_schedules|cli_stage_tp|cli_commbench|cli_analyze|cli_ckpt|cli_reshard|cli_run|cli_run_faults|cli_run_reshard|cli_inputs|cli_hosts|cli_hosts_commbench|cli_run_hosts|cli_run_slurm|cli_run_heartbeat|cli_model_configs|cli_device|cli_hf_weights|cli_trace_clock|cli_trace_clock_hosts|kill_harness|diagnose_harness|chaos|chaos_hosts)$')
(cd build-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j"$(nproc)" -R '^(cli_train|cli_train_emulate|cli_train_data|cli_data_formats|cli_tokenize|cli_train_precision|cli_schedules|cli_stage_tp|cli_commbench|cli_analyze|cli_ckpt|cli_reshard|cli_run|cli_run_faults|cli_run_reshard|cli_inputs|cli_hosts|cli_hosts_commbench|cli_run_hosts|cli_run_slurm|cli_run_heartbeat|cli_model_configs|cli_device|cli_hf_weights|cli_trace_clock|cli_trace_clock_hosts|diagnose_harness)$')
# libFuzzer smoke run of every parser: 2 s each (bench/fuzz_bench.sh runs them longer)
if command -v clang >/dev/null; then
  scripts/build.sh --fuzz
  fuzz/run.sh 2
else
  echo "clang is not installed (scripts/deps.sh installs it): no fuzz smoke run" >&2
  exit 1
fi
echo "all tests passed (release and sanitizer builds, fuzz smoke run)"
