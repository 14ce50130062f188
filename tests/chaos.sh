#!/usr/bin/env bash
# Chaos harness of `autohet run` (issue #26; docs/recovery.md, "Chaos testing"): TRIALS fresh runs of tiny-gpt,
# each with one random fault injected from outside the processes (kill, ip, tc, mount, dd; never autohet's own
# --preempt / `autohet preempt` / AUTOHET_TEST_* hooks) at a random step, then checks that the run survived it:
#   completed   exit 0 and the report says completed at the last step
#   equal       final parameters (and final loss) equal the uninterrupted run's within BOUND (default 1e-5
#               relative; a change of plan alone moves them ~2e-7 after 40 steps at lr 1e-3, one lost or
#               repeated step ~4e-3: docs/recovery.md)
#   lost        the report's steps_lost sum to at most 1 per fault (no fault here comes with notice), and no
#               node is reported lost that the faults did not hit
#   orphans     no process left whose command line names the run directory (autohet, mpirun, ranks), nothing
#               left in the namespace hosts (orted, ranks), no stopped rank alive
#   shm         nothing of the run left in /dev/shm (autohet-RUN-*, its .mpi-* MPI segments, vader segments)
# Fault kinds (--kinds takes numbers or names, comma-separated; default all that apply):
#   1 kill-rank        SIGKILL of one rank (pid from RUN/pids-G/rank-R, G the current generation)
#   2 kill-node        SIGKILL of every rank of one node (locally n0 has 2 ranks); across hosts every process of
#                      the host's network namespace (its orted too); the host itself stays up
#   3 stop-rank        SIGSTOP of one rank: a hang (runs use --heartbeat-timeout 3); SIGCONT afterwards if alive
#   4 link             across hosts only: a host's link cut (ip link set eth0 down) or throttled to nothing
#                      (tc tbf 1kbit on both ends of its veth), restored after the run
#   5 kill-controller  SIGKILL of the `autohet run` process, then `autohet run --resume RUN` (no other flags),
#                      which must complete the run (its ranks' AUTOHET_DUMP_PARAMS is a new file: the old
#                      generation's orphans cannot fake the result)
#   6 commit           SIGKILL of the rank writing a checkpoint file: a *.tmp.PID in the disk or cloud tier (a
#                      --ckpt-every commit), else after 2 commit periods in the memory tier
#   7 double           SIGKILL of a rank, then of a rank of the next generation once RUN/recover-G.json exists
#                      and before RUN/recover-G.json.result.json does (a second fault during the recovery);
#                      these runs use --mem-copies 3, so that the two lost nodes never held every memory copy
#   8 tier-full        a node's memory tier fills up: locally the node's tier directory is a symlink (made before
#                      its first rank creates it) into a 32 MiB tmpfs of its own, filled at the step; across hosts
#                      the host's private /dev/shm is shrunk to its use + 1 MiB and filled
#   9 corrupt-cloud    a byte flipped in one RUN/cloud/NODE/*.safetensors of the last committed step, then SIGKILL
#                      of NODE's ranks; these runs use --recovery full-reload --ckpt-every 1, so that the recovery
#                      reads every layer from the cloud tier (the corrupt copy or the other replica's)
# A fault that cannot be injected (the run finished first, the second fault came after the recovery, the race
# for the tier directory was lost, ...) is retried with another step, up to 3 attempts; a trial never injected
# fails. Locally the harness runs in a mount namespace of its own with a fresh tmpfs on /dev/shm (root:
# unshare), so that everything left in /dev/shm is the harness's; across hosts every host has its own.
#
# usage: chaos.sh BIN FIXTURES COMPARE_FLOATS [TRIALS] [--hosts N] [--seed S] [--json OUT] [--kinds K,...]
#                 [--markdown OUT] [--steps N] [--bound B] [--trial-timeout S] [--keep DIR]
# (TRIALS default 10; --hosts N: N even network-namespace hosts, 2 replicas of N/2 stages, one rank per host;
# --markdown OUT: the summary as a BENCHMARKS.md section; --keep DIR: copy the directory of every failed trial there). Exit 1 if any trial failed, 2 on bad usage.
if [ -z "${CHAOS_PRIVATE_SHM:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && ! [[ " $* " == *" --hosts "* ]]; then
  # locally: a private /dev/shm (the mount namespace ends with the harness, and its tmpfs with it)
  exec unshare --mount --propagation private env CHAOS_PRIVATE_SHM=1 bash "$0" "$@"
fi
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/tools/netns_hosts.sh"
shift 3
TRIALS=10 HOSTS=0 SEED=$$ JSON="" MD="" KINDS="" STEPS="" BOUND=1e-5 TRIAL_TIMEOUT=0 KEEP=""
if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then TRIALS=$1; shift; fi
usage() { echo "chaos.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
  --hosts) HOSTS=${2:-}; shift 2 ;;
  --seed) SEED=${2:-}; shift 2 ;;
  --json) JSON=${2:-}; shift 2 ;;
  --markdown) MD=${2:-}; shift 2 ;;
  --kinds) KINDS=${2:-}; shift 2 ;;
  --steps) STEPS=${2:-}; shift 2 ;;
  --bound) BOUND=${2:-}; shift 2 ;;
  --trial-timeout) TRIAL_TIMEOUT=${2:-}; shift 2 ;;
  --keep) KEEP=${2:-}; shift 2 ;;
  *) usage "unknown argument '$1'" ;;
  esac
done
[[ "$TRIALS" =~ ^[0-9]+$ ]] && [ "$TRIALS" -ge 1 ] || usage "TRIALS must be a positive integer"
[[ "$HOSTS" =~ ^[0-9]+$ ]] && { [ "$HOSTS" = 0 ] || { [ "$HOSTS" -ge 2 ] && [ "$HOSTS" -le 8 ] && [ $((HOSTS % 2)) = 0 ]; }; } ||
  usage "--hosts: an even number of hosts, 2 to 8"
[[ "$SEED" =~ ^[0-9]+$ ]] || usage "--seed: a non-negative integer"
[[ "$TRIAL_TIMEOUT" =~ ^[0-9]+$ ]] || usage "--trial-timeout: seconds"
[ -z "$JSON" ] || touch "$JSON" 2>/dev/null || usage "--json $JSON: cannot write"
[ -z "$MD" ] || touch "$MD" 2>/dev/null || usage "--markdown $MD: cannot write"
RANDOM=$SEED
# across hosts a step takes ~0.15-0.25 s here (TCP between namespaces, 2 cores): 30 steps keep a trial ~15 s
[ -n "$STEPS" ] || STEPS=$([ "$HOSTS" -gt 0 ] && echo 30 || echo 40)
[[ "$STEPS" =~ ^[0-9]+$ ]] && [ "$STEPS" -ge 20 ] || usage "--steps: at least 20"
[ "$TRIAL_TIMEOUT" -gt 0 ] || TRIAL_TIMEOUT=$([ "$HOSTS" -gt 0 ] && echo 90 || echo 60)

NAMES=(- kill-rank kill-node stop-rank link kill-controller commit double tier-full corrupt-cloud)
ENABLED=()
if [ -z "$KINDS" ]; then
  for k in 1 2 3 4 5 6 7 8 9; do
    [ $k = 4 ] && [ "$HOSTS" = 0 ] && continue
    ENABLED+=($k)
  done
else
  IFS=, read -ra want <<<"$KINDS"
  for w in "${want[@]}"; do
    k=""
    for i in 1 2 3 4 5 6 7 8 9; do [ "$w" = $i ] || [ "$w" = "${NAMES[$i]}" ] && k=$i; done
    [ -n "$k" ] || usage "--kinds: unknown kind '$w' (1-9 or ${NAMES[*]:1})"
    [ $k = 4 ] && [ "$HOSTS" = 0 ] && usage "--kinds: kind 4 (link) needs --hosts"
    ENABLED+=($k)
  done
fi

ARGS=(--model tiny-gpt --data "$FIX/text" --steps "$STEPS" --seed 3 --lr 1e-3 --eval-every 0)
ALL_PIDS=() # every process the harness started (cleanup)
mkfifo "$TMP/nap" && exec {NAPFD}<>"$TMP/nap"
nap() { read -r -t "$1" -u $NAPFD _ || :; } # sleep without a fork
alive() {                                  # PID: a process that has not exited (a zombie has)
  local line=""
  { read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
  line=${line##*) } # (after the command name, which may hold spaces and parentheses)
  [ "${line:0:1}" != Z ] && [ "${line:0:1}" != X ]
}
# processes whose command line names DIR (the controller, mpirun, the ranks: they all name the run directory)
procs_naming() {
  local p a
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] && continue
    { mapfile -d '' -t a <"/proc/$p/cmdline"; } 2>/dev/null || continue
    [[ "${a[*]}" == *"$1"* ]] && [[ "${a[*]}" != *chaos.sh* ]] && alive "$p" && echo "$p"
  done
}

# ---- the hosts ------------------------------------------------------------------------------------------
SHM_CMD=() # runs a command where the trial's /dev/shm is (across hosts: once per host)
if [ "$HOSTS" -gt 0 ]; then
  trap 'cleanup_all; netns_down; rm -rf "$TMP"' EXIT
  trap 'exit 1' INT TERM
  NETNS_PRIVATE_SHM=1 netns_up "$HOSTS" || { fail "cannot make $HOSTS network-namespace hosts (see above): needs root and iproute2"; exit 1; }
  : >"$TMP/hostfile"
  for h in "${NETNS_HOSTS[@]}"; do echo "$h slots=1" >>"$TMP/hostfile"; done
  export OMPI_MCA_plm_rsh_agent="$NETNS_AGENT" OMPI_MCA_oob_tcp_if_include="$NETNS_SUBNET" OMPI_MCA_btl=tcp,self
  export OMPI_MCA_btl_tcp_if_include="$NETNS_SUBNET"
  # 2 replicas of HOSTS/2 stages each over tiny-gpt's 6 layers, one rank per host
  half=$((HOSTS / 2))
  jq -n --argjson n "$HOSTS" --argjson h "$half" '
    def stages(off): [range(0; $h) as $s | {node_index: (off + $s), gpus: [0],
       layers: [($s * 6 / $h | floor), (($s + 1) * 6 / $h | floor)]}];
    {format: "autohet-plan", version: 1, model: {name: "tiny-gpt"}, train: {seq: 64},
     cluster: {nodes: [range(0; $n) | {name: "n\(.)", gpu_type: "cpu", gpus: 1}]},
     tp: 1, micro_batch: 2, global_batch: 8,
     replicas: [{micro_batches: 2, stages: stages(0)}, {micro_batches: 2, stages: stages($h)}]}' >"$TMP/plan.json"
  PLAN="$TMP/plan.json"
  HOSTARGS=(--hostfile "$TMP/hostfile")
  MODE="$HOSTS namespace hosts"
else
  trap 'cleanup_all; rm -rf "$TMP"' EXIT
  trap 'exit 1' INT TERM
  SHM_NOTE="shared /dev/shm (not root, or no unshare): only the run's own names are checked"
  if [ "${CHAOS_PRIVATE_SHM:-}" = 1 ]; then
    if mount -t tmpfs -o size=2g,mode=1777 chaos-shm /dev/shm 2>"$TMP/err"; then
      SHM_NOTE="private /dev/shm (a tmpfs in the harness's own mount namespace)"
      PRIVATE_SHM=1
    else
      SHM_NOTE="shared /dev/shm (mount failed: $(head -1 "$TMP/err"))"
    fi
  fi
  PLAN="$PLANS/chaos-4node.json"
  HOSTARGS=()
  MODE="4 virtual nodes (5 ranks), $SHM_NOTE"
fi
PRIVATE_SHM=${PRIVATE_SHM:-0}

# node name -> index of its host (hostfile line i runs inventory node i)
host_of() { echo "${1#n}"; }
ns_of() { echo "${NETNS_NS[$1]}"; }
# what a host's /dev/shm holds (across hosts: inside its mount namespace)
host_shm_ls() { nsenter --mount="$NETNS_DIR/mnt-${NETNS_HOSTS[$1]}" -- ls -A /dev/shm 2>/dev/null; }

# ---- reference -------------------------------------------------------------------------------------------
echo "chaos: $TRIALS trial(s) on $MODE; kinds ${ENABLED[*]}; seed $SEED; $STEPS steps at lr 1e-3; bound $BOUND"
t0=$EPOCHREALTIME
AUTOHET_DUMP_PARAMS="$TMP/ref.bin" timeout 300 "$BIN" run --plan "$PLAN" "${ARGS[@]}" "${HOSTARGS[@]}" \
  --run-dir "$TMP/ref.run" --log "$TMP/ref.log" --report "$TMP/ref.json" >"$TMP/ref.out" 2>&1 ||
  { tail -20 "$TMP/ref.out"; fail "the uninterrupted reference run failed"; exit 1; }
REF_LOSS=$(jq -s "map(select(.step == $STEPS)) | last | .loss" "$TMP/ref.log")
REF_S=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
# the drift a change of plan causes, live: the same training on one process (another reduction order)
AUTOHET_DUMP_PARAMS="$TMP/one.bin" timeout 300 "$BIN" train "${ARGS[@]}" --global-batch 8 --micro-batch 2 --seq 64 \
  >"$TMP/one.out" 2>&1 || { tail -5 "$TMP/one.out"; fail "the one-process run failed"; exit 1; }
DRIFT=$("$CMP" "$TMP/ref.bin" "$TMP/one.bin" 1 | sed 's/.*relative difference \([^,]*\),.*/\1/')
echo "reference: $REF_S s, final loss $REF_LOSS; drift of another plan (one process): $DRIFT relative (bound $BOUND)"
awk -v d="$DRIFT" -v b="$BOUND" 'BEGIN { exit !(d * 10 <= b) }' ||
  echo "chaos: warning: the bound $BOUND is less than 10x the drift $DRIFT of a change of plan"

# ---- one trial ---------------------------------------------------------------------------------------------
# state of the current attempt
D="" RUN="" CTRL=0 STOPPED="" LINK_CUT="" THROTTLED="" FILLED="" TIERMNT="" NFAULTS=0 INJ_OK=0 INJ_DESC="" INJ_STEP=-1
CORRUPT="" CORRUPT_STEP=-1 DUMP=""

# (no forks in these: they are polled every few milliseconds on a 2-core machine)
cur_gen() { # GEN = the highest G of RUN/pids-G
  local d n
  GEN=-1
  for d in "$RUN"/pids-*; do
    n=${d##*/pids-}
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -gt $GEN ] && GEN=$n
  done
}
cur_step() { # STEP = the highest step any generation has logged
  local f last i L
  STEP=0
  for f in "$RUN"/gen-*.log; do
    [ -s "$f" ] || continue
    mapfile -t L <"$f"
    for ((i = ${#L[@]} - 1; i >= 0; i--)); do
      last=${L[i]}
      [[ "$last" =~ \"step\":\ ([0-9]+) ]] && { [ "${BASH_REMATCH[1]}" -gt $STEP ] && STEP=${BASH_REMATCH[1]}; break; }
    done
  done
}
running() { alive "$CTRL"; }
now_us() { local t=${EPOCHREALTIME/./}; echo $((10#$t)); }
deadline_left() { local t=${EPOCHREALTIME/./}; [ $((10#$t)) -lt "$DEADLINE_US" ]; }
# waits until the run has logged step S; 1 if it ended (or timed out) first
wait_step() {
  while running && deadline_left; do
    cur_step
    [ "$STEP" -ge "$1" ] && return 0
    nap 0.01
  done
  return 1
}
# "PID NODE" of every live rank of generation G (server ranks included)
ranks_of_gen() {
  local f pid node
  for f in "$RUN/pids-$1"/rank-*; do
    [[ "$f" =~ /rank-[0-9]+$ ]] || continue # (not a pid file being written: rank-R.tmp.PID)
    read -r pid node _ <"$f" 2>/dev/null || continue
    [ -n "$pid" ] && alive "$pid" && echo "$pid $node ${f##*/rank-}"
  done
}
ranks_of_gen_all() { # "PID NODE" of every rank of generation G, dead or alive
  local f
  for f in "$RUN/pids-$1"/rank-*; do [[ "$f" =~ /rank-[0-9]+$ ]] && cat "$f" 2>/dev/null; done
}
pick_rank() { # PICK = a random live rank of the current generation: "PID NODE R" (empty if none)
  local arr
  cur_gen
  mapfile -t arr < <(ranks_of_gen "$GEN")
  PICK=""
  [ ${#arr[@]} -gt 0 ] && PICK=${arr[RANDOM % ${#arr[@]}]}
}
kill_node() { # NODE: SIGKILL of its ranks (across hosts: of every process of its host); prints what
  local node=$1 g pids=() pid n r
  if [ "$HOSTS" -gt 0 ]; then
    local hi ns
    hi=$(host_of "$node") ns=$(ns_of "$hi")
    mapfile -t pids < <(ip netns pids "$ns")
    [ ${#pids[@]} -gt 0 ] && kill -9 "${pids[@]}" 2>/dev/null && echo "every process of host ${NETNS_HOSTS[$hi]} (node $node): ${#pids[@]}"
    return
  fi
  cur_gen
  while read -r pid n r; do [ "$n" = "$node" ] && pids+=("$pid"); done < <(ranks_of_gen "$GEN")
  [ ${#pids[@]} -gt 0 ] && kill -9 "${pids[@]}" 2>/dev/null && echo "${#pids[@]} rank(s) of node $node (generation $GEN)"
}
mem_dirs() { # MEMS = the run's memory-tier roots on this machine's /dev/shm
  local m
  MEMS=()
  for m in /dev/shm/autohet-"${RUN##*/}"-*; do [ -d "$m" ] && MEMS+=("$m"); done
}
injected() { cur_step; INJ_OK=1 INJ_DESC=$1 INJ_STEP=$STEP NFAULTS=$((NFAULTS + 1)) INJ_T=$EPOCHREALTIME; }
hit() { FAULT_NODES+=" $1"; } # NODE: a node the fault hit (only these may be reported lost)

# ---- the injectors: wait for step S, inject, set INJ_OK / INJ_DESC (they return when done or the run ended)
inject_1() {
  wait_step "$1" || return
  pick_rank
  [ -n "$PICK" ] || return
  set -- $PICK
  kill -9 "$1" 2>/dev/null && hit "$2" && injected "SIGKILL rank $3 (pid $1, node $2)"
}
inject_2() {
  wait_step "$1" || return
  local what
  pick_rank
  [ -n "$PICK" ] || return
  set -- $PICK
  what=$(kill_node "$2") && [ -n "$what" ] && hit "$2" && injected "SIGKILL $what"
}
inject_3() {
  wait_step "$1" || return
  pick_rank
  [ -n "$PICK" ] || return
  set -- $PICK
  kill -STOP "$1" 2>/dev/null && STOPPED=$1 && hit "$2" && injected "SIGSTOP rank $3 (pid $1, node $2)"
}
inject_4() {
  wait_step "$1" || return
  local hi=$((RANDOM % HOSTS)) ns
  ns=$(ns_of $hi)
  if [ $((RANDOM % 2)) = 0 ]; then
    ip -n "$ns" link set eth0 down && LINK_CUT=$hi && hit "n$hi" && injected "link of host ${NETNS_HOSTS[$hi]} down"
  else
    tc qdisc add dev "${NETNS_VETH[$hi]}" root tbf rate 1kbit burst 1600 latency 50ms &&
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate 1kbit burst 1600 latency 50ms &&
      THROTTLED=$hi && hit "n$hi" && injected "link of host ${NETNS_HOSTS[$hi]} throttled to 1 kbit/s"
  fi
}
inject_5() {
  wait_step "$1" || return
  kill -9 "$CTRL" 2>/dev/null || return
  wait "$CTRL" 2>/dev/null
  injected "SIGKILL of the controller (pid $CTRL)"
  # the resumed controller: no other flags; its ranks dump the parameters into a new file
  DUMP="$D/params-resumed.bin"
  AUTOHET_DUMP_PARAMS="$DUMP" "$BIN" run --resume "$RUN" >"$D/resume.out" 2>&1 &
  CTRL=$!
  ALL_PIDS+=($CTRL)
}
inject_6() {
  wait_step "$1" || return
  local from f pid base n=0 cl
  cur_step
  base=$((STEP + 10))
  MEMS=()
  while running && deadline_left; do
    n=$((n + 1))
    if [ $((n % 50)) = 0 ] && [ "$HOSTS" = 0 ] && [ ${#MEMS[@]} = 0 ]; then
      cur_step
      [ "$STEP" -ge $base ] && mem_dirs
    fi
    for f in "$RUN"/disk/*/*.tmp.* "$RUN"/cloud/*/*.tmp.* "$RUN"/disk/*.tmp.* "$RUN"/cloud/*.tmp.* \
      ${MEMS[@]/%//*/*.tmp.*}; do
      [ -e "$f" ] || continue
      pid=${f##*.tmp.}
      [[ "$pid" =~ ^[0-9]+$ ]] || continue
      { mapfile -d '' -t cl <"/proc/$pid/cmdline"; } 2>/dev/null || continue
      [[ "${cl[*]}" == *"$RUN"* ]] || continue
      if kill -9 "$pid" 2>/dev/null; then
        cur_gen
        hit "$(ranks_of_gen_all "$GEN" | awk -v p="$pid" '$1 == p { print $2 }')"
        from=${f#"$RUN"/}
        [[ "$f" == /dev/shm/* ]] && from="memory tier: ${f#/dev/shm/}"
        injected "SIGKILL of pid $pid while writing $from"
        return
      fi
    done
    nap 0.001
  done
}
inject_7() {
  inject_1 "$1"
  [ "$INJ_OK" = 1 ] || return
  PARTIAL=1 # until the second fault is in
  local first=$INJ_DESC g1 v arr
  cur_gen
  g1=$((GEN + 1))
  while running && deadline_left && [ ! -e "$RUN/recover-$g1.json" ]; do nap 0.002; done
  while running && deadline_left && [ ! -e "$RUN/recover-$g1.json.result.json" ]; do
    mapfile -t arr < <(ranks_of_gen $g1)
    v=""
    [ ${#arr[@]} -gt 0 ] && v=${arr[RANDOM % ${#arr[@]}]}
    if [ -n "$v" ] && [ ! -e "$RUN/recover-$g1.json.result.json" ]; then
      set -- $v
      kill -9 "$1" 2>/dev/null && { hit "$2"; PARTIAL=0 NFAULTS=$((NFAULTS + 1)); INJ_DESC="$first, then during recovery $g1: SIGKILL rank $3 (pid $1, node $2)"; return; }
    fi
    nap 0.002
  done
  INJ_DESC="$first; no second fault (the run ended, or recovery $g1 finished first)"
}
# kind 8 preparation (local): the node's tier directory is a symlink into a small tmpfs, made before its rank
# creates the directory; 1 if the race was lost
prepare_8() {
  local node=n$((RANDOM % 4)) m
  MEMS=()
  while running && deadline_left && [ ${#MEMS[@]} = 0 ]; do
    mem_dirs
    [ ${#MEMS[@]} = 0 ] && nap 0.002
  done
  [ ${#MEMS[@]} -gt 0 ] || return 1
  m=${MEMS[0]}
  [ -e "$m/$node" ] && return 1
  mkdir -p "$D/tier" && mount -t tmpfs -o size=32m chaos-tier "$D/tier" || return 1
  TIERMNT="$D/tier"
  mkdir "$D/tier/$node" && ln -s "$D/tier/$node" "$m/$node" || return 1
  FILL_NODE=$node
}
inject_8() {
  if [ "$HOSTS" = 0 ]; then
    prepare_8 || { INJ_DESC="the race for the tier directory was lost"; return; }
    wait_step "$1" || return
    cat /dev/zero >"$D/tier/fill" 2>/dev/null
    FILLED=local
    hit "$FILL_NODE"
    injected "memory tier of node $FILL_NODE (a 32 MiB tmpfs) filled: $(df -h --output=avail "$D/tier" | tail -1 | tr -d ' ') free"
  else
    wait_step "$1" || return
    local hi=$((RANDOM % HOSTS)) used
    used=$(nsenter --mount="$NETNS_DIR/mnt-${NETNS_HOSTS[$hi]}" -- df -B1 --output=used /dev/shm | tail -1 | tr -d ' ')
    nsenter --mount="$NETNS_DIR/mnt-${NETNS_HOSTS[$hi]}" -- sh -c \
      "mount -o remount,size=$((used + 1048576)) /dev/shm && cat /dev/zero >/dev/shm/chaos-fill 2>/dev/null; true"
    FILLED=$hi
    hit "n$hi"
    injected "/dev/shm of host ${NETNS_HOSTS[$hi]} filled ($((used / 1024)) KiB in use, shrunk to +1 MiB and filled)"
  fi
}
inject_9() {
  wait_step "$1" || return
  local node step files f size hdr off b
  pick_rank
  [ -n "$PICK" ] || return
  set -- $PICK
  node=$2
  step=$(jq -r '.step // empty' "$RUN/cloud/state.json" 2>/dev/null)
  [ -n "$step" ] || return
  mapfile -t files < <(ls "$RUN/cloud/$node"/L*-s"$step".safetensors 2>/dev/null)
  [ ${#files[@]} -gt 0 ] || return
  f=${files[RANDOM % ${#files[@]}]}
  size=$(stat -c %s "$f")
  hdr=$(od -An -tu8 -N8 "$f" | tr -d ' ')
  off=$((8 + hdr + (RANDOM * 32768 + RANDOM) % (size - 8 - hdr)))
  b=$(od -An -tu1 -j $off -N1 "$f" | tr -d ' ')
  printf "\\$(printf '%03o' $(((b + 1 + RANDOM % 255) % 256)))" | dd of="$f" bs=1 seek=$off conv=notrunc status=none
  CORRUPT=$f CORRUPT_STEP=$step
  local what
  what=$(kill_node "$node") && [ -n "$what" ] && hit "$node" && injected "flipped byte $off of cloud/$node/${f##*/} (step $step), SIGKILL $what"
}

# after an attempt: undo what the fault left that the run could not (a stopped rank, a cut link, a full tier)
undo() {
  if [ -n "$STOPPED" ] && alive "$STOPPED"; then kill -CONT "$STOPPED" 2>/dev/null; fi
  if [ -n "$LINK_CUT" ]; then ip -n "$(ns_of "$LINK_CUT")" link set eth0 up; fi
  if [ -n "$THROTTLED" ]; then
    tc qdisc del dev "${NETNS_VETH[$THROTTLED]}" root 2>/dev/null
    ip netns exec "$(ns_of "$THROTTLED")" tc qdisc del dev eth0 root 2>/dev/null
  fi
  if [ -n "$FILLED" ] && [ "$FILLED" != local ]; then
    nsenter --mount="$NETNS_DIR/mnt-${NETNS_HOSTS[$FILLED]}" -- sh -c 'rm -f /dev/shm/chaos-fill; mount -o remount,size=2g /dev/shm'
  fi
  [ -n "$TIERMNT" ] && { rm -f "$TIERMNT/fill"; umount -l "$TIERMNT" 2>/dev/null; }
  STOPPED="" LINK_CUT="" THROTTLED="" FILLED="" TIERMNT=""
}
# ends every process of the run (and of the hosts) that is still there; prints how many it found
reap_run() {
  local p n=0
  for p in $(procs_naming "$RUN"); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; n=$((n + 1)); done
  if [ "$HOSTS" -gt 0 ]; then
    for ns in "${NETNS_NS[@]}"; do
      for p in $(ip netns pids "$ns"); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; n=$((n + 1)); done
    done
  fi
  echo $n
}
cleanup_all() {
  [ -n "$RUN" ] && reap_run >/dev/null
  undo
  for p in "${ALL_PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done
  return 0
}

shm_snapshot() { # what /dev/shm holds (locally private: everything; across hosts: every host's)
  if [ "$HOSTS" -gt 0 ]; then
    for ((i = 0; i < HOSTS; i++)); do host_shm_ls $i | sed "s|^|${NETNS_HOSTS[$i]}:|"; done
    ls -A /dev/shm 2>/dev/null | grep "^autohet-${RUN##*/}-" | sed 's|^|controller:|'
  elif [ "$PRIVATE_SHM" = 1 ]; then
    ls -A /dev/shm 2>/dev/null
  else
    ls -A /dev/shm 2>/dev/null | grep "^autohet-${RUN##*/}-"
  fi
}

# one attempt of trial T, kind K, at step S: sets RESULT (pass|fail|noinject) and WHY, and the report figures
attempt() {
  local t=$1 k=$2 s=$3 a=$4 extra=()
  D="$TMP/t$t-a$a"
  RUN="$D/chaos-$$-t$t-a$a"
  mkdir -p "$D"
  FAULT_NODES="" NFAULTS=0 INJ_OK=0 PARTIAL=0 INJ_DESC="" INJ_STEP=-1 CORRUPT="" CORRUPT_STEP=-1 DUMP="$D/params.bin"
  [ "$k" = 9 ] && extra=(--recovery full-reload --ckpt-every 1)
  [ "$k" = 7 ] && extra=(--mem-copies 3) # two nodes may go: every layer in 3 nodes' memory
  local before
  before=$(shm_snapshot | sort)
  DEADLINE_US=$(($(now_us) + TRIAL_TIMEOUT * 1000000))
  local t_start=$EPOCHREALTIME
  AUTOHET_DUMP_PARAMS="$DUMP" "$BIN" run --plan "$PLAN" "${ARGS[@]}" "${HOSTARGS[@]}" --heartbeat-timeout 3 \
    --run-dir "$RUN" --log "$D/log.jsonl" --report "$D/report.json" "${extra[@]}" >"$D/out" 2>&1 &
  CTRL=$!
  ALL_PIDS+=($CTRL)
  "inject_$k" "$s"
  while running && deadline_left; do nap 0.05; done
  local timed_out=0 rc
  if running; then
    timed_out=1
    kill -9 "$CTRL" 2>/dev/null
  fi
  wait "$CTRL" 2>/dev/null
  rc=$?
  WALL=$(awk -v a="$t_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  # a stopped rank must be gone once the run is (checked before anything is undone)
  local stopped_alive=0 k2
  for ((k2 = 0; k2 < 30; k2++)); do
    [ -n "$STOPPED" ] && alive "$STOPPED" || break
    nap 0.1
  done
  [ -n "$STOPPED" ] && alive "$STOPPED" && stopped_alive=1
  local stopped_pid=$STOPPED
  # what the fault left that outlives the run is undone first (the link restored, the tier emptied): a
  # partitioned host's processes can only learn that their job is gone once the host is reachable again
  undo
  # leftovers, after a moment for exiting processes (a SIGKILLed rank's memory is freed asynchronously; an
  # orted across hosts notices its lost mpirun): 3 s locally, 10 s across hosts
  local left=0 grace=$([ "$HOSTS" -gt 0 ] && echo 100 || echo 30)
  for ((k2 = 0; k2 < grace; k2++)); do
    left=$(procs_naming "$RUN" | wc -l)
    if [ "$HOSTS" -gt 0 ]; then for ns in "${NETNS_NS[@]}"; do left=$((left + $(ip netns pids "$ns" | wc -l))); done; fi
    [ "$left" = 0 ] && break
    nap 0.1
  done
  local orphans=""
  if [ "$left" != 0 ]; then
    orphans=$(for p in $(procs_naming "$RUN"); do tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-60; done | sort | uniq -c | head -3 | tr -s ' \n' ' ')
    [ "$HOSTS" -gt 0 ] && for ns in "${NETNS_NS[@]}"; do
      for p in $(ip netns pids "$ns"); do orphans+="; $ns: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-40)"; done
    done
  fi
  reap_run >/dev/null
  undo
  local after shm_left
  after=$(shm_snapshot | sort)
  shm_left=$(comm -13 <(echo "$before") <(echo "$after") | grep -v '^$' | head -5 | tr '\n' ' ')
  [ -d "$RUN" ] && shm_left+=$(cd "$RUN" && ls -d .mpi-* 2>/dev/null | tr '\n' ' ')
  # clean what is left, so that the next trial starts from nothing
  if [ -n "$shm_left" ]; then
    if [ "$HOSTS" -gt 0 ]; then
      for ((i = 0; i < HOSTS; i++)); do nsenter --mount="$NETNS_DIR/mnt-${NETNS_HOSTS[$i]}" -- sh -c 'rm -rf /dev/shm/autohet-* /dev/shm/vader*'; done
      rm -rf /dev/shm/autohet-"${RUN##*/}"-*
    else
      comm -13 <(echo "$before") <(echo "$after") | grep -v '^$' | while read -r e; do rm -rf "/dev/shm/$e"; done
    fi
  fi
  [ "$HOSTS" -gt 0 ] && rm -rf /tmp/autohet-"${RUN##*/}"-*-disk

  # the report's figures
  local rep="$D/report.json"
  REC_N=0 LOST=0 DET="" REPLAN="" RELAUNCH="" RESTORE="" CAUSES=""
  if [ -s "$rep" ] && jq -e . "$rep" >/dev/null 2>&1; then
    REC_N=$(jq '.recoveries | length' "$rep")
    LOST=$(jq '[.recoveries[].steps_lost] | add // 0' "$rep")
    DET=$(jq -r '[.recoveries[] | .detection_s // 0 | . * 1000 | round / 1000 | tostring] | if length > 4 then .[0:3] + ["...(\(length) in all)"] else . end | join("+")' "$rep")
    REPLAN=$(jq -r '[.recoveries[] | (.replan_s // 0) + (.assign_s // 0) | . * 1000 | round / 1000 | tostring] | if length > 4 then .[0:3] + ["...(\(length) in all)"] else . end | join("+")' "$rep")
    RELAUNCH=$(jq -r '[.recoveries[] | .relaunch_s // 0 | . * 1000 | round / 1000 | tostring] | if length > 4 then .[0:3] + ["...(\(length) in all)"] else . end | join("+")' "$rep")
    RESTORE=$(jq -r '[.recoveries[] | .restore_s // 0 | . * 1000 | round / 1000 | tostring] | if length > 4 then .[0:3] + ["...(\(length) in all)"] else . end | join("+")' "$rep")
    CAUSES=$(jq -r '[.recoveries[].cause] | if length > 3 then .[0:2] + ["... (\(length) in all)", .[-1]] else . end
      | join("; ") | if length > 400 then .[0:400] + "..." else . end' "$rep")
    cp "$rep" "$D/report-final.json"
  fi

  # the outage seen from outside: from the (first) fault to the end of the first restore after it
  OUTAGE=""
  if [ "$INJ_OK" = 1 ]; then
    OUTAGE=$(for f in "$RUN"/recover-*.json.result.json; do [ -e "$f" ] && stat -c %.3Y "$f"; done |
      awk -v t="$INJ_T" '$1 >= t && (m == "" || $1 < m) { m = $1 } END { if (m != "") printf "%.2f", m - t }')
  fi

  # the verdict
  local whys=()
  [ "$timed_out" = 1 ] && whys+=("timed out after ${TRIAL_TIMEOUT} s (killed)")
  [ "$timed_out" = 0 ] && [ "$rc" != 0 ] && whys+=("exit $rc: $( (cat "$D/out"; [ -f "$D/resume.out" ] && cat "$D/resume.out") | grep -E 'autohet run:|error|Error' | tail -1 | cut -c1-160)")
  if [ "$rc" = 0 ] && [ "$timed_out" = 0 ]; then
    jq -e --argjson n "$STEPS" '.completed == true and .final_step == $n' "$rep" >/dev/null 2>&1 ||
      whys+=("report not completed: $(jq -c '{completed, final_step}' "$rep" 2>/dev/null || echo "no report at $rep")")
    local out
    if [ -s "$DUMP" ]; then
      out=$("$CMP" "$TMP/ref.bin" "$DUMP" "$BOUND") || whys+=("parameters differ: $out")
      PARAM_DIFF=$(sed 's/.*relative difference \([^,]*\),.*/\1/' <<<"$out")
    else
      whys+=("no parameters dumped ($DUMP)")
    fi
    local loss
    loss=$(cat "$RUN"/gen-*.log 2>/dev/null | jq -s "map(select(.step == $STEPS)) | last | .loss // empty" 2>/dev/null)
    if [ -z "$loss" ]; then whys+=("no loss logged at step $STEPS")
    else awk -v a="$loss" -v b="$REF_LOSS" -v t="$BOUND" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t * b) }' ||
      whys+=("final loss $loss, uninterrupted $REF_LOSS"); fi
    [ "$LOST" -le "$NFAULTS" ] || whys+=("$LOST steps lost for $NFAULTS fault(s)")
    # only the nodes the faults hit may be lost (a healthy node taken for lost shrinks the job for nothing)
    local over
    over=$(jq -r --arg hit "$FAULT_NODES" '($hit | split(" ") | map(select(. != ""))) as $h
      | [.recoveries[].cause | scan("lost (n[0-9]+)") | .[0]] | unique | map(select(. as $n | $h | index($n) | not))
      | join(" ")' "$rep" 2>/dev/null)
    [ -z "$over" ] || whys+=("healthy node(s) taken for lost: $over (the fault hit:$FAULT_NODES)")
  fi
  if [ "$timed_out" = 0 ]; then # (after a timeout the harness killed the controller: what is left is its doing)
    [ "$left" != 0 ] && whys+=("$left process(es) left: ${orphans:0:200}")
    [ "$stopped_alive" = 1 ] && whys+=("the stopped rank $stopped_pid is still alive")
    [ -n "$shm_left" ] && whys+=("left in /dev/shm: ${shm_left:0:200}")
  fi
  # corruption reached the recovery? (else the fault was not exercised: another step)
  local reached=1
  if [ "$k" = 9 ] && [ "$INJ_OK" = 1 ] && [ ${#whys[@]} = 0 ]; then
    reached=0
    for f in "$RUN"/recover-*.json; do
      [[ "$f" == *result.json ]] && continue
      jq -e --argjson s "$CORRUPT_STEP" '.step == $s' "$f" >/dev/null 2>&1 && reached=1
    done
    if [ $reached = 1 ]; then
      if grep -q "${CORRUPT##*/}" "$RUN"/recover-*.json 2>/dev/null; then INJ_DESC+="; the recovery was assigned the corrupt copy"
      else INJ_DESC+="; the recovery read other copies only"; fi
    fi
  fi
  if [ ${#whys[@]} -gt 0 ]; then
    RESULT=fail WHY=$(printf '%s; ' "${whys[@]}")
    WHY=${WHY%; }
    if [ "$INJ_OK" = 1 ]; then WHY="$INJ_DESC -> $WHY"; else WHY="${INJ_DESC:+$INJ_DESC: }$WHY (no fault injected)"; fi
    if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp -a "$D" "$KEEP/" 2>/dev/null; fi
  elif [ "$INJ_OK" != 1 ] || [ "$PARTIAL" = 1 ] || [ $reached = 0 ]; then
    RESULT=noinject WHY=${INJ_DESC:-"the run finished before step $s"}
    [ $reached = 0 ] && WHY="the recovery did not start from the corrupted step $CORRUPT_STEP"
  else
    RESULT=pass WHY=""
  fi
}

# ---- the trials --------------------------------------------------------------------------------------------
: >"$TMP/trials.jsonl"
ORDER=()
printf '%-5s %-16s %-5s %-6s %-5s %-5s %-8s %-13s %-13s %-13s %-13s %s\n' trial kind step result lost recs \
  outage_s detection_s replan_s relaunch_s restore_s "fault / why"
for ((t = 1; t <= TRIALS; t++)); do
  if [ ${#ORDER[@]} = 0 ]; then # shuffled rounds: every enabled kind once per round
    ORDER=("${ENABLED[@]}")
    for ((i = ${#ORDER[@]} - 1; i > 0; i--)); do
      j=$((RANDOM % (i + 1)))
      tmp=${ORDER[i]} ORDER[i]=${ORDER[j]} ORDER[j]=$tmp
    done
  fi
  k=${ORDER[0]}
  ORDER=("${ORDER[@]:1}")
  PARAM_DIFF=""
  for a in 1 2 3; do
    s=$((2 + RANDOM % (STEPS - 10)))
    attempt "$t" "$k" "$s" "$a"
    [ "$RESULT" = noinject ] || break
    echo "      (trial $t attempt $a: not injected: $WHY; another step)"
  done
  [ "$RESULT" = noinject ] && { RESULT=fail WHY="could not inject in 3 attempts: $WHY"; }
  [ "$RESULT" = pass ] && WHY=$INJ_DESC
  printf '%-5s %-16s %-5s %-6s %-5s %-5s %-8s %-13s %-13s %-13s %-13s %s\n' "$t" "$k ${NAMES[$k]}" "$INJ_STEP" \
    "$([ "$RESULT" = pass ] && echo PASS || echo FAIL)" "$LOST" "$REC_N" "${OUTAGE:--}" "${DET:--}" "${REPLAN:--}" \
    "${RELAUNCH:--}" "${RESTORE:--}" "$WHY${CAUSES:+ [cause: $CAUSES]}"
  [ "$RESULT" = pass ] || fails=$((fails + 1))
  rep="$D/report-final.json"
  [ -s "$rep" ] || echo '{"recoveries": []}' >"$rep"
  jq -c --argjson t "$t" --argjson k "$k" --arg name "${NAMES[$k]}" --argjson step "$INJ_STEP" --argjson att "$a" \
    --arg result "$RESULT" --arg why "$WHY" --argjson lost "$LOST" --argjson faults "$NFAULTS" --arg wall "$WALL" \
    --arg diff "$PARAM_DIFF" --arg outage "$OUTAGE" \
    '{trial: $t, kind: $k, name: $name, step: $step, attempts: $att, result: $result, detail: $why,
      faults: $faults, steps_lost: $lost, outage_s: ($outage | tonumber? // null), wall_s: ($wall | tonumber), param_rel_diff: ($diff | tonumber? // null),
      recoveries: [.recoveries[]? | {cause, steps_lost, detection_s, replan_s: ((.replan_s // 0) + (.assign_s // 0)),
                                     relaunch_s, restore_s, seconds}]}' "$rep" >>"$TMP/trials.jsonl"
  rm -rf "$D"
done

# ---- per kind --------------------------------------------------------------------------------------------
SUMMARY=$(jq -s --arg mode "$MODE" --argjson seed "$SEED" --argjson steps "$STEPS" --arg bound "$BOUND" \
  --arg drift "$DRIFT" --arg ref_s "$REF_S" '
  def mean(f): (map(f) | map(select(. != null))) as $v | if ($v | length) == 0 then null else ($v | add / length) end;
  {format: "autohet-chaos", version: 1, mode: $mode, seed: $seed, steps: $steps, bound: ($bound | tonumber),
   plan_drift: ($drift | tonumber), reference_s: ($ref_s | tonumber), trials: ., count: length,
   passed: (map(select(.result == "pass")) | length),
   kinds: (group_by(.kind) | map({kind: .[0].kind, name: .[0].name, count: length,
     passed: (map(select(.result == "pass")) | length),
     max_steps_lost: (map(.steps_lost) | max),
     recoveries: (map(.recoveries | length) | add),
     mean_outage_s: mean(.outage_s),
     mean_detection_s: ([.[].recoveries[]] | mean(.detection_s)),
     mean_replan_s: ([.[].recoveries[]] | mean(.replan_s)),
     mean_relaunch_s: ([.[].recoveries[]] | mean(.relaunch_s)),
     mean_restore_s: ([.[].recoveries[]] | mean(.restore_s))}))}' "$TMP/trials.jsonl")
echo
printf '%-18s %6s %7s %10s %9s %12s %12s %12s %12s\n' kind count passed recoveries outage_s detection_s replan_s \
  relaunch_s restore_s
jq -r '.kinds[] | [(.kind | tostring) + " " + .name, .count, .passed, .recoveries,
  (.mean_outage_s, .mean_detection_s, .mean_replan_s, .mean_relaunch_s, .mean_restore_s
   | if . == null then "-" else (. * 1000 | round / 1000 | tostring) end)]
  | @tsv' <<<"$SUMMARY" | while IFS=$'\t' read -r a b c d o e f g h; do
  printf '%-18s %6s %7s %10s %9s %12s %12s %12s %12s\n' "$a" "$b" "$c" "$d" "$o" "$e" "$f" "$g" "$h"
done
passed=$(jq .passed <<<"$SUMMARY")
echo "chaos: $passed of $TRIALS trials passed (means per recovery; seed $SEED)"
[ -z "$JSON" ] || { echo "$SUMMARY" >"$JSON" || { echo "chaos: cannot write $JSON" >&2; exit 1; }; }
if [ -n "$MD" ]; then
  {
    cpu=$({ grep -m1 '^model name' /proc/cpuinfo || grep -m1 '^model' /proc/cpuinfo; } | sed 's/.*: //')
    echo "\`bash tests/chaos.sh BIN FIXTURES COMPARE_FLOATS $TRIALS$([ "$HOSTS" -gt 0 ] && echo " --hosts $HOSTS") --seed $SEED\`" \
      "($(date -u +%Y-%m-%d), $cpu, load average $(cut -d' ' -f1-3 /proc/loadavg)): $TRIALS trials on $MODE, tiny-gpt," \
      "$STEPS steps at lr 1e-3, one fault from outside each at a random step (docs/recovery.md, *Chaos testing*)." \
      "**$passed of $TRIALS passed.** A pass: exit 0, completed, final parameters and loss within $BOUND relative of" \
      "the uninterrupted run (a change of plan alone: $DRIFT here, one process against the uninterrupted run), at" \
      "most one step lost per fault, no healthy node taken for lost, no process and nothing in /dev/shm left." \
      "Outage: from the fault to the end of the restore after it, seen from outside; the other columns are the" \
      "report's recoveries[] (means per recovery, seconds)."
    echo
    echo "| kind | trials | passed | recoveries | max steps lost | outage | detection | replan | relaunch | restore |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    jq -r '.kinds[] | "| \(.kind) \(.name) | \(.count) | \(.passed) | \(.recoveries) | \(.max_steps_lost) | " +
      ([.mean_outage_s, .mean_detection_s, .mean_replan_s, .mean_relaunch_s, .mean_restore_s]
       | map(if . == null then "-" else (. * 1000 | round / 1000 | tostring) end) | join(" | ")) + " |"' <<<"$SUMMARY"
    if [ "$passed" != "$TRIALS" ]; then
      echo
      echo "Failed trials:"
      echo
      jq -r '.trials[] | select(.result != "pass") | "- trial \(.trial), \(.kind) \(.name) at step \(.step): " +
        (.detail | gsub("\\|"; "/") | if length > 300 then .[0:300] + "..." else . end)' <<<"$SUMMARY"
    fi
  } >"$MD" || { echo "chaos: cannot write $MD" >&2; exit 1; }
fi
exit $((fails > 0))
