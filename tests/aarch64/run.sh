#!/usr/bin/env bash
# tests/aarch64/run.sh — cross-build lockswap for aarch64 and run its tests
# under qemu-user. Called by the host build's ctest entry `aarch64`; can be
# run by hand:
#
#   bash tests/aarch64/run.sh --source . --build build-aarch64 \
#        --targets lockswap,core_tests,behaviour_mutex [--ctest-args "-R mutex"]
#
# Exit 77 (ctest SKIP_RETURN_CODE) with a printed reason when the cross
# compiler, qemu or googletest's sources are missing. The cross build
# directory is reused: the project is configured once, and later runs
# rebuild only what changed. googletest for aarch64 is built once per
# machine (see 1. below), not once per clone.
# Environment: JOBS (default nproc), AARCH64_GTEST_SRC (default
# /usr/src/googletest, from Debian's `googletest` package),
# AARCH64_GTEST_CACHE (default /var/cache/lockswap/aarch64-gtest).
set -euo pipefail

# shellcheck source=../common/options.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/options.sh"
src= build= targets= ctest_args=
lstest_options aarch64 source=src build=build targets=targets ctest-args=ctest_args -- "$@"
[[ -n $src && -n $build && -n $targets ]] || { echo "usage: run.sh --source DIR --build DIR --targets a,b,c" >&2; exit 2; }
src=$(cd "$src" && pwd)
jobs=${JOBS:-$(nproc)}
gtest_src=${AARCH64_GTEST_SRC:-/usr/src/googletest}
triple=aarch64-linux-gnu

skip() { echo "aarch64: SKIPPED: $*"; exit 77; }
command -v ${triple}-g++ >/dev/null || skip "no ${triple}-g++ (Debian package g++-aarch64-linux-gnu)"
command -v qemu-aarch64-static >/dev/null || command -v qemu-aarch64 >/dev/null ||
  skip "no qemu-aarch64 (Debian package qemu-user-static or qemu-user)"
[[ -f $gtest_src/CMakeLists.txt ]] || skip "no googletest sources at $gtest_src (Debian package googletest)"
[[ -d /usr/$triple/lib ]] || skip "no aarch64 sysroot at /usr/$triple (Debian package libc6-dev-arm64-cross)"

t0=$(date +%s)
mkdir -p "$build"
toolchain=$src/cmake/aarch64-linux-gnu.cmake
# Optimised like the release library (the point is the compiled memory
# ordering), without debug info: it only slows the compile.
common=(-DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release
        -DCMAKE_CXX_FLAGS_RELEASE=-O2 -DCMAKE_C_FLAGS_RELEASE=-O2)

# 1. googletest for aarch64, built once per machine: CI runs in a fresh
#    clone, whose build directory would compile it again every time (about
#    15 s of CPU, in a test that already takes the longest). Cached outside
#    the clone, as scripts/pg_regress.sh's suite, under a key of everything
#    the objects depend on: googletest's sources, the cross compilers, the
#    toolchain file, the flags and CMake. Where the cache cannot be written
#    (not root), in the build directory as before.
gtest_opts=("${common[@]:1}" -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON)  # all but the toolchain's path
gtest_key=$( { cmake --version | sed -n 1p; ${triple}-g++ --version | sed -n 1p; ${triple}-gcc --version | sed -n 1p
               sha256sum <"$toolchain"; printf '%s\n' "${gtest_opts[@]}"
               (cd "$gtest_src" && find . -type f -print0 | sort -z | xargs -0 sha256sum); } | sha256sum | cut -c1-16)
gtest_cache=${AARCH64_GTEST_CACHE:-/var/cache/lockswap/aarch64-gtest}
if mkdir -p "$gtest_cache" 2>/dev/null && [[ -w $gtest_cache ]]; then
  gtest_prefix=$gtest_cache/$gtest_key
  # One builder at a time (two CI runs on one machine); held until built.
  if command -v flock >/dev/null; then exec 9>"$gtest_prefix.lock" && flock 9; fi
else
  gtest_prefix=$build/gtest-install
fi
if [[ ! -f $gtest_prefix/.done ]]; then
  echo "aarch64: building googletest for aarch64 into $gtest_prefix"
  rm -rf "$gtest_prefix" "$build/gtest-build"  # a half-built one
  cmake -S "$gtest_src" -B "$build/gtest-build" "${common[@]}" -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON \
        -DCMAKE_INSTALL_PREFIX="$gtest_prefix" >"$build/gtest-configure.log" 2>&1 ||
    { cat "$build/gtest-configure.log"; exit 1; }
  cmake --build "$build/gtest-build" -j"$jobs" >"$build/gtest-build.log" 2>&1 || { tail -50 "$build/gtest-build.log"; exit 1; }
  cmake --install "$build/gtest-build" >/dev/null
  touch "$gtest_prefix/.done"  # written last: a complete install
else
  echo "aarch64: googletest for aarch64 from $gtest_prefix"
fi
exec 9>&-
# The project finds it there (CMAKE_PREFIX_PATH at the first configure;
# GTest_DIR every time, so that a build directory follows a new key).
gtest_dir=$(find "$gtest_prefix" -name GTestConfig.cmake -printf '%h\n' -quit)
[[ -n $gtest_dir ]] || { echo "aarch64: no GTestConfig.cmake under $gtest_prefix" >&2; exit 1; }

# 2. lockswap for aarch64 (configured once, then regenerated before each
#    build: a target of a test directory added since would be unknown to
#    the old Makefiles).
proj=$build/lockswap
if [[ ! -f $proj/CMakeCache.txt ]]; then
  cmake -S "$src" -B "$proj" "${common[@]}" -DCMAKE_PREFIX_PATH="$gtest_prefix" -DGTest_DIR="$gtest_dir" \
        -DLOCKSWAP_TESTS=ON -DLOCKSWAP_EXAMPLES=OFF >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
else
  cmake "$proj" -DGTest_DIR="$gtest_dir" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
fi
IFS=, read -r -a tlist <<<"$targets"
echo "aarch64: building ${tlist[*]}"
cmake --build "$proj" -j"$jobs" --target "${tlist[@]}" >"$build/build.log" 2>&1 || { grep -B2 -A12 -m5 'error' "$build/build.log" || tail -60 "$build/build.log"; exit 1; }
t1=$(date +%s)
readelf -h "$proj/preload/liblockswap.so" 2>/dev/null | grep -q 'Machine:.*AArch64' || { echo "aarch64: liblockswap.so is not an aarch64 object" >&2; exit 1; }
echo "aarch64: cross build done in $((t1 - t0)) s"

# 3. run under qemu-user.
# shellcheck disable=SC2086
rc=0
ctest --test-dir "$proj" -L qemu --output-on-failure -j"$jobs" --timeout 900 $ctest_args </dev/null || rc=$?
echo "aarch64: qemu tests finished in $(( $(date +%s) - t1 )) s (total $(( $(date +%s) - t0 )) s)"
exit $rc
