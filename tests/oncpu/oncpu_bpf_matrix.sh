#!/usr/bin/env bash
# tests/oncpu/oncpu_bpf_matrix.sh LOADER LIB PROGRAM... — the behaviour
# programs (and a short torture) under LOCKSWAP_ONCPU=bpf, for the rwsem
# family whose spinning reads the map: each PROGRAM runs under `rwsem` and
# `rwsem-rspin` through `lockswap-oncpu exec`, with the map live. The other
# LOCKSWAP_ONCPU values are columns of the ordinary test matrix
# (tests/CMakeLists.txt). Exit 77 (skipped) with the reason where the map
# cannot be loaded here.
set -euo pipefail
LOADER=${1:?usage: oncpu_bpf_matrix.sh LOADER LIB PROGRAM...}
LIB=${2:?}
shift 2

# shellcheck source=oncpu_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/oncpu_lib.sh"

fails=0
for variant in "rwsem:LOCKSWAP_RWLOCK=rwsem" "rwsem-rspin:LOCKSWAP_RWLOCK=rwsem-rspin"; do
  for prog in "$@"; do
    args=()
    [[ $(basename "$prog") == torture ]] && args=(--seconds 4 --no-async-cancel)
    log=$(mktemp)
    if "$LOADER" exec -- env LD_PRELOAD="$LIB" LOCKSWAP_ONCPU=bpf LOCKSWAP_MUTEX=rwsem "${variant#*:}" \
      "$prog" ${args[@]+"${args[@]}"} >"$log" 2>&1; then
      echo "ok   ${variant%%:*} $(basename "$prog")"
    else
      echo "FAIL ${variant%%:*} $(basename "$prog"):"
      tail -30 "$log"
      fails=$((fails + 1))
    fi
    rm -f "$log"
  done
done
exit $((fails > 0))
