#!/usr/bin/env bash
# Install dependencies, build, and plan GPT-3 6.7B on a mixed A100/H800/H20
# cluster, comparing AutoHet with the Megatron and Whale-style baselines.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
mkdir -p out
./build/autohet plan --model gpt3-6.7b --cluster 2x8xA100-40G,1x8xH800,2x8xH20 \
  --global-batch 512 --seq 2048 --compare --json out/plan.json
echo
echo "plan document written to out/plan.json (schema: docs/plan-format.md)"
