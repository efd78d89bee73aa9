#!/usr/bin/env bash
# scripts/build.sh — configure and build lockswap into build/ (RelWithDebInfo:
# optimised, with symbols for perf/gdb). Idempotent: re-running only rebuilds
# what changed. Extra arguments are passed to the cmake configure step, e.g.
#   scripts/build.sh -DLOCKSWAP_LOCK_EVENTS=OFF
# Environment: BUILD_DIR (default <repo>/build), BUILD_TYPE, JOBS.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
JOBS=${JOBS:-$(nproc)}

cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS"
echo "build: $BUILD_DIR/preload/liblockswap.so"
