#!/usr/bin/env bash
# Goodput under faults without notice (issue #26): the 38M-parameter GPT of bench/recovery_bench.sh, 2
# data-parallel replicas of 2 stages on 4 virtual nodes, trained for STEPS steps twice under `autohet run`:
# once undisturbed, once with every rank of a random live node killed with SIGKILL (from outside, as a
# reclaim without notice) each time another EVERY steps have been logged. Goodput = steps trained per
# second of wall time; the ratio says what the faults cost, split into time spent recovering (detection +
# replan + relaunch + restore), steps lost and the slower plans of the surviving nodes.
# Usage: bench/goodput_bench.sh BIN OUT.md   (GOODPUT_STEPS, GOODPUT_EVERY override 150 and 50)
set -uo pipefail
BIN="$1"
OUT="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
STEPS=${GOODPUT_STEPS:-150}
EVERY=${GOODPUT_EVERY:-50}
ARGS=(--plan "$HERE/plans/gpt-38m-4node.json" --model "$HERE/gpt-38m-bytes.json" --data "$HERE/../tests/fixtures/text"
  --steps "$STEPS" --seed 1 --eval-every 0 --ckpt-every 10)

last_step() { [ -s "$1" ] && jq -s 'map(.step) | max // 0' "$1" 2>/dev/null || echo 0; }

run_clean() {
  timeout 3600 "$BIN" run "${ARGS[@]}" --run-dir "$TMP/clean.run" --log "$TMP/clean.log" --report "$TMP/clean.json" \
    >"$TMP/clean.out" 2>&1 || { tail -20 "$TMP/clean.out"; echo "goodput_bench: clean run failed" >&2; exit 1; }
}

run_faults() {
  local run="$TMP/faults.run" next=$EVERY
  timeout 3600 "$BIN" run "${ARGS[@]}" --run-dir "$run" --log "$TMP/faults.log" --report "$TMP/faults.json" \
    >"$TMP/faults.out" 2>&1 &
  local job=$!
  while kill -0 $job 2>/dev/null; do
    sleep 0.2
    [ "$next" -lt "$STEPS" ] || continue
    local g
    g=$(ls -d "$run"/pids-* 2>/dev/null | sed 's/.*pids-//' | sort -n | tail -1)
    [ -n "$g" ] && [ "$(last_step "$run/gen-$g.log")" -ge "$next" ] || continue
    # a random node that has ranks in the running generation: SIGKILL every one of them
    local node
    node=$(cut -d' ' -f2 "$run/pids-$g"/rank-* 2>/dev/null | sort -u | shuf -n 1)
    [ -n "$node" ] || continue
    for f in "$run/pids-$g"/rank-*; do
      read -r pid n _ <"$f" && [ "$n" = "$node" ] && kill -9 "$pid" 2>/dev/null
    done
    echo "goodput_bench: killed node $node after step $next" >&2
    next=$((next + EVERY))
  done
  wait $job || { tail -20 "$TMP/faults.out"; echo "goodput_bench: run with faults failed" >&2; exit 1; }
}

run_clean
run_faults
CPU=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
{
  echo "Goodput: 38M-parameter GPT, 2 replicas x 2 stages on 4 virtual nodes, $STEPS steps, memory snapshot every"
  echo "step, disk + cloud every 10; with faults: every rank of a random live node killed (SIGKILL) each $EVERY steps."
  echo "$CPU, 2 cores shared by all ranks; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| run | wall s | steps/s | goodput vs undisturbed | recoveries | steps lost | recovering s | mean step s (first / last generation) |"
  echo "|---|---|---|---|---|---|---|---|"
  for r in clean faults; do
    jq -r --arg name "$r" --slurpfile c "$TMP/clean.json" --slurpfile log "$TMP/$r.log" '
      ($c[0].final_step / $c[0].wall_s) as $ref
      | ([$log[] | .step_s]) as $s
      | [$name, (.wall_s | . * 10 | round / 10 | tostring), (.final_step / .wall_s | . * 1000 | round / 1000 | tostring),
         ((.final_step / .wall_s) / $ref * 100 | . * 10 | round / 10 | tostring) + "%",
         (.recoveries | length | tostring), ([.recoveries[].steps_lost] | add // 0 | tostring),
         ([.recoveries[].seconds] | add // 0 | . * 100 | round / 100 | tostring),
         (($s[0:20] | add / length | . * 1000 | round / 1000 | tostring) + " / " +
          ($s[-20:] | add / length | . * 1000 | round / 1000 | tostring))] | "| " + join(" | ") + " |"' "$TMP/$r.json"
  done
  echo
  echo "| fault | cause | detection s | replan s | relaunch s | restore s | steps lost | memory / peer / cloud MB |"
  echo "|---|---|---|---|---|---|---|---|"
  jq -r '.recoveries | to_entries[] | .value as $r | [(.key + 1 | tostring), $r.cause,
      ($r.detection_s | . * 1000 | round / 1000 | tostring), ($r.replan_s | . * 1000 | round / 1000 | tostring),
      ($r.relaunch_s | . * 1000 | round / 1000 | tostring), ($r.restore_s | . * 1000 | round / 1000 | tostring),
      ($r.steps_lost | tostring),
      ($r.bytes_by_tier | [.memory, .peer, .cloud] | map(. / 1e6 | round | tostring) | join(" / "))]
      | "| " + join(" | ") + " |"' "$TMP/faults.json"
} >"$OUT"
cat "$OUT"
