#!/usr/bin/env bash
# Install the Debian packages autohet needs to build and test (idempotent).
set -euo pipefail
PKGS=(build-essential cmake pkg-config libcjson-dev libcmocka-dev jq valgrind iproute2 libopenblas-dev libopenblas-openmp-dev
      libopenmpi-dev openmpi-bin libopen-trace-format2-dev otf2-tools libxxhash-dev
      clang libomp-dev python3 libdnnl-dev
      python3-numpy python3-torch) # tests/cli_hf_weights.sh: PyTorch reference forwards (under /usr/bin/python3)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
