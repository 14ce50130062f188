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
