#!/usr/bin/env bash
# tests/reach/wait_kinds.sh <wait_kinds> <check_wait_kinds.py>: runs the
# program with LOCKSWAP_STATS=counts under the variant the test environment
# preloads and checks where each phase's wait landed in the dump.
set -euo pipefail
prog=${1:?usage: wait_kinds.sh <wait_kinds> <checker>}
checker=${2:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
LOCKSWAP_STATS=counts LOCKSWAP_STATS_FILE="$tmp/dump.stats" "$prog" >"$tmp/out.txt"
cat "$tmp/out.txt"
python3 "$checker" "$tmp/out.txt" "$tmp/dump.stats"
