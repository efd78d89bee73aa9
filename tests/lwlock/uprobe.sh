#!/usr/bin/env bash
# tests/lwlock/uprobe.sh LIB TARGET VARIANT — a redirected LWLock entry
# under an entry uprobe, as perf probe, bpftrace and pg-lock-tracer attach
# one (docs/lwlock.md, "Redirection"): uprobes on LWLockAcquire and
# LWLockRelease of TARGET (tests/lwlock/uprobe_target.c), through the
# kernel's tracefs,
#   during: attached while TARGET runs, between two of its rounds;
#   before: attached before TARGET starts (the entries then hold the
#           breakpoint when lockswap checks them).
# Each must leave TARGET exiting 0 (its lock excluded, nothing crashed) and
# the probes must count exactly the calls it made while they were attached.
# Exit 77 (skip) without root or a tracefs with uprobe events.
set -uo pipefail
lib=$1 target=$2 variant=$3
tracefs=/sys/kernel/tracing
if [[ ! -w $tracefs/uprobe_events ]]; then
  mount -t tracefs nodev "$tracefs" 2>/dev/null
  [[ -w $tracefs/uprobe_events ]] || { echo "SKIP: no writable $tracefs/uprobe_events (root and CONFIG_UPROBE_EVENTS)"; exit 77; }
fi
group=lockswap_test_$$
tools=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../tools/lwlock" && pwd)
offsets=$(python3 - "$target" "$tools" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
from allowlist_entry import file_offset, symbols
syms = symbols(sys.argv[1])
print(" ".join(f"{file_offset(sys.argv[1], syms[n][0]):#x}" for n in ("LWLockAcquire", "LWLockRelease")))
PY
) || { echo "FAIL: cannot read the entry offsets of $target"; exit 1; }
read -r acquire_off release_off <<<"$offsets"

attach() {
  echo "p:$group/acquire $target:$acquire_off" >>"$tracefs/uprobe_events" &&
    echo "p:$group/release $target:$release_off" >>"$tracefs/uprobe_events" &&
    echo 1 >"$tracefs/events/$group/enable"
}
detach() {
  [[ -d $tracefs/events/$group ]] || return 0
  echo 0 >"$tracefs/events/$group/enable"
  echo "-:$group/acquire" >>"$tracefs/uprobe_events"
  echo "-:$group/release" >>"$tracefs/uprobe_events"
}
hits() { awk -v e="$1" -v t="$target" '$1 == t && ($2 == e || $2 == "'"$group"'/" e) { print $3 }' "$tracefs/uprobe_profile"; }
trap detach EXIT

failures=0
# judge CASE STATUS OUTPUT: TARGET's status and printed call counts against the probes' hits.
judge() {
  local case=$1 rc=$2 out=$3 a r want_a want_r
  want_a=$(sed -n 's/.*LWLockAcquire=\([0-9]*\).*/\1/p' <<<"$out")
  want_r=$(sed -n 's/.*LWLockRelease=\([0-9]*\).*/\1/p' <<<"$out")
  a=$(hits acquire) r=$(hits release)
  if [[ $rc != 0 || -z $want_a || "$a" != "$want_a" || "$r" != "$want_r" ]]; then
    echo "FAIL $variant/$case: status $rc, probe hits acquire=${a:-none} release=${r:-none}, calls ${want_a:-?}/${want_r:-?}; output: $out"
    failures=$((failures + 1))
  else
    echo "ok   $variant/$case: status 0, probes counted $a acquisitions and $r releases, as many as were made"
  fi
}

# during: the probe arrives while the program runs, its entries already redirected.
coproc T { env LD_PRELOAD="$lib" LOCKSWAP_LWLOCK="$variant" "$target" wait 2>&1; }
read -r -t 60 ready <&"${T[0]}"
if [[ $ready == ready ]]; then
  attach || { echo "FAIL: cannot attach the uprobes"; exit 1; }
  echo go >&"${T[1]}"
  out=$(timeout 120 cat <&"${T[0]}")
  wait "$T_PID"; rc=$?
else
  out=$ready rc=1
  kill "$T_PID" 2>/dev/null
fi
judge during "$rc" "$out"
detach

# before: the entries hold the breakpoint when lockswap verifies them.
attach || { echo "FAIL: cannot attach the uprobes"; exit 1; }
out=$(timeout 120 env LD_PRELOAD="$lib" LOCKSWAP_LWLOCK="$variant" "$target" 2>&1)
judge before $? "$out"
detach
((failures == 0))
