#!/usr/bin/env bash
# scripts/test.sh — THE test command: install dependencies, build, run the
# whole ctest suite (core unit tests incl. TSan/ASan builds, every preload
# test under every variant, the CLI test). Exit status non-zero on any failure.
#
#   scripts/test.sh [ctest arguments...]     e.g. scripts/test.sh -L core
# Environment: BUILD_DIR (default build/), JOBS (default nproc),
#              TEST_TIMEOUT (whole ctest run, seconds; default 1500).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc)}
TEST_TIMEOUT=${TEST_TIMEOUT:-1500}
export BUILD_DIR JOBS

start=$(date +%s)
bash "$ROOT/scripts/setup.sh"
bash "$ROOT/scripts/build.sh" -DLOCKSWAP_TESTS=ON
built=$(date +%s)
echo "test: built in $((built - start)) s; running ctest (-j$JOBS)"

rc=0
# A per-test default timeout for tests that set none, and a bound on the
# whole run so CI never hangs.
timeout -k 30 "$TEST_TIMEOUT" \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" --timeout 600 "$@" </dev/null || rc=$?
if ((rc == 124 || rc == 137)); then
  echo "test: ctest did not finish within ${TEST_TIMEOUT} s" >&2
fi
echo "test: $( ((rc == 0)) && echo PASSED || echo "FAILED (ctest status $rc)" ) in $(( $(date +%s) - start )) s"
exit "$rc"
