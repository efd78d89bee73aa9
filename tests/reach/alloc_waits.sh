#!/usr/bin/env bash
# tests/reach/alloc_waits.sh <alloc_waits>: no allocation inside the waits,
# with statistics off and on.
set -euo pipefail
prog=${1:?usage: alloc_waits.sh <alloc_waits>}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "--- statistics off"
env -u LOCKSWAP_STATS -u LOCKSWAP_STATS_FILE "$prog"
echo "--- statistics on (counts)"
LOCKSWAP_STATS=counts LOCKSWAP_STATS_FILE="$tmp/dump.stats" "$prog"
grep -c "^lockswap-v1 wait " "$tmp/dump.stats" | sed 's/^/wait records: /'
