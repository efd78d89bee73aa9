#!/usr/bin/env bash
# tests/tools/dummy_column_test.sh — preload/config/variant_columns.def is the one
# list of the matrix's columns: a column added there, with every tag, reaches
# every consumer with no other edit. The source tree (tracked and untracked
# files, not the ignored build outputs) is copied to a scratch directory, a
# `dummy` column appended to the copy's .def, the copy configured with CMake
# (the scripts read the .def when there is no library) and each consumer
# asked for its list:
#   CMake       ctest -N: the behaviour tests' <test>/dummy, tests/select's and
#               tests/sanitize's dummy entries
#   scripts     scripts/lib.sh matrix_columns, matrix_columns_tagged bench
#   servers     server_lib.sh's default SRV_VARIANTS, jemalloc.sh's default
#   demo        scripts/demo.sh --print-variants
#   benchmarks  run_matrix.py --print-variants, fastpath_callgrind.sh's
#               default (--help), bench_common.tagged_columns (speedcheck)
#   compare     its default rows (tag compare): compare reads them from
#               `lockswap --list`, that is from the library, so the copy's
#               liblockswap is built for this one check (about half a
#               minute); compare has no option that lists its rows without
#               running them, so they are asked of the functions behind its
#               default (tagged_columns, plan_variants)
# Usage: dummy_column_test.sh SOURCE_DIR. Exit 77 (skip) where a tool it
# needs (git, cmake, ctest, python3, tar) is missing.
set -uo pipefail

src=${1:?usage: dummy_column_test.sh SOURCE_DIR}
for tool in git cmake ctest python3 tar; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool not found"; exit 77; }
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/lockswap-dummy-column.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
tree=$scratch/src build=$scratch/build
mkdir -p "$tree"
# The working tree as it is (a tracked file deleted in it is skipped).
(cd "$src" && git ls-files -z -co --exclude-standard |
  while IFS= read -r -d '' f; do [[ -e "$f" || -L "$f" ]] && printf '%s\0' "$f"; done |
  tar --null -T - -cf -) | tar -xf - -C "$tree" || { echo "FAIL: copying $src"; exit 1; }

def=$tree/preload/config/variant_columns.def
[[ -f "$def" ]] || { echo "FAIL: no $def"; exit 1; }
tags=$(sed -n 's/^LOCKSWAP_COLUMN(.*, "\([^"]*\)")$/\1/p' "$def" | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd, -)
echo "tags in the .def: $tags"
# compare's tag whether or not a column of the .def carries it today: its
# consumer is checked below either way.
[[ ,$tags, == *,compare,* ]] || tags=${tags:+$tags,}compare
echo "LOCKSWAP_COLUMN(\"dummy\", \"LOCKSWAP_MUTEX=futex,LOCKSWAP_RWLOCK=futex\", \"test column\", \"$tags\")" >>"$def"

fails=0
check() {  # check WHAT PATTERN TEXT: TEXT has a line matching PATTERN (grep -E)
  if grep -qE -- "$2" <<<"$3"; then
    echo "ok: $1"
  else
    echo "FAIL: $1: no line matching '$2' in:"
    sed 's/^/    /' <<<"$3"
    fails=$((fails + 1))
  fi
}

# --- CMake: configure only ---
# Optimised lightly and without debug information: the copy's library only
# has to list its columns, and -O2 -g doubles the compile time of the test.
if ! nice cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" >"$scratch/configure.log" 2>&1; then
  echo "FAIL: configuring the copy:"; tail -30 "$scratch/configure.log"; exit 1
fi
tests=$(cd "$build" && ctest -N 2>&1)
check "ctest: behaviour tests under the dummy column" '^ *Test +#[0-9]+: behaviour_[a-z_]+/dummy$' "$tests"
check "ctest: tests/select's suites under dummy (tag select)" '^ *Test +#[0-9]+: select_mixed_behaviour_[a-z]+/dummy$' "$tests"
if grep -q 'sanitize/' <<<"$tests"; then
  check "ctest: tests/sanitize under dummy (tag sanitize)" '^ *Test +#[0-9]+: sanitize/.*/dummy$' "$tests"
else
  echo "note: this compiler configures no tests/sanitize entries; not checked"
fi

# --- the scripts: no library in the copy's build, so they read the .def ---
export LOCKSWAP_ROOT=$tree BUILD_DIR=$build LIBLOCKSWAP=$build/preload/liblockswap.so PYTHONPATH=$tree/tools
unset SRV_VARIANTS
check "lib.sh matrix_columns" '^dummy:LOCKSWAP_MUTEX=futex,LOCKSWAP_RWLOCK=futex$' \
  "$(bash -c 'source "$LOCKSWAP_ROOT/scripts/lib.sh" && matrix_columns' 2>&1)"
for t in ${tags//,/ }; do
  check "lib.sh matrix_columns_tagged $t" '^dummy$' \
    "$(bash -c 'source "$LOCKSWAP_ROOT/scripts/lib.sh" && matrix_columns_tagged "$1"' _ "$t" 2>&1)"
done
check "server_lib.sh default SRV_VARIANTS" '(^|,)dummy(,|$)' \
  "$(bash -c 'SRV_NAME=dummy; source "$LOCKSWAP_ROOT/examples/servers/server_lib.sh" && echo "$SRV_VARIANTS"' 2>&1)"
check "demo.sh --print-variants" '^variants: .*\bdummy\b' \
  "$(bash "$tree/scripts/demo.sh" --no-setup --print-variants 2>&1)"
check "jemalloc.sh's default (none, control, bench)" '^none glibc .*\bdummy\b' \
  "$(sed -n 's/^((${#VARIANTS\[@\]})) || //p' "$tree/examples/servers/jemalloc.sh" |
     bash -c 'source "$LOCKSWAP_ROOT/scripts/lib.sh" && VARIANTS=() && eval "$(cat)" && echo "${VARIANTS[*]}"' 2>&1)"
check "fastpath_callgrind.sh's default" 'default none,glibc,.*\bdummy\b' \
  "$(bash "$tree/examples/bench/fastpath_callgrind.sh" --help 2>&1)"

# --- Python ---
bench=$tree/examples/bench
matrix=$(cd "$bench" && python3 run_matrix.py --build "$build" --print-variants 2>&1)
check "run_matrix.py rwlock default" '^variants: none,glibc,.*\bdummy\b' "$matrix"
check "run_matrix.py mutex default (dummy's mutex is its rwlock variant)" '^mutex-variants: none,glibc,.*\bdummy\b' "$matrix"
check "bench_common.tagged_columns (speedcheck.py's source)" "^speedcheck: .*'dummy'" \
  "$(cd "$bench" && python3 -c 'import bench_common as b; print("speedcheck:", list(b.tagged_columns("speedcheck")))' 2>&1)"
check "speedcheck.py --print-variants still runs" '^rwlock: none,glibc,' \
  "$(cd "$bench" && python3 speedcheck.py --build "$build" --print-variants 2>&1)"

# --- compare: the copy's library, since compare's rows come from `lockswap --list` ---
if ! nice cmake --build "$build" -j "$(nproc)" --target lockswap >"$scratch/build.log" 2>&1; then
  echo "FAIL: building the copy's liblockswap:"; tail -30 "$scratch/build.log"; exit 1
fi
check "compare's default rows (tag compare, from lockswap --list)" '^rows: none glibc .*\bdummy\b' \
  "$(python3 - "$build/bin/lockswap" "$LIBLOCKSWAP" 2>&1 <<'PY'
import sys
from lockswap_cli import compare
# What cmd_compare does when --variants is not given, short of running anything.
parser = compare.compare_parser()
args = parser.parse_args(["--", "true"])
args.variants = ",".join(compare.tagged_columns(sys.argv[1], ["--lib", sys.argv[2]], compare.DEFAULT_TAG))
rows, _ = compare.plan_variants(args, parser)
print("rows:", " ".join(rows))
PY
)"

if ((fails)); then
  echo "FAIL: $fails consumer(s) did not pick up the dummy column"
  exit 1
fi
echo "PASS: every consumer picked up the dummy column"
