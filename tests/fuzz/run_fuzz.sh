#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh — build the libFuzzer target for the environment
# parser (config_fuzz.cpp) with clang and run it for a short budget.
#
#   run_fuzz.sh --source DIR --build DIR --isa x86_64 --core-lib liblockswap_core.a [--time 20]
#
# The corpus lives in <build>/corpus and grows across runs; seeds come from
# tests/fuzz/seeds, and the dictionary is generated from the variable and
# variant names in preload/. A finding leaves its input in
# <build>/crash-* (replay: <build>/config_fuzz <that file>).
# Exit 77 (ctest SKIP_RETURN_CODE) when clang or its libFuzzer runtime is
# missing. Environment: FUZZ_TIME (seconds, overrides --time), CLANGXX.
set -euo pipefail

# shellcheck source=../common/options.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/options.sh"
src= build= isa=x86_64 core_lib= budget=20
lstest_options fuzz source=src build=build isa=isa core-lib=core_lib time=budget -- "$@"
budget=${FUZZ_TIME:-$budget}
[[ -n $src && -n $build && -n $core_lib ]] || { echo "usage: run_fuzz.sh --source DIR --build DIR --core-lib LIB" >&2; exit 2; }

cxx=${CLANGXX:-}
if [[ -z $cxx ]]; then
  for c in clang++ clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
[[ -n $cxx ]] || { echo "fuzz: SKIPPED: no clang++ (Debian packages clang and libclang-rt-14-dev)"; exit 77; }
mkdir -p "$build/corpus"
probe=$build/probe.cpp
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe"
"$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$build/probe" >/dev/null 2>&1 ||
  { echo "fuzz: SKIPPED: $cxx cannot link -fsanitize=fuzzer,address,undefined (Debian package libclang-rt-14-dev)"; exit 77; }

bin=$build/config_fuzz
here=$src/tests/fuzz
# Rebuild when the harness, the parser or the headers it includes changed.
if [[ ! -x $bin ]] || [[ -n $(find "$here/config_fuzz.cpp" "$src/preload" "$src/core" "$src/arch" "$core_lib" \
                                 -newer "$bin" -type f 2>/dev/null | head -1) ]]; then
  echo "fuzz: building $bin"
  "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -fno-strict-aliasing -DLOCKSWAP_LOCK_EVENTS=1 -I"$src" -I"$src/arch/$isa" \
    "$here/config_fuzz.cpp" "$core_lib" -lpthread -o "$bin"
fi

# Dictionary: every LOCKSWAP_* name the parser knows, every variant name, and
# a few numbers at the edges.
dict=$build/config.dict
{
  grep -ohE '\bLOCKSWAP_[A-Z_]+\b' "$src/preload/config.cpp" | sort -u | grep -vE '_(TUNABLES|FAMILIES|VARIANTS|WRAPPER_VARIABLES)$' |
    while read -r n; do printf '"%s="\n' "$n"; done
  grep -ohE '^\s*X\([a-z_]+, "[a-z0-9-]+"' "$src/preload/registry.h" | sed -E 's/.*"([^"]+)"/"\1"/' | sort -u
  printf '"%s"\n' 0 1 00 4000 1000000 10000000 10000001 18446744073709551615 18446744073709551616 "\\x0a" "=" "%p"
} >"$dict"

echo "fuzz: running $bin for ${budget} s"
rc=0
"$bin" -max_total_time="$budget" -max_len=6000 -dict="$dict" -print_final_stats=1 \
  -artifact_prefix="$build/" -timeout=10 -rss_limit_mb=2048 \
  "$build/corpus" "$here/seeds" 2>"$build/fuzz.log" || rc=$?
grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::new_units_added)|^config_fuzz:|ERROR|SUMMARY|runtime error' "$build/fuzz.log" | head -40 || true
if ((rc != 0)); then
  tail -60 "$build/fuzz.log"
  echo "fuzz: FAILED (status $rc); the input is in $build/crash-* or $build/leak-* (replay: $bin <file>)"
  exit 1
fi
echo "fuzz: PASSED: $(grep -oE 'stat::number_of_executed_units: [0-9]+' "$build/fuzz.log" | grep -oE '[0-9]+$') inputs, corpus $(ls "$build/corpus" | wc -l) files"
