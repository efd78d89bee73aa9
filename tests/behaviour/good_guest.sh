#!/bin/bash
# tests/behaviour/good_guest.sh <guest-program>
#
# Runs under lockswap_add_preload_test (LD_PRELOAD and the variant's
# LOCKSWAP_* settings are in the environment). The checks themselves run
# without the preload; only the guest program gets it.
#   * stdout is exactly the program's own output (lockswap prints nothing
#     there), stderr is empty unless statistics were asked for;
#   * LOCKSWAP_STATS=1|counts|profile / LOCKSWAP_STATS_FILE send statistics
#     to stderr / the file only;
#   * an unknown variant, a malformed tunable or an unknown LOCKSWAP_*
#     variable stops the program with exit status 2 before main, naming the
#     valid choices on stderr.
set -u
prog=${1:?usage: good_guest.sh <guest-program>}
preload=${LD_PRELOAD:?good_guest.sh must run with LD_PRELOAD set}
unset LD_PRELOAD
# expected, work, failures, fail, run, check_clean_run
source "$(dirname "${BASH_SOURCE[0]}")/guest_lib.sh"

check_rejected() {
  local label=$1
  [ "$status" -eq 2 ] || fail "$label: exit status $status, expected 2"
  [ -s "$work/out" ] && fail "$label: main ran (or something wrote to stdout)"
  for word in glibc futex rwsem; do
    grep -q -- "$word" "$work/err" || fail "$label: stderr does not name the valid choice '$word'"
  done
}

run
check_clean_run "default"
[ -s "$work/err" ] && fail "default: lockswap wrote to stderr without being asked"

run LOCKSWAP_STATS=1
check_clean_run "LOCKSWAP_STATS=1"
grep -q '^lockswap: ' "$work/err" || fail "LOCKSWAP_STATS=1: no statistics on stderr"

run LOCKSWAP_STATS_FILE="$work/stats"
check_clean_run "LOCKSWAP_STATS_FILE"
[ -s "$work/err" ] && fail "LOCKSWAP_STATS_FILE: statistics went to stderr instead of the file"
grep -q '^lockswap: ' "$work/stats" 2>/dev/null || fail "LOCKSWAP_STATS_FILE: no statistics in the file"

run LOCKSWAP_MUTEX=nope
check_rejected "LOCKSWAP_MUTEX=nope"
grep -q 'LOCKSWAP_MUTEX' "$work/err" || fail "LOCKSWAP_MUTEX=nope: the message does not name the variable"

run LOCKSWAP_RWLOCK=nope
check_rejected "LOCKSWAP_RWLOCK=nope"

run LOCKSWAP_CID=nope
check_rejected "LOCKSWAP_CID=nope"
grep -q 'LOCKSWAP_CID = .*percpu' "$work/err" || fail "LOCKSWAP_CID=nope: the message does not list the allocators"

run LOCKSWAP_RWSEM_HANDOFF_US=abc
check_rejected "LOCKSWAP_RWSEM_HANDOFF_US=abc"
grep -q 'LOCKSWAP_RWSEM_HANDOFF_US' "$work/err" || fail "malformed tunable: the message does not name it"

run LOCKSWAP_RWSEM_HANDOFF_US=
check_rejected "LOCKSWAP_RWSEM_HANDOFF_US= (empty)"

run LOCKSWAP_STATS=7
check_rejected "LOCKSWAP_STATS=7 (out of range)"

run LOCKSWAP_STATS=verbose
check_rejected "LOCKSWAP_STATS=verbose (unknown mode)"
grep -q 'LOCKSWAP_STATS = 0 1 counts profile' "$work/err" || fail "LOCKSWAP_STATS=verbose: the modes are not listed"

for mode in counts profile; do
  run LOCKSWAP_STATS=$mode
  check_clean_run "LOCKSWAP_STATS=$mode"
  grep -q "^lockswap-v1 begin .* stats=$mode " "$work/err" || fail "LOCKSWAP_STATS=$mode: no stats=$mode dump on stderr"
done

run LOCKSWAP_STATS=1 LOCKSWAP_STATS_SIGNAL=USR2
check_clean_run "LOCKSWAP_STATS_SIGNAL=USR2"
grep -q '^lockswap-v1 end ' "$work/err" || fail "LOCKSWAP_STATS=1: no machine records on stderr"

run LOCKSWAP_STATS_SIGNAL=KILL
check_rejected "LOCKSWAP_STATS_SIGNAL=KILL"
grep -q 'LOCKSWAP_STATS_SIGNAL' "$work/err" || fail "LOCKSWAP_STATS_SIGNAL=KILL: the message does not name it"

run LOCKSWAP_STATS_SIGNAL=11
check_rejected "LOCKSWAP_STATS_SIGNAL=11 (SIGSEGV)"

run LOCKSWAP_STATS_BACKTRACE=x
check_rejected "LOCKSWAP_STATS_BACKTRACE=x"

run LOCKSWAP_MUTEXX=futex
check_rejected "LOCKSWAP_MUTEXX (unknown variable)"
grep -q 'LOCKSWAP_MUTEXX' "$work/err" || fail "unknown variable: the message does not name it"

# A huge malformed value (near Linux's 128 KiB limit for one environment
# string) is not echoed whole: the message stays short and gives the length.
huge=$(head -c 100000 /dev/zero | tr '\0' 'x')
run LOCKSWAP_MUTEX="$huge"
check_rejected "LOCKSWAP_MUTEX=<100000 bytes>"
[ "$(wc -c <"$work/err")" -lt 8192 ] || fail "huge value: $(wc -c <"$work/err") bytes of error message"
grep -q '(100000 bytes)' "$work/err" || fail "huge value: the message does not give its length"
run "LOCKSWAP_$(head -c 5000 /dev/zero | tr '\0' 'Y')=1"
check_rejected "unknown variable with a 5000-byte name"
[ "$(wc -c <"$work/err")" -lt 8192 ] || fail "huge name: $(wc -c <"$work/err") bytes of error message"
grep -q '(5009 bytes)' "$work/err" || fail "huge name: the message does not give its length"

# A statistics path that cannot be written: the program runs normally, one
# line on stderr says why, and the statistics follow there; nothing is
# written through a symlink.
check_stats_refused() {
  local label=$1
  check_clean_run "$label"
  [ "$(grep -c 'cannot open LOCKSWAP_STATS_FILE' "$work/err")" -eq 1 ] ||
    fail "$label: not exactly one line on stderr saying the file cannot be opened"
  grep -q '^lockswap: pid ' "$work/err" || fail "$label: the statistics did not follow on stderr"
}
mkdir "$work/dir"
run LOCKSWAP_STATS_FILE="$work/dir"
check_stats_refused "LOCKSWAP_STATS_FILE=<a directory>"
run LOCKSWAP_STATS_FILE="$work/missing/stats"
check_stats_refused "LOCKSWAP_STATS_FILE=<in a missing directory>"
: >"$work/target"
ln -s "$work/target" "$work/link"
run LOCKSWAP_STATS_FILE="$work/link"
check_stats_refused "LOCKSWAP_STATS_FILE=<a symlink>"
[ -s "$work/target" ] && fail "LOCKSWAP_STATS_FILE=<a symlink>: the link was followed"
if [ "$(id -u)" -ne 0 ]; then  # root writes a read-only file anyway
  : >"$work/readonly"
  chmod 444 "$work/readonly"
  run LOCKSWAP_STATS_FILE="$work/readonly"
  check_stats_refused "LOCKSWAP_STATS_FILE=<read-only>"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures good-guest check(s) failed"
  exit 1
fi
echo "good guest: all checks passed"
