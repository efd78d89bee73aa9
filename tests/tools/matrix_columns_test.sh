#!/usr/bin/env bash
# tests/tools/matrix_columns_test.sh — run_matrix.py's columns beside the
# library's: the ceiling (rwlock_bench --no-lock takes no lock and makes every
# op a read, so the consistency checks hold; run with no LD_PRELOAD beside the
# locks, in the same rounds) and a --define that runs a variant from another
# build of the library (LD_PRELOAD=PATH, an A/B of two builds). Structure
# only: nothing here is timed. Usage: matrix_columns_test.sh BUILD_DIR. A few
# seconds.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=expect.sh
source "$HERE/expect.sh"
BUILD=$1
BENCH=$BUILD/examples/bench/rwlock_bench
TMP=$(mktemp -d /tmp/lockswap-matrix-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

expect "no-lock: every op a read, none a write, no lock" 0 ' writes=0 .* locked=0$' -- \
  "$BENCH" --threads 4 --reads 50% --duration 0.05 --no-lock
expect "no-lock in mutex mode: the same" 0 ' writes=0 .* locked=0$' -- \
  "$BENCH" --threads 4 --mutex --duration 0.05 --no-lock
expect "a locked run says so" 0 ' writes=[1-9][0-9]* .* locked=1$' -- \
  "$BENCH" --threads 2 --reads 50% --duration 0.05
expect "--unlocked still fires the checker" 134 'LOCK BROKEN' -- \
  "$BENCH" --threads 2 --reads 50% --duration 0.5 --unlocked

expect "run_matrix runs the ceiling beside glibc" 0 '' -- \
  python3 "$HERE/../../examples/bench/run_matrix.py" --build "$BUILD" --out "$TMP/m" --no-plot --no-mutex \
  --threads 2 --loads 1 --reads 90 --variants glibc,ceiling --baseline glibc --repeat 1 --duration 0.05
expect "results.json: a ceiling cell, run without the library" 0 '^ok$' -- python3 - "$TMP/m" <<'PY'
import csv, json, sys
out = sys.argv[1]
cells = {c["variant"]: c for c in json.load(open(f"{out}/results.json"))["cells"]}
raw = [r for r in csv.DictReader(open(f"{out}/raw.csv")) if r["variant"] == "ceiling"]
ceiling = cells["ceiling"]
assert ceiling["status"] == "ok" and ceiling["kops"] > 0, ceiling
assert raw and all(r["impl"] == "libc.so.6" for r in raw), raw
print("ok")
PY
expect "results.md explains the ceiling" 0 'takes no lock and makes every op a read' -- cat "$TMP/m/results.md"
expect "--read-mostly runs the ceiling by default" 0 'percid,ceiling' -- \
  python3 "$HERE/../../examples/bench/run_matrix.py" --help

# The same library under another name stands for another build.
cp "$BUILD/preload/liblockswap.so" "$TMP/liblockswap-other.so"
expect "--define NAME=BASE:LD_PRELOAD=PATH runs that build" 0 '' -- \
  python3 "$HERE/../../examples/bench/run_matrix.py" --build "$BUILD" --out "$TMP/ab" --no-plot --no-mutex \
  --threads 2 --loads 1 --reads 90 --variants rwsem,other --define "other=rwsem:LD_PRELOAD=$TMP/liblockswap-other.so" \
  --baseline rwsem --repeat 1 --duration 0.05
expect "raw.csv: each build's lock calls resolve into it" 0 '^ok$' -- python3 - "$TMP/ab" <<'PY'
import csv, sys
impl = {r["variant"]: r["impl"] for r in csv.DictReader(open(f"{sys.argv[1]}/raw.csv"))}
assert impl == {"rwsem": "liblockswap.so", "other": "liblockswap-other.so"}, impl
print("ok")
PY
expect "--define with a missing library stops" 2 'no library at' -- \
  python3 "$HERE/../../examples/bench/run_matrix.py" --build "$BUILD" --out "$TMP/x" --no-plot --no-mutex \
  --variants glibc,bad --define "bad=rwsem:LD_PRELOAD=$TMP/missing.so"
expect "--define with another variable stops" 2 'neither a LOCKSWAP_ variable nor LD_PRELOAD' -- \
  python3 "$HERE/../../examples/bench/run_matrix.py" --build "$BUILD" --out "$TMP/x" --no-plot --no-mutex \
  --variants glibc,bad --define "bad=rwsem:PATH=/"
exit $((fails > 0))
