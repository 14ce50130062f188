#!/usr/bin/env bash
# autohet run under a real Slurm (tests/tools/slurm_hosts.sh: slurmctld and one slurmd per network-namespace
# host, each with its own hostname and /dev/shm; root, as CI runs). The documented template
# scripts/autohet.sbatch is submitted with sbatch on 3 nodes; a 3-node plan (replica 0: n0 -> n1, replica 1:
# n2 with every layer) trains, and once it has passed step 5 the node of n1 is set down
# (`scontrol update nodename=H1 state=down`), as Slurm does with a node that fails: its tasks die, Open MPI
# takes the generation down, the job (--no-kill) shrinks to the other two nodes. autohet run must name the host
# that left the allocation (squeue), replan for the two others and finish every step there, with the
# parameters of the uninterrupted one-process run (1e-4 relative). If Slurm or the namespaces cannot be made
# the test fails with the reason.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/tools/netns_hosts.sh"
. "$(dirname "$0")/tools/slurm_hosts.sh"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
trap '[ -n "${SLURM_CONF:-}" ] && scancel --full --quiet "${JOB:-0}" 2>/dev/null; slurm_down; netns_down; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
# 20 steps: few enough that the parameters of the replanned run stay within 1e-4 of one process's (float32
# drift of other reduction orders: 2.6e-5 after 30 steps here; a lost or stale layer is off by 1e-2 or more);
# every step evaluates 40 validation batches, which changes no parameter but makes a step take long enough
# (~0.5 s here) that the loss at step 5 comes well before the last step
STEPS=20
ARGS=(--model tiny-gpt --data "$FIX/text" --steps "$STEPS" --seed 3 --eval-every 1 --eval-batches 40)

AUTOHET_DUMP_PARAMS="$TMP/ref.bin" timeout 300 "$BIN" train "${ARGS[@]}" --global-batch 8 --micro-batch 2 --seq 64 \
  >"$TMP/ref.out" 2>&1 || { tail -5 "$TMP/ref.out"; fail "one-process run"; }

NETNS_PRIVATE_SHM=1 netns_up 3 || { fail "cannot make network-namespace hosts (see above): root and iproute2 needed"; exit 1; }
slurm_up || { fail "cannot start Slurm on the namespace hosts (see above)"; exit 1; }
H0=${NETNS_HOSTS[0]} H1=${NETNS_HOSTS[1]} H2=${NETNS_HOSTS[2]}
RUN="$TMP/run"
# the site's settings the template reads: the binary, the hosts' network; the rest is autohet run's
JOB=$(AUTOHET="$BIN" AUTOHET_NET="$NETNS_SUBNET" OMPI_MCA_btl=tcp,self AUTOHET_DUMP_PARAMS="$TMP/slurm.bin" \
  sbatch --parsable --export=ALL --nodes=3 --output="$TMP/job.out" "$ROOT/scripts/autohet.sbatch" \
    --plan "$PLANS/tiny-3node-2x1.json" "${ARGS[@]}" --run-dir "$RUN" --log "$TMP/run.log" --report "$TMP/run.json" \
    2>"$TMP/sbatch.err") || { cat "$TMP/sbatch.err"; fail "sbatch"; exit 1; }
JOB=${JOB%%;*}
echo "Slurm job $JOB on $H0 $H1 $H2"
# what it waits for: the run's log past step 5 (at most 240 s), then the node of n1 goes down
step=0
for ((t = 0; t < 960 && step < 5; t++)); do
  step=$(jq -s 'map(.step) | max // 0' "$TMP/run.log" 2>/dev/null || echo 0)
  squeue -h -j "$JOB" 2>/dev/null | grep -q . || break
  [ "$step" -ge 5 ] 2>/dev/null || { step=0; sleep 0.25; }
done
[ "$step" -ge 5 ] || { cat "$TMP/job.out"; fail "the run did not reach step 5 under Slurm"; exit 1; }
scontrol update nodename="$H1" state=down reason=autohet-test || fail "scontrol: cannot set $H1 down"
echo "at step $step: $H1 set down"
# what it waits for: the job to end (at most 300 s)
for ((t = 0; t < 1200; t++)); do
  squeue -h -j "$JOB" 2>/dev/null | grep -q . || break
  sleep 0.25
done
squeue -h -j "$JOB" 2>/dev/null | grep -q . && { scancel "$JOB"; fail "the job did not end in 300 s"; }
grep -q "autohet run: finished $STEPS steps" "$TMP/job.out" || { tail -30 "$TMP/job.out"; fail "the run did not finish"; }
jq -e --argjson s "$STEPS" '.completed and .final_step == $s' "$TMP/run.json" >/dev/null ||
  fail "report: not completed: $(jq -c '{completed, final_step}' "$TMP/run.json")"
# the loss: the host that left the allocation, named from Slurm, nothing committed lost
jq -e --arg h "$H1" '.recoveries | length == 1 and (.[0] | (.cause | startswith("slurm: lost n1 (host " + $h + ")"))
  and .steps_lost <= 1 and .bytes_by_tier.cloud == 0)' "$TMP/run.json" >/dev/null ||
  { jq -c .recoveries "$TMP/run.json"; fail "recovery record"; }
# generation 1 on the two nodes left, the lost one never again
[ -s "$RUN/rankfile-1.txt" ] || fail "generation 1 has no rankfile"
grep -q "=$H1 " "$RUN/rankfile-1.txt" && fail "generation 1 puts a rank on $H1: $(cat "$RUN/rankfile-1.txt")"
[ "$(cut -d= -f2 "$RUN/rankfile-1.txt" | cut -d' ' -f1 | sort -u | paste -sd' ')" = "$(printf '%s\n' "$H0" "$H2" | sort | paste -sd' ')" ] ||
  fail "generation 1 is not on $H0 and $H2: $(cat "$RUN/rankfile-1.txt")"
out=$("$CMP" "$TMP/ref.bin" "$TMP/slurm.bin" 1e-4) || fail "parameters differ from the uninterrupted run: $out"
echo "sbatch on 3 Slurm nodes, $H1 down at step $step, against one process: parameters $out"
# bench/slurm_bench.sh keeps the report of each run (AUTOHET_SLURM_REPORT=FILE)
[ -n "${AUTOHET_SLURM_REPORT:-}" ] && cp "$TMP/run.json" "$AUTOHET_SLURM_REPORT"
[ "$fails" = 0 ] || { echo "--- job output"; grep -v "^step" "$TMP/job.out" | tail -30; }
exit $((fails > 0))
