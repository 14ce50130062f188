#!/usr/bin/env bash
# Install dependencies, build, and run every test twice: in the Release build
# and in the AddressSanitizer + UndefinedBehaviorSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)")
scripts/build.sh --sanitize
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$(nproc)" -E '^cli_valgrind')
echo "all tests passed (release and sanitizer builds)"
