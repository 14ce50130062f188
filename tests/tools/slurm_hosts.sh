#!/usr/bin/env bash
# A real Slurm cluster on network-namespace hosts (tests/tools/netns_hosts.sh; root, Debian's slurmctld,
# slurmd and slurm-client 22.05). Source it after netns_hosts.sh:
#
#   slurm_up         after netns_up N: slurmctld on host 0, one slurmd per host (each under its own hostname,
#                    inside its namespaces), a partition of every host; waits until sinfo shows them idle
#   slurm_down       stops the daemons (call it in the EXIT trap before netns_down)
#
# After slurm_up, SLURM_CONF names the cluster's slurm.conf (exported: sbatch, squeue, scontrol use it) and
# SLURM_DIR holds its state, spool directories and logs. No authentication (auth/none): a test cluster.
# A failure is an error with its reason (exit 1 from the test), never a skip.

slurm_fail() {
  echo "slurm_hosts: $*" >&2
  return 1
}

slurm_up() {
  local i n=${#NETNS_HOSTS[@]} pfx=${NETNS_SUBNET%.0/24} t
  for t in slurmctld slurmd sbatch squeue scontrol sinfo; do
    command -v "$t" >/dev/null ||
      { slurm_fail "'$t' not found (Debian packages slurmctld slurmd slurm-client; scripts/deps.sh)"; return 1; }
  done
  SLURM_DIR=$(mktemp -d /tmp/autohet-slurm.XXXXXX) || { slurm_fail "cannot make a directory"; return 1; }
  mkdir -p "$SLURM_DIR/state"
  {
    echo "ClusterName=autohet"
    echo "SlurmctldHost=${NETNS_HOSTS[0]}($pfx.11)"
    echo "AuthType=auth/none"
    echo "CredType=cred/none"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$SLURM_DIR/state"
    echo "SlurmdSpoolDir=$SLURM_DIR/spool-%n"
    echo "SlurmctldPidFile=$SLURM_DIR/slurmctld.pid"
    echo "SlurmdPidFile=$SLURM_DIR/slurmd-%n.pid"
    echo "SlurmctldLogFile=$SLURM_DIR/slurmctld.log"
    echo "SlurmdLogFile=$SLURM_DIR/slurmd-%n.log"
    echo "ReturnToService=2"
    echo "MpiDefault=none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "SlurmdTimeout=10"
    for ((i = 0; i < n; i++)); do
      echo "NodeName=${NETNS_HOSTS[$i]} NodeAddr=$pfx.$((11 + i)) CPUs=$(nproc) State=UNKNOWN"
    done
    echo "PartitionName=autohet Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$SLURM_DIR/slurm.conf"
  export SLURM_CONF="$SLURM_DIR/slurm.conf" SLURM_DIR
  for ((i = 0; i < n; i++)); do mkdir -p "$SLURM_DIR/spool-${NETNS_HOSTS[$i]}"; done
  "$NETNS_AGENT" "${NETNS_HOSTS[0]}" "slurmctld -f $SLURM_CONF -c" 2>"$SLURM_DIR/err" ||
    { slurm_fail "slurmctld did not start: $(cat "$SLURM_DIR/err") $(tail -3 "$SLURM_DIR/slurmctld.log" 2>/dev/null)"; return 1; }
  for ((i = 0; i < n; i++)); do
    "$NETNS_AGENT" "${NETNS_HOSTS[$i]}" "slurmd -f $SLURM_CONF -N ${NETNS_HOSTS[$i]}" 2>"$SLURM_DIR/err" ||
      { slurm_fail "slurmd on ${NETNS_HOSTS[$i]} did not start: $(cat "$SLURM_DIR/err")"; return 1; }
  done
  # what it waits for: every node idle in sinfo (the daemons registered), at most 60 s
  for ((t = 0; t < 240; t++)); do
    [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = "$n" ] && return 0
    sleep 0.25
  done
  slurm_fail "the $n nodes did not come up in 60 s: $(sinfo -N 2>&1 | tr '\n' ' ') $(tail -3 "$SLURM_DIR/slurmctld.log")"
}

slurm_down() {
  local f
  [ -n "${SLURM_DIR:-}" ] || return 0
  for f in "$SLURM_DIR"/slurmctld.pid "$SLURM_DIR"/slurmd-*.pid; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  rm -rf "$SLURM_DIR"
  SLURM_DIR=""
  return 0
}
