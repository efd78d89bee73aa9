#!/usr/bin/env bash
# tests/lwlock/refuse.sh LIB LWLOCK_API PARTIAL_API UNLISTED MARKER_LIB SECCOMP_MDWE — the
# settings and programs LOCKSWAP_LWLOCK refuses before main (exit 2, a
# message saying why) and the programs it leaves alone.
set -uo pipefail
lib=$1 api=$2 partial=$3 unlisted=$4 marker_lib=$5 seccomp_mdwe=$6
failures=0

# expect NAME STATUS PATTERN -- env...: runs `env ...`, checks its exit status
# and that stderr matches PATTERN (empty: stderr must be empty).
expect() {
  local name=$1 want=$2 pattern=$3 out rc
  shift 4
  out=$(env LD_PRELOAD="$lib" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc != "$want" ]] || { [[ -n $pattern ]] && ! grep -qE "$pattern" <<<"$out"; } ||
     { [[ -z $pattern ]] && [[ -n $out ]]; }; then
    echo "FAIL $name: status $rc (expected $want), stderr: ${out:-<empty>}"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

expect unknown-variant 2 'LOCKSWAP_LWLOCK=nope: unknown PostgreSQL LWLock variant' -- \
  LOCKSWAP_LWLOCK=nope "$api" --gtest_list_tests
expect unknown-tranche 2 'lwlock=futex@tranche:Nope.*no built-in LWLock tranche' -- \
  LOCKSWAP_LWLOCK=pg 'LOCKSWAP_SELECT=lwlock=futex@tranche:Nope' "$api" --gtest_list_tests
expect tranche-rule-needs-lwlock 2 'lwlock rules take the tranche:NAME matcher' -- \
  'LOCKSWAP_SELECT=mutex=futex@tranche:Alpha' "$api" --gtest_list_tests
expect partial-api 2 'exports only part of the LWLock API' -- LOCKSWAP_LWLOCK=pg "$partial"
expect not-postgres 0 '' -- LOCKSWAP_LWLOCK=futex /bin/true
expect off-leaves-partial-alone 0 '' -- LOCKSWAP_LWLOCK=off "$partial"
# An unknown build gets the build refusal before any of its code runs (its
# GetLWLockIdentifier would exit 3), also beside a library that exports the
# synthetic-target marker: only the program itself may declare that.
expect unlisted-build 2 'is not a build lockswap has verified' -- LOCKSWAP_LWLOCK=pg "$unlisted"
expect marker-from-a-library 2 'is not a build lockswap has verified' -- \
  LD_PRELOAD="$lib:$marker_lib" LOCKSWAP_LWLOCK=pg "$unlisted"
# Where written code may not be made executable (prctl PR_SET_MDWE, what
# systemd's MemoryDenyWriteExecute=yes asks of newer kernels), the refusal
# comes before any entry is touched and says which setting is in the way.
if python3 -c 'import ctypes, sys; sys.exit(0 if ctypes.CDLL(None).prctl(65, 1, 0, 0, 0) == 0 else 1)' 2>/dev/null; then
  expect memory-deny-write-execute 2 'MemoryDenyWriteExecute' -- LOCKSWAP_LWLOCK=pg \
    python3 -c 'import ctypes, os, sys; ctypes.CDLL(None).prctl(65, 1, 0, 0, 0) == 0 or sys.exit(9); os.execv(sys.argv[1], sys.argv[1:])' "$api" --gtest_list_tests
else
  echo "skip memory-deny-write-execute: this kernel has no PR_SET_MDWE"
fi
# The same under the seccomp filter systemd installs for MemoryDenyWriteExecute=yes
# where the kernel has no PR_SET_MDWE (seccomp_mdwe.c).
if "$seccomp_mdwe" /bin/true 2>/dev/null; then
  expect memory-deny-write-execute-seccomp 2 'MemoryDenyWriteExecute' -- LOCKSWAP_LWLOCK=pg \
    "$seccomp_mdwe" "$api" --gtest_list_tests
  expect seccomp-mdwe-leaves-off-alone 0 '' -- LOCKSWAP_LWLOCK=off "$seccomp_mdwe" "$api" --gtest_list_tests
else
  echo "skip memory-deny-write-execute-seccomp: no seccomp filter here"
fi
((failures == 0)) || exit 1
