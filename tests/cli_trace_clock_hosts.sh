#!/usr/bin/env bash
# One clock for every rank where the clocks really differ (docs/analyze.md, "Clocks"): a traced 4-rank 2x2
# pipeline run across 4 network-namespace hosts (tests/tools/netns_hosts.sh; root, as CI runs), TCP between
# them, where host 1 runs its ranks in a Linux time namespace whose CLOCK_MONOTONIC is 1000 s ahead
# (`unshare --time --monotonic 1000`, inside the rsh agent that starts Open MPI's daemon there). The trace
# records rank 1's offset as 1000 s within its own residual bound (the half round trip of the best
# ping-pong; the true offset is exactly 1000 s) and the others' as 0 within theirs, and it is causally ordered
# (analyze, jq on the Chrome trace, otf2-print on the OTF2 archive with its ClockOffset definitions) — while
# the same events on each rank's own clock are not. If the namespaces cannot be made the test fails with the
# reason.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/tools/netns_hosts.sh"
. "$(dirname "$0")/tools/clock_checks.sh"
trap 'netns_down; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
SKEW=1000

unshare --time --monotonic "$SKEW" --fork true 2>"$TMP/unshare.err" \
  || { fail "unshare --time --monotonic $SKEW: $(cat "$TMP/unshare.err") (needs root and Linux time namespaces)"; exit 1; }
netns_up 4 || { fail "cannot make network-namespace hosts (see above): this test needs root and iproute2"; exit 1; }
printf '%s slots=1\n' "${NETNS_HOSTS[@]}" >"$TMP/hostfile"
"$BIN" hosts --plan "$PLANS/tiny-4node-2x2.json" --hostfile "$TMP/hostfile" --rankfile "$TMP/rankfile" \
  --plan-out "$TMP/plan.json" >"$TMP/hosts.out" 2>&1 || { cat "$TMP/hosts.out"; fail "autohet hosts"; exit 1; }
grep -q "^rank 1=${NETNS_HOSTS[1]} " "$TMP/rankfile" || fail "rank 1 is not on host 1: $(cat "$TMP/rankfile")"

# the rsh agent: host 1's daemon (and so its ranks) in a time namespace SKEW seconds ahead
cat >"$TMP/agent" <<EOF
#!/usr/bin/env bash
a=("\$@"); i=0
while [ \$i -lt \${#a[@]} ] && [ "\${a[\$i]#-}" != "\${a[\$i]}" ]; do i=\$((i + 1)); done
[ "\${a[\$i]:-}" = "${NETNS_HOSTS[1]}" ] && exec unshare --time --monotonic $SKEW --fork "$NETNS_AGENT" "\$@"
exec "$NETNS_AGENT" "\$@"
EOF
chmod +x "$TMP/agent"
"$TMP/agent" "${NETNS_HOSTS[1]}" cat /proc/self/timens_offsets >"$TMP/off1" 2>&1
grep -Eq "^monotonic +$SKEW +0$" "$TMP/off1" || fail "host 1's time namespace: $(cat "$TMP/off1")"
"$TMP/agent" "${NETNS_HOSTS[0]}" cat /proc/self/timens_offsets >"$TMP/off0" 2>&1
grep -Eq "^monotonic +0 +0$" "$TMP/off0" || fail "host 0's time namespace: $(cat "$TMP/off0")"

NET=(--mca plm_rsh_agent "$TMP/agent" --mca oob_tcp_if_include "$NETNS_SUBNET" --mca btl tcp,self
  --mca btl_tcp_if_include "$NETNS_SUBNET" --mca oob_tcp_dynamic_ipv4_ports "$NETNS_PORTS"
  --mca btl_tcp_port_min_v4 46200 --mca btl_tcp_port_range_v4 100)
timeout 300 mpirun -np 4 --rankfile "$TMP/rankfile" "${NET[@]}" "$BIN" train --model tiny-gpt --data "$FIX/text" \
  --steps 5 --seed 3 --global-batch 8 --micro-batch 2 --seq 64 --plan "$TMP/plan.json" --trace "$TMP/t.json" \
  >"$TMP/train.out" 2>&1 || { tail -5 "$TMP/train.out"; fail "traced run across the hosts"; exit 1; }

clock_checks "$TMP/t.json" "4 namespace hosts, host 1 +$SKEW s" 1e-3
# the measured offsets: rank 1's is SKEW s, the others' 0, each within its residual bound (+ 0.1 us of reading)
jq -e --argjson s "$SKEW" '.otherData.clock.ranks as $r | ($r | length) == 4
       and all($r[]; ((.offset_s - (if .rank == 1 then $s else 0 end)) | fabs) <= .residual_s + 1e-7
                     and ((.offset_end_s - (if .rank == 1 then $s else 0 end)) | fabs) <= .residual_s + 1e-7)' \
  "$TMP/t.json" >/dev/null || fail "offsets not within their residual of the truth: $(jq -c .otherData.clock.ranks "$TMP/t.json")"
echo "offsets: $(jq -c '[.otherData.clock.ranks[] | {rank, offset_s, residual_us: (.residual_s * 1e6), drift_ppm}]' "$TMP/t.json")"
# without the correction (each rank's own clock) the same run is out of order: the correction is what orders it
"$BIN" analyze "$TMP/t.json" --top 0 --json "$TMP/a.json" >/dev/null 2>&1 || fail "analyze"
jq -e '.causality.uncorrected as $u | $u.receives_before_send > 0 and $u.collective_order_violations > 0' \
  "$TMP/a.json" >/dev/null || fail "on each rank's own clock the run should be out of order: $(jq -c .causality "$TMP/a.json")"

[ $fails -eq 0 ] && echo "trace clock across hosts: all checks passed"
exit $((fails > 0))
