#!/usr/bin/env bash
# tests/wtlock/report_wtlock.sh LIB WTLOCK_API — WiredTiger's rwlocks in
# `lockswap report`: four writers on one WT_RWLOCK (wtlock_api's
# WritersAreExclusive, 4 x 20000 write acquisitions), and a writer that
# certainly waits 50 ms for a reader (ReadersShareWritersWait; the four
# writers may each run their loop in one time slice and never meet).
#   rwsem, profile:  a lock of kind wtlock with all 80000 acquisitions and
#                    hold time, one with a contended acquisition and wait
#                    time; reach: not a glibc column, its waits algorithm
#                    swapped
#   wt, profile:     the same lock counted through the dispatch (the control)
#   wt, counts:      a glibc column (WiredTiger's own lock runs)
#   wt, rwsem, rwsem-rspin, percid, counts:
#                    the per-lock counters (wtlock records): a lock with its
#                    80000 acquisitions and sampled write holds, one with a
#                    contended acquisition that waited, in the JSON and in
#                    the text report's "WiredTiger rwlocks" section (kind
#                    wtlock); the dump is still not a profiled one
# PYTHONPATH (the lockswap_cli package) comes from ctest's environment.
set -u
lib=${1:?} api=${2:?}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

# report VALUE MODE: the JSON report of one run
report() {
  env LD_PRELOAD="$lib" LOCKSWAP_WTLOCK="$1" LOCKSWAP_STATS="$2" LOCKSWAP_STATS_FILE="$dir/$1-$2.txt" \
    "$api" --gtest_filter='*WritersAreExclusive*:*ReadersShareWritersWait*' >"$dir/$1-$2.log" 2>&1 || { echo "FAIL: wtlock_api $1 $2"; return 1; }
  python3 -m lockswap_cli report --json --symbol-budget 0 "$dir/$1-$2.txt" >"$dir/$1-$2.json"  # no symbols needed
}

# check VALUE MODE PYTHON-EXPRESSION-ON-r DESCRIPTION
check() {
  if python3 -c "import json,sys; r=json.load(open(sys.argv[1])); w=[l for l in (r['locks'] or []) if l['kind']=='wtlock']
c=r.get('wtlocks') or []
sys.exit(0 if ($3) else 1)" "$dir/$1-$2.json"; then
    echo "ok: $1 $2: $4"
  else
    echo "FAIL: $1 $2: $4"; failures=$((failures + 1))
  fi
}

report rwsem profile || exit 1
check rwsem profile "any(l['acq'] >= 80000 and l['hold']['total_ns'] > 0 for l in w)" \
  "a wtlock lock with its 80000 acquisitions (a later test's lock may share its address) and hold time"
check rwsem profile "any(l['contended'] > 0 and l['wait']['total_ns'] >= 10**7 for l in w)" \
  "a wtlock lock with a contended acquisition that waited"
check rwsem profile "r['reach']['column'] == 'native'" "reach: the swapped lock's waits are the algorithm's"
report wt profile || exit 1
check wt profile "any(l['acq'] >= 80000 for l in w)" "WiredTiger's own lock profiled through the dispatch"
report wt counts || exit 1
check wt counts "r['reach']['column'] == 'glibc'" "reach: WiredTiger's own lock, a glibc column"
for v in wt rwsem rwsem-rspin percid; do
  [[ $v == wt ]] || report "$v" counts || exit 1
  check "$v" counts "any(l['kind'] == 'wtlock' and l['acq'] >= 80000 and l['hold_samples'] > 0 and l['hold_ns'] > 0 for l in c)" \
    "a counted wtlock lock with its 80000 acquisitions and sampled write holds"
  check "$v" counts "any(l['contended'] > 0 and l['wait_ns'] >= 10**7 and l['wait_max_ns'] >= 10**7 for l in c)" \
    "a counted wtlock lock with a contended acquisition that waited"
  check "$v" counts "not r['profiled'] and r['locks'] is None" "still a counts-only dump (no profiler tables)"
  if python3 -m lockswap_cli report --symbol-budget 0 "$dir/$v-counts.txt" | grep -A3 '^WiredTiger rwlocks' | grep -q ' wtlock '; then
    echo "ok: $v counts: the text report's WiredTiger rwlocks section"
  else
    echo "FAIL: $v counts: no WiredTiger rwlocks section with a wtlock row"; failures=$((failures + 1))
  fi
done
if ((failures)); then
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))
for l in r['locks'] or []: print(l['kind'], l['acq'], l['contended'], l['wait']['total_ns'], l['hold']['total_ns'])" \
    "$dir/rwsem-profile.json"
  for v in wt rwsem rwsem-rspin percid; do
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))
for l in r.get('wtlocks') or []: print(sys.argv[2], l['acq'], l['contended'], l['wait_ns'], l['hold_samples'], l['hold_ns'])" \
      "$dir/$v-counts.json" "$v" 2>/dev/null
  done
  exit 1
fi
echo "all cases passed"
