#!/bin/bash
# tests/differential/run_differential.sh <scenario-program> <scenario>
#
# Registered through lockswap_add_preload_test, so LD_PRELOAD and the
# variant's LOCKSWAP_* settings are in the environment. Runs the scenario
# twice: without any preload (plain glibc: the reference transcript) and with
# the preload and the variant's settings, then compares the transcripts.
# Any difference fails the test and is printed as a unified diff. The
# reference is the glibc the test runs on (2.36 on the host, 2.41 in the
# glibc241 tier), named in the diff and the closing line.
set -u
prog=${1:?usage: run_differential.sh <scenario-program> <scenario>}
scenario=${2:?usage: run_differential.sh <scenario-program> <scenario>}
preload=${LD_PRELOAD:?run_differential.sh must run with LD_PRELOAD set}
unset LD_PRELOAD
glibc_version=$(getconf GNU_LIBC_VERSION)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

env -u LD_PRELOAD timeout 120 "$prog" "$scenario" >"$work/glibc.txt" 2>"$work/glibc.err"
ref_status=$?
env LD_PRELOAD="$preload" timeout 120 "$prog" "$scenario" >"$work/lockswap.txt" 2>"$work/lockswap.err"
status=$?

if [ "$ref_status" -ne 0 ]; then
  echo "reference run (no preload) failed with status $ref_status:"
  cat "$work/glibc.err"
  exit 1
fi
if ! diff -u --label "$glibc_version (no preload)" --label "lockswap (${LOCKSWAP_MUTEX:-}/${LOCKSWAP_RWLOCK:-})" \
    "$work/glibc.txt" "$work/lockswap.txt"; then
  echo "transcripts differ for scenario '$scenario' (lines with - are glibc's, + lockswap's)"
  [ -s "$work/lockswap.err" ] && { echo "--- stderr under the preload ---"; cat "$work/lockswap.err"; }
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "scenario exited with status $status under the preload (reference: 0)"
  cat "$work/lockswap.err"
  exit 1
fi
echo "scenario '$scenario': $(wc -l <"$work/glibc.txt") lines identical to $glibc_version's"
