#!/usr/bin/env bash
# `autohet simulate` against measured iteration times of real GPU runs (issue #30): every run of every set under
# each DATA directory (default ../shared/data/measured-runs and bench/measured: SET/runs.json with each run's plan and measured_iteration_s, the
# set's *-devices.json and *-profile.json), simulated with the set's devices and profile; a markdown table per set
# (run, parallel degrees, measured, simulated, closed form, error), its mean |error| and worst run, and the mean
# signed error by pipeline depth (where the model is off, not only how much); then the set calibrated (autohet
# calibrate: in sample, left out one at a time, and fitted on the small runs to predict the large ones); then each
# set predicted by the calibration of another set of the same devices (another model: held out by model) and of
# another set of the same model (other GPUs and links: held out by GPUs). A set with a *-links.json (a comm
# profile: measured links between its hosts) is simulated and calibrated with --comm-profile.
#   bench/measured_bench.sh [--build DIR] [--data DIR] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build DATA="../shared/data/measured-runs bench/measured" OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) B="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: bench/measured_bench.sh [--build DIR] [--data DIR] [--out FILE]" >&2; exit 2 ;;
  esac
done
for d in $DATA; do
  [ -d "$d" ] || { echo "measured_bench: $d: no measured runs (see ../shared/data/README.md)" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# A set's calibration (autohet calibrate): the fit, every run in sample and left out (leave-one-out), and a split
# by size: fitted on the runs of at most 8 nodes, the larger runs predicted.
# The set's files are ARGS/SHOWN (set_args).
calibrated() {
  local set="$1"
  "$B/autohet" calibrate "$set/runs.json" "${ARGS[@]}" --overlap-dp --out "$TMP/cal.json" \
    --json "$TMP/cal-runs.json" >"$TMP/cal.txt" 2>"$TMP/err" || { echo "measured_bench: calibrate: $(cat "$TMP/err")" >&2; exit 1; }
  cp "$TMP/cal.json" "$TMP/cal-$(basename "$set").json"
  echo "**Calibrated** (\`autohet calibrate runs.json $SHOWN --overlap-dp\`,"
  echo "docs/calibration.md): $(sed -n 1p "$TMP/cal.txt" | sed 's/.*fitted in/fitted in/')."
  echo
  echo '```'
  sed -n '2,/^$/p' "$TMP/cal.txt" | sed '/^$/d'
  echo '```'
  echo
  echo "| run | measured s | as is | calibrated (in sample) | calibrated (left out: fitted on the other runs) |"
  echo "|---|---:|---:|---:|---:|"
  jq -r '.runs[] | [.run, .measured_s, .simulated_s, .fitted_s, .left_out_s] | @tsv' "$TMP/cal-runs.json" |
    awk -F'\t' '{ printf "| %s | %.4f | %+.1f%% | %+.1f%% | %+.1f%% |\n", $1, $2, ($3 / $2 - 1) * 100, ($4 / $2 - 1) * 100,
                   ($5 / $2 - 1) * 100 }'
  echo
  jq -r '.summary | [.as_is.mean_abs_error, .as_is.worst_abs_error, .in_sample.mean_abs_error, .in_sample.worst_abs_error,
                     .left_out.mean_abs_error, .left_out.worst_abs_error] | @tsv' "$TMP/cal-runs.json" |
    awk -F'\t' '{ printf "**Mean |error| (worst run): as is %.1f%% (%.1f%%); calibrated, in sample %.1f%% (%.1f%%); left out one at a time %.1f%% (%.1f%%).**\n",
                   100 * $1, 100 * $2, 100 * $3, 100 * $4, 100 * $5, 100 * $6 }'
  echo
  # by size: the runs of <= 8 nodes fit, the larger ones are predicted
  # nodes: the field, or (../shared's sets) "gpus", which counts their nodes
  jq --arg d "$(realpath "$set")" '[.[] | select((.nodes // .gpus) <= 8) | .plan = $d + "/" + .plan]' "$set/runs.json" \
    >"$TMP/small.json"
  local n_small n_big
  n_small=$(jq length "$TMP/small.json")
  n_big=$(jq '[.[] | select((.nodes // .gpus) > 8)] | length' "$set/runs.json")
  if [ "$n_small" -gt 0 ] && [ "$n_big" -gt 0 ]; then
    "$B/autohet" calibrate "$TMP/small.json" "${ARGS[@]}" --overlap-dp --no-validate \
      --out "$TMP/cal-small.json" --quiet 2>"$TMP/err" \
      || { echo "measured_bench: calibrate (small runs): $(cat "$TMP/err")" >&2; exit 1; }
    : >"$TMP/big.tsv"
    for ((i = 0; i < $(jq length "$set/runs.json"); i++)); do
      jq -r ".[$i] | select((.nodes // .gpus) > 8) | [.plan, .measured_iteration_s] | @tsv" "$set/runs.json" >"$TMP/run"
      [ -s "$TMP/run" ] || continue
      IFS=$'\t' read -r plan meas <"$TMP/run"
      "$B/autohet" simulate "$set/$plan" "${ARGS[@]}" --overlap-dp --calibration "$TMP/cal-small.json" \
        --json "$TMP/sim.json" --quiet >/dev/null 2>"$TMP/err" || { echo "measured_bench: $plan: $(cat "$TMP/err")" >&2; exit 1; }
      printf '%s\t%s\t%s\n' "$(basename "$plan" .plan.json)" "$meas" "$(jq .iteration_time_s "$TMP/sim.json")" >>"$TMP/big.tsv"
    done
    echo "**Held out by size**: calibrated on the $n_small runs of at most 8 nodes, the $n_big larger runs predicted:"
    awk -F'\t' '{ e = ($3 / $2 - 1) * 100; a = e < 0 ? -e : e; t += a; if (a > mx) mx = a; printf "%s%s %+.1f%%", (NR > 1 ? ", " : ""), $1, e }
      END { printf ". **Mean |error| %.1f%%, worst %.1f%%.**\n", t / NR, mx }' "$TMP/big.tsv" | sed 's/clariden_OPT-350_//g'
    echo
  fi
}

# A set's files: its devices, profile and (where it has one) comm profile, as simulate/calibrate arguments
# (ARGS), and the same with the files' names only, to show (SHOWN).
set_args() {
  local set="$1" links k
  ARGS=(--devices "$(ls "$set"/*-devices.json | head -1)" --profile "$(ls "$set"/*-profile.json | head -1)")
  links=$(ls "$set"/*-links.json 2>/dev/null | head -1 || true)
  [ -z "$links" ] || ARGS+=(--comm-profile "$links")
  local shown=("${ARGS[@]}")
  for ((k = 1; k < ${#shown[@]}; k += 2)); do shown[k]=$(basename "${shown[k]}"); done
  SHOWN="${shown[*]}"
}

# Held out: every set simulated with the calibration of another set of the same devices (another model on the
# same GPUs and runtime: held out by model), as autohet applies it (the device scales are the other model's
# profile's, so only the pipeline terms carry over) and with its device scales forced onto this profile; and with
# the calibration of another set of the same model on other GPUs (held out by GPUs: its device scales name other
# GPUs, and its link fractions, fitted on datasheet links, do not apply to measured ones).
held_out() {
  local b a name kind pm_a pm_b
  for b in "${SETS[@]}"; do
    for a in "${SETS[@]}"; do
      [ "$a" != "$b" ] || continue
      pm_a=$(jq -r .model "$(ls "$a"/*-profile.json | head -1)")
      pm_b=$(jq -r .model "$(ls "$b"/*-profile.json | head -1)")
      if cmp -s "$(ls "$a"/*-devices.json | head -1)" "$(ls "$b"/*-devices.json | head -1)"; then
        kind=model
      elif [ "$pm_a" = "$pm_b" ]; then
        kind=GPUs
      else
        continue
      fi
      set_args "$b"
      jq --arg m "$pm_b" '.profile_model = $m' "$TMP/cal-$(basename "$a").json" >"$TMP/forced.json"
      echo "### $(basename "$b") predicted by the calibration of $(basename "$a") (held out by $kind)"
      echo
      if [ $kind = model ]; then
        echo "| run | measured s | as is | $(basename "$a")'s calibration (its pipeline terms) | with its device scales forced |"
        echo "|---|---:|---:|---:|---:|"
      else
        echo "| run | measured s | as is | $(basename "$a")'s calibration (its pipeline latency) |"
        echo "|---|---:|---:|---:|"
      fi
      : >"$TMP/xrows"
      for ((i = 0; i < $(jq length "$b/runs.json"); i++)); do
        IFS=$'\t' read -r plan meas ex < <(jq -r ".[$i] | [.plan, .measured_iteration_s, .exclude // \"-\"] | @tsv" "$b/runs.json")
        name=$(basename "$plan" .plan.json)
        t=()
        cals=(none "$TMP/cal-$(basename "$a").json")
        [ $kind = model ] && cals+=("$TMP/forced.json") # other GPUs: the forced column is not shown
        for cal in "${cals[@]}"; do
          extra=()
          [ "$cal" != none ] && extra=(--calibration "$cal")
          "$B/autohet" simulate "$b/$plan" "${ARGS[@]}" --overlap-dp "${extra[@]}" \
            --json "$TMP/sim.json" --quiet >/dev/null 2>"$TMP/err" \
            || { echo "measured_bench: $b/$plan: $(cat "$TMP/err")" >&2; exit 1; }
          t+=("$(jq .iteration_time_s "$TMP/sim.json")")
        done
        [ $kind = model ] || t+=("-")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$meas" "${t[@]}" "$ex" >>"$TMP/xrows"
      done
      awk -F'\t' -v k=$kind '{ printf "| %s%s | %.4f | %+.1f%% | %+.1f%% |", $1, ($6 != "-" ? " (excluded)" : ""), $2,
                    ($3 / $2 - 1) * 100, ($4 / $2 - 1) * 100; if (k == "model") printf " %+.1f%% |", ($5 / $2 - 1) * 100; printf "\n" }' "$TMP/xrows"
      echo
      awk -F'\t' -v k=$kind '$6 == "-" { N++; for (c = 3; c <= (k == "model" ? 5 : 4); c++) { e = $c / $2 - 1; e = e < 0 ? -e : e; t[c] += e; if (e > m[c]) m[c] = e } }
        END { NR = N; printf "**Mean |error| (worst run) over the runs not excluded: as is %.1f%% (%.1f%%); the other set'"'"'s calibration, as applied %.1f%% (%.1f%%)",
              100 * t[3] / NR, 100 * m[3], 100 * t[4] / NR, 100 * m[4]
              if (k == "model") printf "; with its device scales forced %.1f%% (%.1f%%)", 100 * t[5] / NR, 100 * m[5]; printf ".**\n" }' "$TMP/xrows"
      echo
    done
  done
}

SETS=()
report() {
  for set in $(for d in $DATA; do ls -d "$d"/*/; done); do
    set=${set%/}
    [ -f "$set/runs.json" ] || continue
    set_args "$set"
    n=$(jq length "$set/runs.json")
    : >"$TMP/rows"
    for ((i = 0; i < n; i++)); do
      jq -r ".[$i] | [.plan, .measured_iteration_s, .pp, .dp, .tp, .global_batch, .micro_batch, .exclude // \"-\"] | @tsv" \
        "$set/runs.json" >"$TMP/run"
      IFS=$'\t' read -r plan meas pp dp tp gb mb ex <"$TMP/run"
      nodes=$(jq -r '.cluster.nodes | "\(length) x \(map(.gpus) | unique | map(tostring) | join("/"))"' "$set/$plan")
      "$B/autohet" simulate "$set/$plan" "${ARGS[@]}" --overlap-dp --json "$TMP/sim.json" --quiet \
        >/dev/null 2>"$TMP/err" || { echo "measured_bench: $set/$plan: $(cat "$TMP/err")" >&2; exit 1; }
      jq -r --arg p "$(basename "$plan" .plan.json)" --arg m "$meas" --arg g "$nodes" --arg pp "$pp" --arg dp "$dp" \
        --arg tp "$tp" --arg gb "$gb" --arg mb "$mb" --arg ex "$ex" \
        '[$p, $g, $pp, $dp, $tp, $gb, $mb, $m, .iteration_time_s, (.closed_form_s // .closed_form_iteration_s // "-"), $ex]
         | @tsv' "$TMP/sim.json" >>"$TMP/rows"
    done
    echo "### $(basename "$set") ($n runs)"
    echo
    echo "\`autohet simulate PLAN $SHOWN --overlap-dp\` (1F1B; the"
    echo "gradient buckets' all-reduces overlapped with the backward, as PyTorch's DDP runs them) against each"
    echo "run's measured iteration time; error = simulated / measured - 1."
    echo
    echo "| run | nodes x GPUs | PP | DP | TP | global batch | micro-batch | measured s | simulated s | error |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    awk -F'\t' '{ printf "| %s%s | %s | %s | %s | %s | %s | %s | %.4f | %.4f | %+.1f%% |\n", $1,
                  ($11 != "-" ? " (excluded: " $11 ")" : ""), $2, $3, $4, $5, $6, $7, $8, $9, ($9 / $8 - 1) * 100 }' "$TMP/rows"
    echo
    awk -F'\t' '$11 == "-" { N++; e = ($9 / $8 - 1) * 100; a = e < 0 ? -e : e; t += a; if (a > mx) { mx = a; w = $1 }
                  s[$3] += e; c[$3]++ }
      END { printf "**Mean |error| %.1f%%, worst %.1f%% (%s)%s.** Mean signed error by pipeline depth:", t / N, mx, w,
            (N < NR ? ", over the " N " runs not excluded" : "")
            for (p in c) printf " PP %s: %+.1f%% (%d runs);", p, s[p] / c[p], c[p]; printf "\n" }' "$TMP/rows"
    echo
    calibrated "$set"
    SETS+=("$set")
  done
  held_out
  shipped
}

# The calibration that ships (calibrations/README.md) against this run's fit of the set it comes from: the same
# terms, or a line saying it is stale (refit with calibrations/fit.sh)
shipped() {
  local f=calibrations/sailor-gh200.calib.json fresh="$TMP/cal-sailor-gh200-opt350.json"
  [ -f "$fresh" ] || return 0
  local terms='{devices, pipeline, profile_model}'
  echo "### The shipped calibration"
  echo
  if [ "$(jq -cS "$terms" "$f")" = "$(jq -cS "$terms" "$fresh")" ]; then
    echo "\`$f\` holds the terms fitted above on sailor-gh200-opt350 (the same to the last digit)."
  else
    echo "**\`$f\` differs from the fit above on sailor-gh200-opt350: refit it with \`calibrations/fit.sh\`.**"
  fi
  echo
}
if [ -n "$OUT" ]; then report >"$OUT"; else report; fi
