#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh — build a libFuzzer target with clang and run it for
# a short budget:
#   config  the environment parser (config_fuzz.cpp, preload/config/config.cpp)
#   elf     the ELF symbol reader of LOCKSWAP_SELECT (elf_fuzz.cpp,
#           preload/config/elf.cpp)
#
#   run_fuzz.sh --source DIR --build DIR --isa x86_64 --core-lib liblockswap_core.a [--target config] [--time 20]
#
# The corpus lives in <build>/corpus-<target> and grows across runs. config's
# seeds come from tests/fuzz/seeds and its dictionary is generated from the
# variable and variant names in preload/; elf's seeds are generated here
# (two tiny shared objects, one per hash style, and the vDSO's image, which
# the target writes), with a dictionary of ELF magic numbers. A finding
# leaves its input in <build>/crash-* (replay: <build>/<target>_fuzz <that file>).
# Exit 77 (ctest SKIP_RETURN_CODE) when clang or its libFuzzer runtime is
# missing. Environment: FUZZ_TIME (seconds, overrides --time), CLANGXX.
set -euo pipefail

# shellcheck source=../common/options.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/options.sh"
src= build= isa=x86_64 core_lib= budget=20 target=config
lstest_options fuzz source=src build=build isa=isa core-lib=core_lib time=budget target=target -- "$@"
budget=${FUZZ_TIME:-$budget}
[[ -n $src && -n $build && -n $core_lib ]] || { echo "usage: run_fuzz.sh --source DIR --build DIR --core-lib LIB" >&2; exit 2; }
case $target in
  config) sources=() max_len=6000 ;;
  elf) sources=("$src/preload/config/elf.cpp") max_len=65536 ;;
  *) echo "fuzz: unknown target $target (config, elf)" >&2; exit 2 ;;
esac

cxx=${CLANGXX:-}
if [[ -z $cxx ]]; then
  for c in clang++ clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
[[ -n $cxx ]] || { echo "fuzz: SKIPPED: no clang++ (Debian packages clang and libclang-rt-14-dev)"; exit 77; }
corpus=$build/corpus-$target
mkdir -p "$corpus"
probe=$build/probe.cpp
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe"
"$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$build/probe" >/dev/null 2>&1 ||
  { echo "fuzz: SKIPPED: $cxx cannot link -fsanitize=fuzzer,address,undefined (Debian package libclang-rt-14-dev)"; exit 77; }

bin=$build/${target}_fuzz
here=$src/tests/fuzz
# Rebuild when the harness, the code under test or the headers it includes changed.
if [[ ! -x $bin ]] || [[ -n $(find "$here/${target}_fuzz.cpp" "$src/preload" "$src/core" "$src/arch" "$core_lib" \
                                 -newer "$bin" -type f 2>/dev/null | head -1) ]]; then
  echo "fuzz: building $bin"
  "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -fno-strict-aliasing -DLOCKSWAP_LOCK_EVENTS=1 -I"$src" -I"$src/arch/$isa" \
    "$here/${target}_fuzz.cpp" "${sources[@]}" "$core_lib" -lpthread -o "$bin"
fi

seeds=$here/seeds
dict=$build/$target.dict
if [[ $target == config ]]; then
  # Every LOCKSWAP_* name the parser knows, every variant name, and a few
  # numbers at the edges.
  {
    grep -ohE '\bLOCKSWAP_[A-Z_]+\b' "$src/preload/config/config.cpp" | sort -u | grep -vE '_(TUNABLES|FAMILIES|VARIANTS|WRAPPER_VARIABLES)$' |
      while read -r n; do printf '"%s="\n' "$n"; done
    grep -ohE '^\s*X\([a-z_]+, "[a-z0-9-]+"' "$src/preload/config/registry.h" | sed -E 's/.*"([^"]+)"/"\1"/' | sort -u
    printf '"%s"\n' 0 1 00 4000 1000000 10000000 10000001 18446744073709551615 18446744073709551616 "\\x0a" "=" "%p"
  } >"$dict"
else
  # Two objects of a few hundred bytes (one symbol table hashed each way),
  # laid out so that file offsets are link-time addresses: each is a valid
  # file and a valid image. The vDSO's image is written by the target itself.
  seeds=$build/seeds-elf
  mkdir -p "$seeds"
  printf 'int g_lock[4] = {1};\nint lock_it(void) { return g_lock[0]; }\n' >"$build/seed.c"
  for style in sysv gnu; do
    "$cxx" -x c -shared -nostdlib -fPIC -O1 -Wl,--hash-style=$style -Wl,-z,norelro -Wl,-z,noseparate-code \
      -Wl,-z,max-page-size=16 -Wl,--build-id=none "$build/seed.c" -o "$seeds/tiny-$style.so" 2>/dev/null ||
      echo "fuzz: note: no $style seed ($cxx cannot link it)"
  done
  ELF_FUZZ_SEEDS=$seeds "$bin" -runs=0 "$seeds" >/dev/null 2>&1 || true
  # Magic, classes, section and segment types, dynamic tags, and offsets at the edges.
  printf '"%s"\n' '\x7fELF' '\x02\x01\x01' '\x02\x00\x00\x00' '\x0b\x00\x00\x00' '\x03\x00\x00\x00' \
    '\x06\x00\x00\x00' '\xf5\xfe\xff\x6f' '\x18\x00\x00\x00\x00\x00\x00\x00' \
    '\x00\x00\x00\x00\x00\x00\x00\x80' '\xff\xff\xff\xff\xff\xff\xff\xff' '\xc0\xff\xff\xff\xff\xff\xff\xff' >"$dict"
fi

echo "fuzz: running $bin for ${budget} s"
rc=0
log=$build/fuzz-$target.log
"$bin" -max_total_time="$budget" -max_len="$max_len" -dict="$dict" -print_final_stats=1 \
  -artifact_prefix="$build/" -timeout=10 -rss_limit_mb=2048 \
  "$corpus" "$seeds" 2>"$log" || rc=$?
grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::new_units_added)|^${target}_fuzz:|ERROR|SUMMARY|runtime error" "$log" | head -40 || true
if ((rc != 0)); then
  tail -60 "$log"
  echo "fuzz: FAILED (status $rc); the input is in $build/crash-* or $build/leak-* (replay: $bin <file>)"
  exit 1
fi
echo "fuzz: PASSED: $(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$') inputs, corpus $(ls "$corpus" | wc -l) files"
