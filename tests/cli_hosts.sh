#!/usr/bin/env bash
# autohet hosts and the placement check of autohet train, across two hosts made of network namespaces
# (tests/tools/netns_hosts.sh; root, as CI runs). A plan whose pipeline crosses the hosts (replica 0: n0 ->
# n1 at TP 2, replica 1 on n0) gets the expected rankfile from a hostfile and from a Slurm node list;
# mpirun with that rankfile over TCP between the hosts trains exactly as one process does (every step's
# loss, validation loss and gradient norm within 1e-5, the parameters within 1e-6); with the hosts swapped
# in the rankfile autohet train refuses to start: one line naming the rank, the host the plan expects and
# the one it runs on, exit 2. Before that, without namespaces: bad input (one line, exit 2), a plan made from
# an inventory with hosts carries them into the rankfile, and a plan naming other hosts is refused on this
# machine. If the namespaces cannot be made the test fails with the reason.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/tools/netns_hosts.sh"
trap 'netns_down; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM
PLAN="$PLANS/tiny-2host.json"

# bad input: exit 2 with one line that names the file, line and field
bad() { # expected-text args...
  local want="$1"
  shift
  "$BIN" hosts "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"
  local rc=$?
  [ $rc = 2 ] || fail "hosts $*: exit $rc, want 2"
  [ "$(wc -l <"$TMP/bad.err")" = 1 ] || fail "hosts $*: not one line on stderr: $(cat "$TMP/bad.err")"
  grep -qF -- "$want" "$TMP/bad.err" || fail "hosts $*: '$(cat "$TMP/bad.err")' does not say '$want'"
}
"$BIN" hosts --help >"$TMP/help" || fail "hosts --help"
grep -q -- "--rankfile" "$TMP/help" || fail "hosts --help names no --rankfile"
printf 'a slots=2\nb slots=two\n' >"$TMP/h-bad"
printf 'a slots=2\n' >"$TMP/h-one"
printf 'a slots=2\nb slots=1\n' >"$TMP/h-small"
bad "--plan is required" --rankfile "$TMP/rf"
bad "--rankfile is required" --plan "$PLAN"
bad "$TMP/h-bad:2: 'slots=two': slots must be an integer" --plan "$PLAN" --hostfile "$TMP/h-bad" --rankfile "$TMP/rf"
bad "$TMP/h-one: 1 host for the plan's 2 nodes: node 'n1'" --plan "$PLAN" --hostfile "$TMP/h-one" --rankfile "$TMP/rf"
bad "$TMP/h-small:2: slots=1: host 'b' takes 1 rank, the plan puts 2 on node 'n1'" --plan "$PLAN" \
  --hostfile "$TMP/h-small" --rankfile "$TMP/rf"
bad "--slurm 'n[1-': '[' without ']'" --plan "$PLAN" --slurm 'n[1-' --rankfile "$TMP/rf"
bad "names no hosts: give --hostfile" --plan "$PLAN" --rankfile "$TMP/rf"
bad "--hostfile and --slurm exclude each other" --plan "$PLAN" --hostfile "$TMP/h-one" --slurm a --rankfile "$TMP/rf"
bad "--rankfile '/nonexistent/rf'" --plan "$PLAN" --hostfile "$TMP/h-one" --rankfile /nonexistent/rf
[ -e "$TMP/rf" ] && fail "a refused autohet hosts wrote its rankfile"

# a plan of the user's own GPU type: refused without its --devices (one line naming the field), placed with it
jq '.cluster.nodes[].gpu_type = "my-gpu"' "$PLAN" >"$TMP/own.json"
printf '{"devices": [{"name": "my-gpu", "peak_tflops": 50, "mem_gib": 24, "mem_bw_gbs": 900, "intra_bw_gbs": 50, "nic_gbit": 100}]}\n' >"$TMP/own-dev.json"
printf 'a slots=8\nb slots=8\n' >"$TMP/h-own"
bad "unknown GPU type \"my-gpu\"" --plan "$TMP/own.json" --hostfile "$TMP/h-own" --rankfile "$TMP/rf"
bad "$TMP/none.json" --plan "$TMP/own.json" --devices "$TMP/none.json" --hostfile "$TMP/h-own" --rankfile "$TMP/rf"
"$BIN" hosts --plan "$TMP/own.json" --devices "$TMP/own-dev.json" --hostfile "$TMP/h-own" --rankfile "$TMP/own.rf" \
  >"$TMP/own.out" 2>&1 || { cat "$TMP/own.out"; fail "hosts --devices: a plan of the user's GPU type"; }
[ "$(wc -l <"$TMP/own.rf")" = "$(jq '[.replicas[].stages[].gpus[]] | length' "$PLAN")" ] || fail "hosts --devices: rankfile"
grep -q -- "--devices $TMP/own-dev.json" "$TMP/own.out" || fail "hosts --devices: the mpirun line lacks --devices"
grep -q "names no hosts, so autohet train cannot check" "$TMP/own.out" || fail "no note for a plan without hosts"

# hosts from the inventory: the planner's plan carries them, and autohet hosts needs no host list
cat >"$TMP/inv.json" <<'EOF2'
{"nodes": [{"name": "a", "gpu": "A100-40G", "gpus": 8, "host": "gpu-a01"},
           {"name": "b", "gpu": "H800", "gpus": 8, "host": "gpu-b01.site"}]}
EOF2
"$BIN" plan --model gpt3-1.3b --cluster "$TMP/inv.json" --global-batch 64 --seq 2048 --json "$TMP/inv-plan.json" \
  --quiet >/dev/null 2>&1 || fail "plan from an inventory with hosts"
[ "$(jq -r '[.cluster.nodes[].host] | join(" ")' "$TMP/inv-plan.json")" = "gpu-a01 gpu-b01.site" ] \
  || fail "the plan does not carry the inventory's hosts"
"$BIN" hosts --plan "$TMP/inv-plan.json" --rankfile "$TMP/inv.rf" >"$TMP/inv.out" 2>&1 || fail "hosts of an inventory plan"
grep -q "hosts from the plan's nodes" "$TMP/inv.out" || fail "autohet hosts did not take the plan's hosts"
# the same hosts from a hostfile: the plan names them already, so train can check them (no note)
printf 'gpu-a01 slots=8\ngpu-b01.site slots=8\n' >"$TMP/h-inv"
"$BIN" hosts --plan "$TMP/inv-plan.json" --hostfile "$TMP/h-inv" --rankfile "$TMP/inv2.rf" >"$TMP/inv2.out" 2>&1 \
  || fail "hosts of an inventory plan from a matching hostfile"
grep -q "names no hosts" "$TMP/inv2.out" && fail "a plan that names its hosts was said to name none"
# every rank on the host of its stage's node, in the slot of its GPU (jq recomputes the slot map)
jq -r '.cluster.nodes as $n | [.replicas[].stages[] | . as $s | .gpus[] | "\($n[$s.node_index].host) slot=\(.)"] |
       to_entries[] | "rank \(.key)=\(.value)"' "$TMP/inv-plan.json" >"$TMP/inv.want"
cmp -s "$TMP/inv.want" "$TMP/inv.rf" || { diff "$TMP/inv.want" "$TMP/inv.rf" | head; fail "inventory plan: rankfile"; }
# --cpus-per-gpu N: the rank of GPU g binds to cores g*N .. g*N+N-1 (a node's GPUs split evenly over its sockets)
"$BIN" hosts --plan "$TMP/inv-plan.json" --rankfile "$TMP/inv8.rf" --cpus-per-gpu 8 >"$TMP/inv8.out" 2>&1 \
  || { cat "$TMP/inv8.out"; fail "hosts --cpus-per-gpu 8"; }
jq -r '.cluster.nodes as $n | [.replicas[].stages[] | . as $s | .gpus[] | "\($n[$s.node_index].host) slot=\(. * 8)-\(. * 8 + 7)"] |
       to_entries[] | "rank \(.key)=\(.value)"' "$TMP/inv-plan.json" >"$TMP/inv8.want"
cmp -s "$TMP/inv8.want" "$TMP/inv8.rf" || { diff "$TMP/inv8.want" "$TMP/inv8.rf" | head; fail "--cpus-per-gpu 8: rankfile"; }
grep -qE "^0 .* (8-15|0-7)$" "$TMP/inv8.out" || fail "--cpus-per-gpu 8: the table does not show the cores"
bad "--cpus-per-gpu '0': expected an integer >= 1" --plan "$TMP/inv-plan.json" --rankfile "$TMP/rf" --cpus-per-gpu 0
bad "--cpus-per-gpu '5000': at most 4096" --plan "$TMP/inv-plan.json" --rankfile "$TMP/rf" --cpus-per-gpu 5000
printf 'gpu-b01 slots=8\ngpu-a01 slots=8\n' >"$TMP/h-swap"
bad "$TMP/h-swap:1: host 'gpu-b01' for node 'a', which the plan puts on host 'gpu-a01'" --plan "$TMP/inv-plan.json" \
  --hostfile "$TMP/h-swap" --rankfile "$TMP/rf"

# a plan naming hosts this machine is not: refused before any work, on this machine too
jq '.cluster.nodes[0].host = "not-this-host-a" | .cluster.nodes[1].host = "not-this-host-b"' "$PLAN" >"$TMP/elsewhere.json"
timeout 60 mpirun -np 4 --bind-to none "$BIN" train --model tiny-gpt --data "$FIX/text" --steps 2 \
  --plan "$TMP/elsewhere.json" >"$TMP/elsewhere.out" 2>&1
rc=$?
[ $rc = 2 ] || fail "train on the wrong host: exit $rc, want 2"
want="autohet train: rank 0 runs on host '$(uname -n)', the plan puts it on host 'not-this-host-a' (node 'n0'"
[ "$(grep -cF "$want" "$TMP/elsewhere.out")" = 1 ] || { cat "$TMP/elsewhere.out"; fail "no one line '$want'"; }
grep -q "step " "$TMP/elsewhere.out" && fail "train on the wrong host ran steps"

# --plan-out keeps what else the plan document holds (the planner's comparison, objective)
jq '.comparison = {"megatron": {"iteration_time_s": 2.5}} | .objective = "time"' "$PLAN" >"$TMP/extras.json"
"$BIN" hosts --plan "$TMP/extras.json" --slurm "gpu-x[0-1]" --rankfile "$TMP/rf-x" --plan-out "$TMP/extras-out.json" \
  >"$TMP/extras.out" 2>&1 || { cat "$TMP/extras.out"; fail "autohet hosts --plan-out"; }
[ "$(jq -r '"\(.comparison.megatron.iteration_time_s) \(.objective) \([.cluster.nodes[].host] | join(","))"' \
  "$TMP/extras-out.json")" = "2.5 time gpu-x0,gpu-x1" ] || fail "--plan-out dropped the document's other items"

# the hosts
netns_up 2 || { fail "cannot make network-namespace hosts (see above): this test needs root and iproute2"; exit 1; }
H0=${NETNS_HOSTS[0]} H1=${NETNS_HOSTS[1]}
printf '# two namespace hosts\n%s slots=2\n\n%s slots=2   # the second\n' "$H0" "$H1" >"$TMP/hostfile"
"$BIN" hosts --plan "$PLAN" --hostfile "$TMP/hostfile" --rankfile "$TMP/rankfile" --plan-out "$TMP/plan.json" \
  >"$TMP/hosts.out" 2>&1 || { cat "$TMP/hosts.out"; fail "autohet hosts"; }
printf 'rank 0=%s slot=0\nrank 1=%s slot=0\nrank 2=%s slot=1\nrank 3=%s slot=1\n' "$H0" "$H1" "$H1" "$H0" >"$TMP/want"
cmp -s "$TMP/want" "$TMP/rankfile" || { diff "$TMP/want" "$TMP/rankfile"; fail "rankfile differs from the expected one"; }
grep -q "run: mpirun -np 4 --rankfile $TMP/rankfile" "$TMP/hosts.out" || fail "autohet hosts printed no mpirun line"
[ "$(jq -r '[.cluster.nodes[].host] | join(" ")' "$TMP/plan.json")" = "$H0 $H1" ] || fail "--plan-out: hosts not in the plan"
# the same from a Slurm node list, and from the plan's own hosts
SLURM_JOB_NODELIST="${H0%0}[0-1]" "$BIN" hosts --plan "$PLAN" --rankfile "$TMP/rf-slurm" >"$TMP/slurm.out" 2>&1 \
  || { cat "$TMP/slurm.out"; fail "autohet hosts from SLURM_JOB_NODELIST"; }
cmp -s "$TMP/want" "$TMP/rf-slurm" || fail "the rankfile from SLURM_JOB_NODELIST differs"
"$BIN" hosts --plan "$TMP/plan.json" --rankfile "$TMP/rf-plan" >"$TMP/plan-hosts.out" 2>&1 || fail "hosts of the plan"
cmp -s "$TMP/want" "$TMP/rf-plan" || fail "the rankfile from the plan's hosts differs"

# one process, then the 2-host job (TCP only, on the namespaces' subnet; the rsh agent enters the namespaces)
TRAIN=(train --model tiny-gpt --data "$FIX/text" --steps 4 --seed 3 --eval-every 2)
AUTOHET_DUMP_PARAMS="$TMP/ref.bin" timeout 120 "$BIN" "${TRAIN[@]}" --global-batch 8 --micro-batch 2 --seq 64 \
  --log "$TMP/ref.log" >"$TMP/ref.out" 2>&1 || { tail -5 "$TMP/ref.out"; fail "one-process run"; }
# (ports pinned as docs/multi-host.md says; a rankfile binds each rank to the core of its slot)
NET=(--mca plm_rsh_agent "$NETNS_AGENT" --mca oob_tcp_if_include "$NETNS_SUBNET" --mca btl tcp,self
  --mca btl_tcp_if_include "$NETNS_SUBNET" --mca oob_tcp_dynamic_ipv4_ports "$NETNS_PORTS"
  --mca btl_tcp_port_min_v4 46200 --mca btl_tcp_port_range_v4 100)
AUTOHET_DUMP_PARAMS="$TMP/mh.bin" timeout 120 mpirun -np 4 --rankfile "$TMP/rankfile" "${NET[@]}" \
  -x AUTOHET_DUMP_PARAMS "$BIN" "${TRAIN[@]}" --plan "$TMP/plan.json" --log "$TMP/mh.log" >"$TMP/mh.out" 2>&1 \
  || { tail -5 "$TMP/mh.out"; fail "2-host run"; }
for field in loss val_loss grad_norm; do
  jq -e -s --arg f "$field" --slurpfile r <(jq -s . "$TMP/ref.log") \
    'length == ($r[0] | length) and length > 0 and
     ([range(0; length) as $i | select($r[0][$i][$f] >= 0) | (.[$i][$f] - $r[0][$i][$f]) | fabs / $r[0][$i][$f]]
      | max < 1e-5)' "$TMP/mh.log" >/dev/null || fail "2-host run: $field differs from the one-process run"
done
out=$("$CMP" "$TMP/ref.bin" "$TMP/mh.bin" 1e-6) || fail "2-host run: parameters differ: $out"
echo "2 namespace hosts ($H0, $H1) against one process: parameters $out"

# the hosts swapped in the rankfile: refused before any step, one line, exit 2
sed -e "s/=$H0 /=SWAP /; s/=$H1 /=$H0 /; s/=SWAP /=$H1 /" "$TMP/rankfile" >"$TMP/swapped"
timeout 120 mpirun -np 4 --rankfile "$TMP/swapped" "${NET[@]}" "$BIN" "${TRAIN[@]}" --plan "$TMP/plan.json" \
  >"$TMP/swapped.out" 2>&1
rc=$?
[ $rc = 2 ] || fail "swapped rankfile: exit $rc, want 2"
want="autohet train: rank 0 runs on host '$H1', the plan puts it on host '$H0' (node 'n0', replica 0 stage 0 TP rank 0)"
[ "$(grep -cF "$want" "$TMP/swapped.out")" = 1 ] || { cat "$TMP/swapped.out"; fail "swapped rankfile: no one line '$want'"; }
[ "$(grep -c '^autohet train' "$TMP/swapped.out")" = 1 ] || fail "swapped rankfile: more than the one line of autohet"
grep -q "step " "$TMP/swapped.out" && fail "swapped rankfile: training ran"

[ $fails = 0 ] && echo "cli_hosts: all passed"
exit $((fails > 0))
