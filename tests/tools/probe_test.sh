#!/usr/bin/env bash
# tests/tools/probe_test.sh PROBE WRAPPER — the output formats other
# tools parse (lockswap_stats.probe_c2c, table headers, lockswap doctor).
set -euo pipefail
probe=$1 wrapper=$2
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# c2c: exactly one line, in well under 100 ms (the best of five runs, so a
# loaded machine's one slow start does not decide).
best_ms=1000000
for _ in 1 2 3 4 5; do
  t0=$(date +%s%N)
  out=$("$probe" c2c)
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  (( ms < best_ms )) && best_ms=$ms
  [[ $(printf '%s\n' "$out" | wc -l) -eq 1 ]] || fail "c2c printed more than one line: $out"
  [[ "$out" =~ ^c2c_ns=[0-9]+\ cpus=[0-9]+,[0-9]+$ ]] || fail "c2c format: '$out'"
done
# The probe stops itself after 40 ms of measuring; the rest is start-up.
# A machine with more runnable threads than CPUs stretches any wall time, so
# there the bound is reported, not asserted.
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" -v n="$(nproc)" 'BEGIN { exit !(l < n) }'; then
  (( best_ms < 100 )) || fail "c2c took ${best_ms} ms at best (contract: well under 100 ms)"
else
  echo "note: load average $load on $(nproc) CPUs: the 100 ms bound is not asserted (best ${best_ms} ms)"
fi
echo "c2c: $out (best ${best_ms} ms)"

out=$("$probe" c2c 1 0)
[[ "$out" =~ ^c2c_ns=[0-9]+\ cpus=1,0$ ]] || fail "c2c with explicit CPUs: '$out'"
"$probe" c2c 0 4000 2>/dev/null && fail "c2c on a CPU outside the affinity must fail"

# One allowed CPU: a zero round trip and that CPU alone.
if command -v taskset >/dev/null; then
  out=$(taskset -c 0 "$probe" c2c)
  [[ "$out" == "c2c_ns=0 cpus=0" ]] || fail "c2c on one CPU: '$out'"
fi

out=$("$probe" summary)
[[ $(printf '%s\n' "$out" | wc -l) -eq 1 ]] || fail "summary printed more than one line: $out"
[[ "$out" =~ ^env:\ cpus=[0-9]+\ topology=(none|private|shared)\ c2c_ns=[0-9]+\ load=[0-9.]+\ steal_pct=[0-9.]+\ ebpf=(yes|no)$ ]] ||
  fail "summary format: '$out'"
echo "summary: $out"

"$probe" bogus 2>/dev/null && fail "an unknown subcommand must fail"

out=$("$wrapper" doctor)
for want in '^CPUs usable: [0-9]+ of [0-9]+ online' '^cache topology: ' '^clock: .*clock_gettime [0-9.]+ ns' \
            '^  CPUs [0-9]+,[0-9]+: [0-9]+ ns' '^wake placement: [0-9]+% of [0-9]+ futex wake-ups' \
            '^wake-up sent to another CPU: mean [0-9.]+ us when it idles, [0-9.]+ us when' \
            '^spread: [0-9]+ runnable threads .* used [0-9.]+ of [0-9]+ CPUs' '^scheduler boot options: ' '^steal: ' \
            '^load average: ' '^eBPF ' '^warnings: '; do
  grep -Eq "$want" <<<"$out" || fail "doctor output lacks /$want/:"$'\n'"$out"
done
echo "doctor: $(grep '^warnings:' <<<"$out")"

if command -v taskset >/dev/null; then
  out=$(taskset -c 0 "$wrapper" doctor)
  grep -q 'one usable CPU' <<<"$out" || fail "doctor on one CPU does not say so:"$'\n'"$out"
fi
echo PASS
