#!/usr/bin/env bash
# tests/stats/usdt_probe.sh LIB PROGRAM — the README's bpftrace one-liner on
# the USDT probes of core/trace.h: attached to LIB's lockswap:acquire_begin /
# acquire_end while PROGRAM (tests/stats/stats_test.cpp's contended child)
# runs under the variant of the environment, it must see contended
# acquisitions. Exit 77 with the reason where that cannot be checked: the
# glibc mutex (no lockswap slow path), no bpftrace, not root, bpftrace unable
# to load a program here, or a library built without <sys/sdt.h>.
set -uo pipefail
lib="$1" prog="$2"
skip() { echo "usdt_probe: SKIP: $*"; exit 77; }
fail() { echo "usdt_probe: FAIL: $*" >&2; exit 1; }

[[ "${LOCKSWAP_MUTEX:-glibc}" != glibc ]] || skip "LOCKSWAP_MUTEX=glibc: glibc's own mutex has no lockswap slow path"
command -v bpftrace >/dev/null || skip "bpftrace is not installed"
[[ $(id -u) -eq 0 ]] || skip "bpftrace needs root"
notes=$(readelf -n "$lib" 2>/dev/null)
grep -q 'Provider: lockswap' <<<"$notes" || skip "$lib has no lockswap USDT notes (built without <sys/sdt.h>)"
env -u LD_PRELOAD timeout -k 5 60 bpftrace -e 'BEGIN { exit(); }' >/dev/null 2>&1 || skip "bpftrace cannot load programs here"

# The README's one-liner, with LIB for the library's path, plus a BEGIN
# marker: bpftrace prints it once every probe is attached. Probes given by
# path are attached system-wide (bpftrace -c would look them up in the
# command before it maps the preloaded library).
script="BEGIN { printf(\"attached\\n\"); }
usdt:$lib:lockswap:acquire_begin { @start[tid] = nsecs; }
usdt:$lib:lockswap:acquire_end /@start[tid]/ { @contended_ns = hist(nsecs - @start[tid]); delete(@start[tid]); }"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
env -u LD_PRELOAD bpftrace -e "$script" >"$log" 2>&1 &
bp=$!
# Every step is bounded, so the test ends with its reason instead of at
# ctest's timeout: bpftrace prints its maps when SIGINT stops it, and a
# bpftrace that does not exit (seen in two CI runs on this project's VM,
# never by hand) is killed after 60 s and the test skips with that reason.
stop_bpftrace() {
  kill -INT "$bp" 2>/dev/null
  for _ in $(seq 600); do
    kill -0 "$bp" 2>/dev/null || { wait "$bp"; return 0; }
    sleep 0.1
  done
  kill -KILL "$bp" 2>/dev/null
  wait "$bp"
  return 1
}
for _ in $(seq 300); do
  grep -q '^attached' "$log" && break
  kill -0 "$bp" 2>/dev/null || fail "bpftrace stopped: $(cat "$log")"
  sleep 0.1
done
grep -q '^attached' "$log" || { stop_bpftrace; fail "bpftrace did not attach within 30 s: $(cat "$log")"; }
echo "usdt_probe: bpftrace attached; running the contended program"
LD_PRELOAD="$lib" timeout -k 10 120 "$prog" --child hot_cold || { stop_bpftrace; fail "the contended program failed or ran over 120 s"; }
stop_bpftrace || skip "bpftrace did not exit within 60 s of SIGINT, so it printed no histogram (the program itself passed): $(cat "$log")"
out=$(cat "$log")
echo "$out" | grep -v 'uprobe_events\|failed to detach'
# A histogram line looks like "[2K, 4K)   12 |@@@@   |"; at least one count.
total=$(awk '/^@contended_ns:/ {h = 1; next} h && /^\[/ {n += $(NF - 1)} END {print n + 0}' <<<"$(sed 's/|[^|]*|$/ x/' <<<"$out")")
(( total > 0 )) || fail "no contended acquisition seen through lockswap:acquire_begin/end"
echo "usdt_probe: $total contended acquisitions seen through the probes"
