#!/bin/bash
# tests/behaviour/oom_shared_slot.sh <behaviour_oom>
#
# Runs under lockswap_add_preload_test. Checks that behaviour_oom's test with
# more fresh threads than the registry reserves really ran some of them on
# the shared slot (core/thread_registry.h): its statistics must count
# registry_shared_slot. The glibc variant never attaches threads: no check.
set -u
prog=${1:?usage: oom_shared_slot.sh <behaviour_oom>}
stats=$(mktemp)
trap 'rm -f "$stats"' EXIT
LOCKSWAP_STATS_FILE=$stats "$prog" --gtest_filter='*MoreFreshThreadsThanReservedRecords*' >/dev/null || exit 1
[ "${TEST_VARIANT:-}" = glibc ] && exit 0
grep -q "compiled out" "$stats" && { echo "lock events compiled out: not checked"; exit 0; }
if ! grep -q "registry_shared_slot" "$stats"; then
  echo "FAIL: no thread ran on the shared slot; statistics were:"
  cat "$stats"
  exit 1
fi
grep "registry_shared_slot" "$stats"
