#!/usr/bin/env bash
# tests/reach/syscall_diff.sh <syscall_diff>: the program's results under
# liblockswap's syscall() (the LD_PRELOAD the test environment sets), with
# statistics off and on, must be glibc's (the same program, not preloaded).
set -euo pipefail
prog=${1:?usage: syscall_diff.sh <syscall_diff>}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
preload=${LD_PRELOAD:?run under the test environment (LD_PRELOAD=liblockswap.so)}
env -u LD_PRELOAD "$prog" >"$tmp/glibc.txt"
env -u LOCKSWAP_STATS -u LOCKSWAP_STATS_FILE LD_PRELOAD="$preload" "$prog" >"$tmp/off.txt"
LD_PRELOAD="$preload" LOCKSWAP_STATS=counts LOCKSWAP_STATS_FILE="$tmp/dump.stats" "$prog" >"$tmp/on.txt"
echo "--- glibc (not preloaded)"
cat "$tmp/glibc.txt"
status=0
for mode in off on; do
  if diff -u "$tmp/glibc.txt" "$tmp/$mode.txt"; then
    echo "--- statistics $mode: same as glibc"
  else
    echo "--- statistics $mode: DIFFERS from glibc"
    status=1
  fi
done
# glibc's own answer for the cancellation case, checked here once.
grep -q "cancel: blocked after cancel=1, returned from syscall=1, cancelled=1" "$tmp/glibc.txt" || {
  echo "unexpected glibc cancellation behaviour"; status=1; }
# With statistics on, the program's futex waits are sites of their own.
grep -q "^lockswap-v1 wait kind=futex call=syscall " "$tmp/dump.stats" || {
  echo "no futex wait site in the dump"; status=1; }
exit $status
