# Sourced by the CLI tests (tests/cli_*.sh): their arguments BIN FIXTURES
# [COMPARE_FLOATS], the test plans, a temporary directory removed on exit,
# fail() counting failures, and the environment for MPI jobs of several ranks
# on this machine (as root, more ranks than cores, one thread per rank).
set -uo pipefail
BIN="$1"
FIX="$2"
CMP="${3:-}"
PLANS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/plans"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# bad_input WANT ARGS...: autohet ARGS exits 2 with one stderr line containing WANT
bad_input() {
  local want="$1"
  shift
  "$BIN" "$@" >/dev/null 2>"$TMP/bad_input.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$*: exit $rc, expected 2"
  [ "$(wc -l <"$TMP/bad_input.err")" -eq 1 ] || fail "$*: not one line: $(cat "$TMP/bad_input.err")"
  grep -qF -- "$want" "$TMP/bad_input.err" || fail "$*: '$want' not in: $(cat "$TMP/bad_input.err")"
}

# mpirun_ranks JOB N: the rank processes of a job started as `timeout ... mpirun` (or `timeout ... autohet`
# for one rank)
mpirun_ranks() {
  local kids k
  kids=$(pgrep -P "$1")
  if [ "$2" -eq 1 ]; then echo $kids; return; fi
  for k in $kids; do pgrep -P "$k"; done | tr '\n' ' '
}

# proc_running PID: the process exists and is not a zombie (an exited child its parent has not reaped)
proc_running() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# wait_mpirun JOB N: waits for job JOB (the `timeout -k` in front of mpirun) of N ranks. Open MPI's mpirun
# can deadlock in PMIx_server_finalize once one of its ranks was SIGKILLed (seen in CI: every rank exited and
# left a zombie, mpirun never reaped them nor returned, and the SIGTERM of `timeout` found it unable to act):
# once none of its ranks has run for 30 s, mpirun is killed as the deadlock it is.
wait_mpirun() {
  local job=$1 nr=$2 r rs running started=0 idle_since=""
  while kill -0 "$job" 2>/dev/null; do
    running=0 rs=$(mpirun_ranks "$job" "$nr")
    [ -n "$rs" ] && started=1 # (before mpirun has started its ranks there is nothing to wait for yet)
    for r in $rs; do proc_running "$r" && running=1; done
    if [ $running -eq 0 ] && [ $started -eq 1 ] && [ "$nr" -gt 1 ]; then
      [ -n "$idle_since" ] || idle_since=$SECONDS
      if [ $((SECONDS - idle_since)) -ge 30 ]; then
        echo "mpirun of job $job did not return 30 s after its ranks exited (Open MPI's PMIx finalize): killed"
        pkill -9 -P "$job" 2>/dev/null
        break
      fi
    else
      idle_since=""
    fi
    sleep 0.1
  done
  wait "$job" 2>/dev/null
}
