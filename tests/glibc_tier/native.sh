#!/bin/bash
# tests/glibc_tier/native.sh facts|build <source-dir> — run inside the
# Debian 13 root (scripts/glibc_tier.sh run): compile with trixie's own
# compiler and glibc 2.41 headers, then run.
#   facts: glibc_facts_test.cpp (preload/abi.h's static_asserts included);
#   build: configure and build the library and core_tests, run core_tests.
set -euo pipefail
mode=${1:?usage: native.sh facts|build <source-dir>}
src=${2:?usage: native.sh facts|build <source-dir>}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "native: $(g++ --version | head -n 1), glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
case $mode in
  facts)
    g++ -std=c++20 -O1 -Wall -Wextra -I"$src" "$src/tests/glibc_tier/glibc_facts_test.cpp" \
      -lgtest -lgtest_main -pthread -o "$work/glibc_facts_test"
    "$work/glibc_facts_test"
    ;;
  build)
    cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOCKSWAP_TESTS=ON \
      -DLOCKSWAP_EXAMPLES=OFF >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
    cmake --build "$work/build" -j"$(nproc)" --target lockswap core_tests 2>&1 | grep -E 'warning|error' || true
    "$work/build/tests/core_tests" --gtest_brief=1
    ;;
  *) echo "native.sh: unknown mode $mode" >&2; exit 2 ;;
esac
