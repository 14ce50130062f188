#!/usr/bin/env bash
# Builds the GPU binaries here (Release, CUDA on, into build-gpu/) and packs them with the shared
# libraries they need that a bare CUDA machine lacks (OpenBLAS, libgomp, libgfortran, cudart, ...;
# not cuBLAS, which comes with the device's CUDA 13 toolkit) into build-gpu/pack/pack.tar.xz, for
# tests/gpu/device_check.sh --pack build-gpu/pack on the device machine, whose image has nvcc and CMake
# but not this project's Debian packages (cJSON, cmocka, xxHash, OpenBLAS, Open MPI).
# Usage: bash tests/gpu/device_pack.sh   (then carry build-gpu/pack; build-*/ is git-ignored)
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DAUTOHET_CUDA=ON >/dev/null
bins=(test_gpu_ops test_gpu_train gpu_bench autohet)
cmake --build build-gpu -j"$(nproc)" --target "${bins[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/pack/bin" "$stage/pack/lib"
for b in "${bins[@]}"; do cp build-gpu/"$b" "$stage/pack/bin/"; done
# every library the binaries load except glibc's own and the CUDA driver/cuBLAS (the device's)
for b in "${bins[@]}"; do ldd "build-gpu/$b"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libcublas|libcublasLt)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/pack/lib/"; done
git rev-parse HEAD >"$stage/pack/commit"
git status --porcelain --untracked-files=no | grep -q . && echo dirty >>"$stage/pack/commit"
strip --strip-unneeded "$stage"/pack/bin/* 2>/dev/null || true
rm -rf build-gpu/pack && mkdir -p build-gpu/pack
tar -C "$stage" -cJf build-gpu/pack/pack.tar.xz pack
echo "device_pack: build-gpu/pack/pack.tar.xz ($(du -h build-gpu/pack/pack.tar.xz | cut -f1)) from $(tr '\n' ' ' <"$stage/pack/commit")"
echo "  libraries: $(cd "$stage/pack/lib" && echo *)"
