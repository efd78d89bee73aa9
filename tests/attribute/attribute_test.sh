#!/usr/bin/env bash
# tests/attribute/attribute_test.sh WAITS LIBLOCKSWAP OUTDIR — waits.c under
# `lockswap attribute`, unpreloaded and under LD_PRELOAD=LIBLOCKSWAP
# LOCKSWAP_MUTEX=futex; check_waits.py asserts each kind, its class and a
# plausible time. Exit 77 (with the reason) where eBPF cannot be used.
set -euo pipefail
WAITS=${1:?usage: attribute_test.sh WAITS LIBLOCKSWAP OUTDIR}
LIB=${2:?} OUT=${3:?}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH=${PYTHONPATH:-$HERE/../../tools}
mkdir -p "$OUT"
run() {  # run NAME ENV...: the program under the command; 77 passes through
  local name=$1 rc=0
  shift
  "$PY" -m lockswap_cli attribute --out "$OUT/$name.txt" -- env "$@" "$WAITS" 500 \
    >"$OUT/$name.stdout" 2>"$OUT/$name.stderr" || rc=$?
  if ((rc == 77)); then
    echo "SKIP: attribute/waits: $(grep -m1 'attribute' "$OUT/$name.stderr" || echo 'eBPF unavailable')"
    exit 77
  fi
  ((rc == 0)) || { echo "FAIL: $name: lockswap attribute exited $rc"; cat "$OUT/$name.stderr"; exit 1; }
  cat "$OUT/$name.stderr"
}
run plain
"$PY" "$HERE/check_waits.py" "$OUT/plain.txt" glibc_lock
run preload LD_PRELOAD="$LIB" LOCKSWAP_MUTEX=futex
"$PY" "$HERE/check_waits.py" "$OUT/preload.txt" lockswap
echo "PASS: attribute/waits"
