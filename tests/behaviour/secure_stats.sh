#!/bin/bash
# tests/behaviour/secure_stats.sh <secure_guest>
#
# In a setuid process (secure-execution mode) lockswap must not honour
# LOCKSWAP_STATS_FILE or LOCKSWAP_STATS: a path from the environment would
# let the caller make a privileged program write where it chooses. Nor may
# an unknown LOCKSWAP_* variable stop it (elsewhere it exits 2 before main):
# the unprivileged caller would decide whether a setuid program runs. The guest
# is made setuid to `nobody` and run by root; the same binary without the
# setuid bit is the control that does write. Skipped (77) when not root or
# when the temporary directory is mounted nosuid.
set -u
prog=${1:?usage: secure_stats.sh <secure_guest>}
# shellcheck source-path=SCRIPTDIR source=../common/setuid_guest.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/setuid_guest.sh"
setuid_guest_copy "$prog"
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run <label> [VAR=value...]: the guest with statistics asked for in both ways.
run() {
  local label=$1
  shift
  rm -f "$work/stats"
  env "$@" LOCKSWAP_MUTEX=futex LOCKSWAP_STATS=1 LOCKSWAP_STATS_FILE="$work/stats" timeout 60 "$work/guest" \
    >"$work/out" 2>"$work/err"
  status=$?
  [ "$status" -eq 0 ] || fail "$label: exit status $status"
}

run control
grep -q 'secure=0 lockswap=1' "$work/out" || fail "control: $(cat "$work/out")"
[ -s "$work/stats" ] || fail "control: no statistics file (the test would prove nothing)"
LOCKSWAP_NO_SUCH_SETTING=1 timeout 60 "$work/guest" >"$work/out" 2>"$work/err"
[ $? -eq 2 ] || fail "control: an unknown variable did not stop the program (the test would prove nothing)"

setuid_guest_make_setuid
run setuid
setuid_guest_skip_unless_secure
grep -q 'secure=1 lockswap=1' "$work/out" || fail "setuid: $(cat "$work/out")"
[ -e "$work/stats" ] && fail "setuid: LOCKSWAP_STATS_FILE was honoured"
[ -s "$work/err" ] && fail "setuid: something on stderr: $(head -3 "$work/err")"
run "setuid, unknown variable" LOCKSWAP_NO_SUCH_SETTING=1
grep -q 'secure=1 lockswap=1' "$work/out" || fail "setuid, unknown variable: main did not run: $(cat "$work/out")"
[ -s "$work/err" ] && fail "setuid, unknown variable: something on stderr: $(head -3 "$work/err")"

[ "$failures" -eq 0 ] || exit 1
echo "secure execution: statistics settings ignored"
