#!/usr/bin/env bash
# Refits the calibrations shipped in this folder from the measured runs they come from (calibrations/README.md):
#   calibrations/fit.sh [--build DIR] [--data DIR]
# DIR of --data: the folder holding sailor-gh200-opt350/ (default ../shared/data/measured-runs).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build DATA=../shared/data/measured-runs
while [ $# -gt 0 ]; do
  case "$1" in
    --build) B="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    *) echo "usage: calibrations/fit.sh [--build DIR] [--data DIR]" >&2; exit 2 ;;
  esac
done
SET="$DATA/sailor-gh200-opt350"
[ -f "$SET/runs.json" ] || { echo "calibrations/fit.sh: $SET/runs.json: no such file (--data)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$B/autohet" calibrate "$SET/runs.json" --devices "$SET/gh96-devices.json" --profile "$SET/gh96-opt350-profile.json" \
  --overlap-dp --out "$TMP/cal.json" --quiet
jq '.source = "autohet calibrate sailor-gh200-opt350/runs.json --devices gh96-devices.json --profile gh96-opt350-profile.json --overlap-dp: 15 runs of OPT-350M on GH200 nodes under Sailor'"'"'s runtime (calibrations/README.md)"' \
  "$TMP/cal.json" >calibrations/sailor-gh200.calib.json
echo "wrote calibrations/sailor-gh200.calib.json"
