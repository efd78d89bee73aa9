#!/usr/bin/env bash
# scripts/test.sh — THE test command: install dependencies, build, run the
# whole ctest suite (core unit tests incl. TSan/ASan builds, every preload
# test under every variant, the CLI test). Exit status non-zero on any failure.
#
#   scripts/test.sh [ctest arguments...]     e.g. scripts/test.sh -L core
# Environment: BUILD_DIR (default build/), JOBS (default nproc),
#              TEST_TIMEOUT (whole ctest run, seconds; default 2400),
#              LOCKSWAP_GLIBC_TIER=full: run every glibc241 test (default:
#              the CI subset, every variant and kind of suite; see
#              tests/glibc_tier/CMakeLists.txt).
#              LOCKSWAP_PG_LWLOCK=full: run PostgreSQL's checks under every
#              LWLock variant too (default: the regression suite under one;
#              see tests/pg_lwlock/CMakeLists.txt).
# Besides the gcc build it builds the library and core tests with clang
# (CLANG_BUILD_DIR, default build-clang/) and runs them.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}
TEST_TIMEOUT=${TEST_TIMEOUT:-2400}  # the glibc241 subset adds about 10 minutes on a loaded 2-CPU machine
export BUILD_DIR JOBS

start=$(date +%s)
bash "$ROOT/scripts/setup.sh"
bash "$ROOT/scripts/build.sh" -DLOCKSWAP_TESTS=ON -DLOCKSWAP_WERROR=ON  # a new warning fails CI
built=$(date +%s)
echo "test: built in $((built - start)) s"

# The Debian 13 root of the glibc241 tests: built once, then cached outside
# the clone. Where it cannot be built those tests skip (ctest says why).
tier_status=0
bash "$ROOT/scripts/glibc_tier.sh" ensure || tier_status=$?
echo "test: glibc 2.41 root $( ((tier_status == 0)) && echo ready || echo "unavailable (status $tier_status)" )" \
  "in $(( $(date +%s) - built )) s"
# PostgreSQL 15's own regression suite (tests/pg_lwlock): fetched from
# Debian's source package and built once, then cached outside the clone.
# Where it cannot be had pg_lwlock/regress skips (ctest says why).
pg_start=$(date +%s) pg_status=0
bash "$ROOT/scripts/pg_regress.sh" ensure || pg_status=$?
echo "test: PostgreSQL regression suite $( ((pg_status == 0)) && echo ready || echo "unavailable (status $pg_status)" )" \
  "in $(( $(date +%s) - pg_start )) s"
# The labels left out of the default run.
full_labels=()
[[ ${LOCKSWAP_GLIBC_TIER:-} == full ]] || full_labels+=(glibc241_full)
[[ ${LOCKSWAP_PG_LWLOCK:-} == full ]] || full_labels+=(pg_lwlock_full)
tier_filter=()
((${#full_labels[@]} == 0)) || tier_filter=(-LE "^($(IFS='|'; echo "${full_labels[*]}"))\$")

# The second compiler: the library and core tests built with clang (any
# warning fails the step) and the core tests run.
# ccache, where installed, keeps the objects between clean clones (about
# 4.5 minutes of compiling on a loaded 2-CPU machine, seconds when cached).
clang_build_and_test() {
  local dir=${CLANG_BUILD_DIR:-$ROOT/build-clang} log launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Optimised as the gcc build (-O2), without its debug info: nobody debugs
  # this build, and -g costs a third of its compile time.
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLOCKSWAP_TESTS=ON \
    -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" \
    -DCMAKE_C_FLAGS="-Wall -Wextra" -DCMAKE_CXX_FLAGS="-Wall -Wextra" "${launcher[@]}" >/dev/null || return 1
  log=$(cmake --build "$dir" -j"$JOBS" --target lockswap core_tests 2>&1) || { echo "$log"; return 1; }
  if grep -q 'warning:' <<<"$log"; then
    grep -A3 'warning:' <<<"$log"
    echo "test: clang warns (above)"
    return 1
  fi
  timeout 600 "$dir/tests/core_tests" --gtest_brief=1 </dev/null
}
clang_start=$(date +%s)
clang_rc=0
clang_build_and_test || clang_rc=$?
echo "test: clang build and core tests $( ((clang_rc == 0)) && echo passed || echo FAILED )" \
  "in $(( $(date +%s) - clang_start )) s"

echo "test: running ctest (-j$JOBS)"
rc=0
# A per-test default timeout for tests that set none, and a bound on the
# whole run so CI never hangs.
timeout -k 30 "$TEST_TIMEOUT" \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" --timeout 600 "${tier_filter[@]}" "$@" </dev/null || rc=$?
if ((rc == 124 || rc == 137)); then
  echo "test: ctest did not finish within ${TEST_TIMEOUT} s" >&2
fi
((rc != 0 || clang_rc == 0)) || { rc=$clang_rc; echo "test: the clang build failed (above)"; }
echo "test: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)" ) in $(( $(date +%s) - start )) s"
exit "$rc"
