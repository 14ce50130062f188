#!/usr/bin/env bash
# Test hosts made of Linux namespaces on this machine (root only).
#
#   netns_hosts.sh N -- COMMAND...   makes N hosts, runs COMMAND, removes the hosts (also on error or signal)
#   . netns_hosts.sh; netns_up N     the same as functions, for a test script; it must call netns_down in
#                                    its EXIT trap (that also removes what a failed netns_up made)
#
# Host i (0-based) is a network namespace joined to a bridge in the root namespace by a veth pair, with an
# address of a private /24 of its own (10.X.Y.0/24, chosen from the PID and checked unused; the bridge has
# .1, host i has .(11+i)) and a UTS namespace of its own whose hostname is the host's name. After netns_up:
#   NETNS_HOSTS    the host names (an array): ah<id>h0, ah<id>h1, ...
#   NETNS_SUBNET   the subnet, e.g. 10.213.7.0/24 (for Open MPI's oob_tcp_if_include / btl_tcp_if_include)
#   NETNS_BRIDGE   the bridge in the root namespace (tc on its ports throttles a link)
#   NETNS_AGENT    an rsh agent for Open MPI (--mca plm_rsh_agent "$NETNS_AGENT"): `AGENT HOST CMD...` runs
#                  CMD inside HOST's network and UTS namespaces, as ssh would run it on the host
#   NETNS_DIR      where the namespaces' files live
#   NETNS_PORTS    a range of 100 TCP ports of its own, e.g. 46100-46199 (for Open MPI's oob_tcp_dynamic_ipv4_ports:
#                  two tests that gave mpirun the same range at once made its daemons fail to reach it), chosen
#                  from the PID and checked unused
#   NETNS_PRIVATE_SHM=1 before netns_up: every host also gets a mount namespace of its own with a private
#                  tmpfs on /dev/shm (the rest of the filesystem stays shared), which the agent enters too: a
#                  host's memory-tier files are then seen by its own processes only, as on separate machines
#   netns_throttle I RATE [BURST]   makes host i's link RATE (e.g. 100mbit, 1gbit) in both directions (tc
#                  tbf on the bridge's port toward the host and on the host's own eth0; a bucket of one 4 ms timer
#                  tick at RATE, at least 16 KB, or BURST bytes, and a queue of 1 s at RATE, so that nothing is
#                  dropped and a message's time is its size / RATE). A full bucket sends BURST bytes at once: a
#                  message after an idle moment is that much faster than back to back (32 KiB at 20 Mbit/s: 7.3
#                  ms after 0.1 s idle with the 16 KB bucket, 13.7 ms back to back; 12.6 ms with BURST 3028, two
#                  frames, which still carries 100 Mbit/s in full)
# A failure to make the hosts is an error with its reason (exit 1), never a skip.

netns_fail() {
  echo "netns_hosts: $*" >&2
  return 1
}

# a /24 of 10.0.0.0/8 that no interface or route of this machine uses
netns_pick_subnet() {
  local seed=$(($$ % 60000)) try a b
  for try in 0 1 2 3 4 5 6 7; do
    a=$((200 + (seed + try * 7) % 50)) b=$(((seed / 50 + try * 13) % 250))
    if ! ip -4 addr show | grep -q "inet 10\.$a\.$b\." && ! ip -4 route show | grep -q "^10\.$a\.$b\."; then
      echo "10.$a.$b"
      return 0
    fi
  done
  return 1
}

# 100 ports of 40000-64999 none of which a socket of this machine uses
netns_pick_ports() {
  local seed=$(($$ % 250)) try base used
  used=$(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }')
  for try in 0 1 2 3 4 5 6 7; do
    base=$((40000 + ((seed + try * 31) % 250) * 100))
    if ! echo "$used" | awk -v b="$base" '$1 >= b && $1 < b + 100 { hit = 1 } END { exit !hit }'; then
      echo "$base-$((base + 99))"
      return 0
    fi
  done
  return 1
}

# host's mount namespace with a tmpfs of its own on /dev/shm (NETNS_PRIVATE_SHM=1 only); the namespace file
# lives on a private bind mount of NETNS_DIR (a mount namespace cannot be pinned on a shared mount)
netns_private_shm() {
  [ "${NETNS_PRIVATE_SHM:-0}" = 1 ] || return 0
  touch "$NETNS_DIR/mnt-$1" &&
    unshare --mount="$NETNS_DIR/mnt-$1" --propagation private sh -c "mount -t tmpfs -o size=2g tmpfs /dev/shm"
}

netns_up() {
  local n="$1" i id
  [ "$(id -u)" = 0 ] || { netns_fail "network namespaces need root (run as root, as CI does)"; return 1; }
  command -v ip >/dev/null || { netns_fail "'ip' not found (Debian package iproute2)"; return 1; }
  command -v unshare >/dev/null && command -v nsenter >/dev/null ||
    { netns_fail "unshare/nsenter not found (Debian package util-linux)"; return 1; }
  id=$(($$ % 100000))
  local pfx
  pfx=$(netns_pick_subnet) || { netns_fail "no unused 10.x.y.0/24 subnet found"; return 1; }
  NETNS_SUBNET="$pfx.0/24"
  NETNS_PORTS=$(netns_pick_ports) || { netns_fail "no unused range of 100 ports found in 40000-64999"; return 1; }
  NETNS_BRIDGE="ahbr$id"
  NETNS_DIR=$(mktemp -d /run/autohet-netns.XXXXXX) || { netns_fail "cannot make a directory under /run"; return 1; }
  NETNS_HOSTS=()
  NETNS_NS=()
  NETNS_VETH=()
  if [ "${NETNS_PRIVATE_SHM:-0}" = 1 ]; then # before any namespace file is pinned in it
    { mount --bind "$NETNS_DIR" "$NETNS_DIR" && mount --make-private "$NETNS_DIR"; } 2>"$NETNS_DIR/err" ||
      { netns_fail "cannot make $NETNS_DIR a private mount: $(tr '\n' ' ' <"$NETNS_DIR/err")"; return 1; }
  fi
  ip link add "$NETNS_BRIDGE" type bridge 2>"$NETNS_DIR/err" &&
    ip addr add "$pfx.1/24" dev "$NETNS_BRIDGE" 2>>"$NETNS_DIR/err" &&
    ip link set "$NETNS_BRIDGE" up 2>>"$NETNS_DIR/err" ||
    { netns_fail "cannot make bridge $NETNS_BRIDGE: $(tr '\n' ' ' <"$NETNS_DIR/err")"; return 1; }
  for ((i = 0; i < n; i++)); do
    local host="ah${id}h$i" ns="ah${id}n$i" veth="ah${id}v$i"
    NETNS_HOSTS+=("$host")
    NETNS_NS+=("$ns")
    NETNS_VETH+=("$veth")
    { ip netns add "$ns" &&
      ip link add "$veth" type veth peer name eth0 netns "$ns" &&
      ip link set "$veth" master "$NETNS_BRIDGE" &&
      ip link set "$veth" up &&
      ip -n "$ns" addr add "$pfx.$((11 + i))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up &&
      ip -n "$ns" link set lo up &&
      touch "$NETNS_DIR/uts-$host" &&
      unshare --uts="$NETNS_DIR/uts-$host" sh -c "echo $host >/proc/sys/kernel/hostname" &&
      netns_private_shm "$host"; } 2>"$NETNS_DIR/err" ||
      { netns_fail "cannot make host $host (namespace $ns): $(tr '\n' ' ' <"$NETNS_DIR/err")"; return 1; }
  done
  # the rsh agent: Open MPI calls it as `AGENT [ssh options] HOST COMMAND...` and expects the command to run
  # under a shell on that host
  NETNS_AGENT="$NETNS_DIR/rsh-agent"
  cat >"$NETNS_AGENT" <<EOF
#!/usr/bin/env bash
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host="\$1"; shift
case "\$host" in
$(for ((i = 0; i < n; i++)); do echo "  ${NETNS_HOSTS[$i]}) ns=${NETNS_NS[$i]} ;;"; done)
  *) echo "netns rsh agent: unknown host '\$host'" >&2; exit 255 ;;
esac
mnt=""
[ -e "$NETNS_DIR/mnt-\$host" ] && mnt="--mount=$NETNS_DIR/mnt-\$host"
exec nsenter --net=/run/netns/\$ns --uts="$NETNS_DIR/uts-\$host" \$mnt -- /bin/sh -c "\$*"
EOF
  chmod +x "$NETNS_AGENT"
  # every host's link is up before it is used (ping is not installed everywhere; MPI's own connections are
  # the real test)
  for ((i = 0; i < n; i++)); do
    ip -n "${NETNS_NS[$i]}" -o link show eth0 | grep -q LOWER_UP ||
      { netns_fail "host ${NETNS_HOSTS[$i]}: its link eth0 is not up"; return 1; }
  done
  export NETNS_SUBNET NETNS_BRIDGE NETNS_AGENT NETNS_DIR
}

netns_throttle() {
  local i="$1" rate="$2" bits burst="${3:-}"
  # the bucket must hold what RATE sends in a timer tick (4 ms at HZ=250): a 16 KB bucket lets a 1 Gbit/s
  # link carry ~35 MB/s here, the kernel refilling it only once a tick
  case "$rate" in
    *gbit) bits=$((${rate%gbit} * 1000000000)) ;;
    *mbit) bits=$((${rate%mbit} * 1000000)) ;;
    *kbit) bits=$((${rate%kbit} * 1000)) ;;
    *) netns_fail "netns_throttle: rate '$rate': expected N followed by kbit, mbit or gbit"; return 1 ;;
  esac
  if [ -z "$burst" ]; then
    burst=$((bits / 8 / 250))
    [ "$burst" -ge 16384 ] || burst=16384
  fi
  { tc qdisc add dev "${NETNS_VETH[$i]}" root tbf rate "$rate" burst "$burst" latency 1s &&
    ip netns exec "${NETNS_NS[$i]}" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 1s; } ||
    { netns_fail "cannot throttle host ${NETNS_HOSTS[$i]} to $rate (tc tbf)"; return 1; }
}

netns_down() {
  local ns host
  # what still runs on a host goes with it: a host whose link a test cut keeps its Open MPI daemon (orted
  # waits on a TCP connection that no reset will ever end once the namespace is gone)
  for ns in "${NETNS_NS[@]:-}"; do
    [ -n "$ns" ] && ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
  done
  for host in "${NETNS_HOSTS[@]:-}"; do
    [ -n "$host" ] && [ -e "$NETNS_DIR/uts-$host" ] && umount "$NETNS_DIR/uts-$host" 2>/dev/null
    [ -n "$host" ] && [ -e "$NETNS_DIR/mnt-$host" ] && umount "$NETNS_DIR/mnt-$host" 2>/dev/null
  done
  [ -n "${NETNS_DIR:-}" ] && mountpoint -q "$NETNS_DIR" 2>/dev/null && umount "$NETNS_DIR" 2>/dev/null
  [ -n "${NETNS_BRIDGE:-}" ] && ip link del "$NETNS_BRIDGE" 2>/dev/null
  [ -n "${NETNS_DIR:-}" ] && rm -rf "$NETNS_DIR"
  NETNS_NS=() NETNS_HOSTS=() NETNS_VETH=() NETNS_BRIDGE="" NETNS_DIR=""
  return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  if [ $# -lt 3 ] || [ "$2" != "--" ] || ! [ "$1" -ge 1 ] 2>/dev/null; then
    echo "usage: netns_hosts.sh N -- COMMAND... (as root; COMMAND sees NETNS_HOSTS as a space-separated list)" >&2
    exit 2
  fi
  n="$1"
  shift 2
  trap 'netns_down' EXIT
  trap 'exit 1' INT TERM
  netns_up "$n" || exit 1
  NETNS_HOSTS="${NETNS_HOSTS[*]}" "$@"
  exit $?
fi
