#!/usr/bin/env bash
# tests/speed/idle_pair_test.sh OP VARIANT LIB FASTPATH [BOUND] — a native
# variant's idle (uncontended) OP pair costs no more instructions than
# glibc's own pair on this glibc (no LD_PRELOAD), or, where a BOUND is given
# (a variant still above glibc's pair), no more than BOUND; counted by
# callgrind: deterministic,
# unlike any time. Both counts include the same loop and PLT calls
# (examples/bench/fastpath_callgrind.sh). Exit 77 (skipped) without valgrind.
set -euo pipefail
op=$1 variant=$2 lib=$3 bin=$4 bound=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bash "$here/../../examples/bench/fastpath_callgrind.sh" --lib "$lib" --bin "$bin" --out "$out" \
  --variants "none,$variant" --ops "$op" >/dev/null 2>"$out/log" || { cat "$out/log" >&2; exit 1; }
count() { awk -F, -v op="$op" -v v="$1" '$1 == op && $2 == v { print $3 }' "$out/fastpath.csv"; }
glibc=$(count none) native=$(count "$variant")
[[ "$glibc" =~ ^[0-9.]+$ && "$native" =~ ^[0-9.]+$ ]] || { echo "no counts: glibc='$glibc' $variant='$native'" >&2; cat "$out/log" >&2; exit 1; }
echo "$op pair: $variant $native instructions, glibc $glibc (no LD_PRELOAD), callgrind $(valgrind --version)"
if [[ -n "$bound" ]]; then
  echo "ABOVE glibc's pair (target not met; tests/speed/CMakeLists.txt says why): bound $bound"
  if awk -v n="$native" -v b="$bound" 'BEGIN { exit !(n <= b) }'; then echo PASS; exit 0; fi
  echo "FAIL: the $variant $op fast path costs more than its recorded bound $bound" >&2
  exit 1
fi
if awk -v n="$native" -v g="$glibc" 'BEGIN { exit !(n <= g) }'; then
  echo PASS
else
  echo "FAIL: the $variant $op fast path costs more than glibc's own pair" >&2
  exit 1
fi
