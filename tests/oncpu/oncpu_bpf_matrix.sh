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

skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "not root: loading the eBPF program needs CAP_BPF and CAP_PERFMON"
[[ -r /sys/kernel/btf/vmlinux ]] || skip "no kernel BTF (/sys/kernel/btf/vmlinux): CO-RE cannot relocate"
[[ -d /sys/fs/bpf ]] || skip "no /sys/fs/bpf to mount a bpf filesystem on"

started=0
cleanup() { if ((started)); then "$LOADER" stop >/dev/null || true; fi; }
trap cleanup EXIT
if ! "$LOADER" status >/dev/null 2>&1; then
  out=$("$LOADER" start 2>&1) || skip "the loader could not start here: $out"
  started=1
fi

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
