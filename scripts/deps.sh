#!/usr/bin/env bash
# Install the Debian packages autohet needs to build and test (idempotent).
set -euo pipefail
PKGS=(build-essential cmake pkg-config libcjson-dev libcmocka-dev jq valgrind iproute2 libopenblas-dev libopenblas-openmp-dev
      libopenmpi-dev openmpi-bin libopen-trace-format2-dev otf2-tools libxxhash-dev
      clang libomp-dev python3 libdnnl-dev
      slurmctld slurmd slurm-client # a real Slurm on namespace hosts: tests/cli_run_slurm.sh
      python3-numpy python3-torch python3-pip) # PyTorch reference forwards (tests/cli_hf_weights.sh, /usr/bin/python3); pip: tokenizers below
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
# scripts/tokenize.py and tests/cli_tokenize.sh: Hugging Face tokenizers for the python3 on PATH
# (PyPI; not packaged in Debian 12; Debian's own python3 needs --break-system-packages)
if ! python3 -c 'import tokenizers' 2>/dev/null; then
  python3 -m pip install -q 'tokenizers>=0.15,<1' ||
    python3 -m pip install -q --break-system-packages 'tokenizers>=0.15,<1'
fi
# parquet input of autohet tokenize (tests/cli_tokenize.sh): pyarrow (Debian 12 has no python3-pyarrow)
if ! python3 -c 'import pyarrow.parquet' 2>/dev/null; then
  python3 -m pip install -q 'pyarrow>=14' || python3 -m pip install -q --break-system-packages 'pyarrow>=14'
fi
