#!/usr/bin/env bash
# Configure and build into build/ (Release, CPU backend), with --sanitize build-asan/, with --fuzz the
# libFuzzer harnesses (clang) in build-fuzz/ (fuzz/run.sh runs them), with --cuda build-cuda/ (Release
# with the CUDA backend: needs the CUDA toolkit; docs/cuda.md). build/ leaves CUDA out so that the
# valgrind tests do not load cuBLAS into every process.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fuzz" ]; then
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAUTOHET_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$(nproc)" --target fuzzers
elif [ "${1:-}" = "--cuda" ]; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DAUTOHET_CUDA=ON >/dev/null
  cmake --build build-cuda -j"$(nproc)"
elif [ "${1:-}" = "--sanitize" ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAUTOHET_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$(nproc)"
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAUTOHET_CUDA=OFF >/dev/null
  cmake --build build -j"$(nproc)"
fi
