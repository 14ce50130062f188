#!/usr/bin/env bash
# The prepared check of the CUDA backend for one session on a GPU machine (docs/cuda.md): binaries
# (the pack made here by tests/gpu/device_pack.sh, or a Release build with CUDA on there), the GPU
# tests (every op against the CPU backend with AUTOHET_CUDA_SYNC_CHECK=1, 10 training steps of
# tiny-gpt and tiny-llama), `autohet train --device cuda` against --device cpu, then GPT-2 124M
# (vocab 50257, seq 1024) tokens/s and MFU in fp32 and TF32, and a GPT-3 1.3B shape in TF32; one
# summary table. Finishes within about 8 minutes (every step has a time cap and the whole script a
# budget, a step past the budget is reported "not run"). Writes summary.txt, env.txt, ops.log,
# train.log, cli.log and bench.log under $OUT (or a temporary directory). Exit 0 only when every
# check that ran passed and the GPU tests ran; else 1, with the reason on the last line.
#
# On the device machine (whose image has nvcc and CMake but not this project's Debian packages):
#   here:   bash tests/gpu/device_pack.sh
#   device: run(command="bash tests/gpu/device_check.sh --pack build-gpu/pack", carry=["build-gpu/pack"],
#               timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUDGET=${DEVICE_CHECK_BUDGET_S:-460}
OUTD=${OUT:-$(mktemp -d)}
mkdir -p "$OUTD"
SUMMARY="$OUTD/summary.txt"
: >"$SUMMARY"
rows=()
failed=0
row() { rows+=("$(printf '%-34s %-10s %s' "$1" "$2" "$3")"); [ "$2" = FAIL ] && failed=$((failed + 1)); return 0; }
table() {
  { echo "== device_check: $(date -u +%FT%TZ), ${SECONDS}s, GPU: ${GPU_NAME:-unknown}"
    printf '%-34s %-10s %s\n' check result detail
    printf '%s\n' "${rows[@]}"; } | tee -a "$SUMMARY"
}
die() { row "abort" FAIL "$*"; table; echo "device_check: FAILED: $*" | tee -a "$SUMMARY"; exit 1; }
# seconds a step may run: its cap, or what is left of the budget
cap() { local left=$((BUDGET - SECONDS)); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }

# ---- the machine
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; } \
  >"$OUTD/env.txt" 2>&1 || echo "nvidia-smi failed" >>"$OUTD/env.txt"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
grep -m1 'model name' /proc/cpuinfo >>"$OUTD/env.txt" 2>/dev/null
# dense peaks (TFLOP/s) for MFU: fp32 (no tensor cores) and TF32 tensor cores
case "$GPU_NAME" in
  *H200* | *H100*SXM* | *H100\ 80GB\ HBM3*) PEAK_FP32=67; PEAK_TF32=494.7 ;;
  *H100*) PEAK_FP32=51; PEAK_TF32=378 ;;
  *A100*) PEAK_FP32=19.5; PEAK_TF32=156 ;;
  *) PEAK_FP32=0; PEAK_TF32=0 ;;
esac

# ---- binaries
if [ "${1:-}" = "--pack" ]; then
  [ -f "${2:-}/pack.tar.xz" ] || die "--pack ${2:-}: no pack.tar.xz there (make it with tests/gpu/device_pack.sh)"
  PK=$(mktemp -d)
  tar -C "$PK" -xJf "$2/pack.tar.xz" || die "cannot unpack $2/pack.tar.xz"
  BIN="$PK/pack/bin"
  export LD_LIBRARY_PATH="$PK/pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  row "binaries" ok "pack of commit $(tr '\n' ' ' <"$PK/pack/commit")"
else
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DAUTOHET_CUDA=ON >"$OUTD/build.log" 2>&1 \
    || die "configure failed: $(grep -m1 -i error "$OUTD/build.log") (this image lacks the project's packages? use --pack)"
  timeout "$(cap 240)" cmake --build build-gpu -j"$(nproc)" --target test_gpu_ops test_gpu_train gpu_bench autohet \
    >>"$OUTD/build.log" 2>&1 || die "build failed: $(grep -m1 -E 'error|Error' "$OUTD/build.log")"
  BIN="$ROOT/build-gpu"
  row "binaries" ok "built here in ${SECONDS}s"
fi
# cuBLAS is the device's: where the loader does not find it, look in the toolkit and in Python's wheels
if ldd "$BIN/test_gpu_ops" | grep -q 'libcublas.*not found'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
    $(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null); do
    [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d" && break
  done
fi
missing=$(ldd "$BIN/test_gpu_ops" | awk '/not found/ { print $1 }' | tr '\n' ' ')
[ -z "$missing" ] || die "libraries not found on this machine: $missing"
ldd "$BIN/test_gpu_ops" >>"$OUTD/env.txt"

# ---- GPU tests
AUTOHET_CUDA_SYNC_CHECK=1 timeout "$(cap 60)" "$BIN/test_gpu_ops" >"$OUTD/ops.log" 2>&1
rc=$?
case $rc in
  0) row "ops vs cpu (14 groups)" ok "$(grep -c ' ok$' "$OUTD/ops.log") ok" ;;
  77) die "test_gpu_ops: $(tail -1 "$OUTD/ops.log")" ;;
  *) row "ops vs cpu (14 groups)" FAIL "exit $rc: $(grep -E 'FAIL|failed' "$OUTD/ops.log" | head -3 | tr '\n' ';' | cut -c1-160)" ;;
esac
timeout "$(cap 90)" "$BIN/test_gpu_train" >"$OUTD/train.log" 2>&1
rc=$?
worst=$(awk '/ loss cpu / { if ($NF != "ok" || $(NF-1) + 0 > w) w = $(NF-1) + 0 } END { printf "%.3g", w }' "$OUTD/train.log")
[ $rc -eq 0 ] && row "train 10 steps (gpt, llama)" ok "worst loss rel $worst" \
  || row "train 10 steps (gpt, llama)" FAIL "exit $rc: $(grep FAIL "$OUTD/train.log" | head -2 | tr '\n' ';' | cut -c1-160)"

# ---- the CLI: --device cuda against --device cpu (needs Open MPI's libraries, packed or there)
clim=$(ldd "$BIN/autohet" | awk '/not found/ { print $1 }' | tr '\n' ' ')
if [ -n "$clim" ]; then
  row "autohet train --device cuda" "not run" "missing $clim"
elif [ $((BUDGET - SECONDS)) -lt 60 ]; then
  row "autohet train --device cuda" "not run" "time budget"
else
  A=(train --model tiny-gpt --data "$ROOT/tests/fixtures/text" --steps 5 --seed 2 --eval-every 0 --global-batch 4
    --micro-batch 2 --seq 64)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=4
  timeout 30 "$BIN/autohet" "${A[@]}" --device cpu --log "$OUTD/cli-cpu.jsonl" >"$OUTD/cli.log" 2>&1
  rc1=$?
  timeout 30 "$BIN/autohet" "${A[@]}" --device cuda --log "$OUTD/cli-cuda.jsonl" >>"$OUTD/cli.log" 2>&1
  rc2=$?
  if [ $rc1 -ne 0 ]; then
    row "autohet train --device cuda" "not run" "the cpu run could not start here (exit $rc1: $(tail -1 "$OUTD/cli.log" | cut -c1-100))"
  elif [ $rc2 -ne 0 ]; then
    row "autohet train --device cuda" FAIL "exit $rc2: $(tail -1 "$OUTD/cli.log" | cut -c1-120)"
  else
    cmp=$(python3 - "$OUTD/cli-cpu.jsonl" "$OUTD/cli-cuda.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
rel = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) == 5 else float("inf")
print(("ok" if rel <= 1e-4 else "FAIL") + " worst loss rel %.3g over %d steps" % (rel, len(b)))
PY
)
    row "autohet train --device cuda" "${cmp%% *}" "${cmp#* }"
  fi
  cat "$OUTD"/cli-*.jsonl >>"$OUTD/cli.log" 2>/dev/null
  rm -f "$OUTD"/cli-*.jsonl
fi

# ---- benchmarks: MODEL SEQ MB STEPS MATH PEAK CAP
bench() {
  local name="$1 $5 seq $2 mb $3" t
  t=$(cap "$7")
  if [ "$t" -lt 30 ]; then row "$name" "not run" "time budget"; return; fi
  echo "== $name" >>"$OUTD/bench.log"
  AUTOHET_BACKEND=cuda AUTOHET_CUDA_MATH=$5 timeout "$t" "$BIN/gpu_bench" "$1" "$2" "$3" "$4" "$6" >"$OUTD/b.txt" 2>&1
  local rc=$?
  cat "$OUTD/b.txt" >>"$OUTD/bench.log"
  local line
  line=$(grep '^bench ' "$OUTD/b.txt")
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    row "$name" FAIL "exit $rc: $(tail -1 "$OUTD/b.txt" | cut -c1-120)"
  else
    row "$name" ok "$(echo "$line" | awk -v p="$6" '{ for (i = 1; i < NF; i++) v[$i] = $(i+1);
      printf "%.0f tok/s, %.3f s/step, MFU %s, loss %s -> %s", v["tokens_per_s"], v["step_s"],
        (p > 0 ? sprintf("%.1f%% of %s TF", 100 * v["mfu"], p) : "n/a"), v["loss0"], v["lossN"] }')"
  fi
  rm -f "$OUTD/b.txt"
}
bench gpt2-124m 1024 8 12 fp32 "$PEAK_FP32" 110
bench gpt2-124m 1024 8 12 tf32 "$PEAK_TF32" 90
bench gpt3-1.3b 1024 2 6 tf32 "$PEAK_TF32" 120

table
if [ $failed -gt 0 ]; then
  echo "device_check: FAILED: $failed check(s) failed (details in $OUTD)" | tee -a "$SUMMARY"
  exit 1
fi
echo "device_check: ok" | tee -a "$SUMMARY"
