#!/usr/bin/env bash
# tests/speed/sem_sleep_round_trip_test.sh VARIANT LIB BIN BOUND — the
# instructions of one sleeping semaphore round trip (two sem_waits that
# sleep, two sem_posts that wake: sem_sleep_round_trip.c) under
# LOCKSWAP_SEM=VARIANT are at most BOUND, the count recorded when the sleep
# path was last made cheaper (docs/measurements.md, "The futex semaphore's
# sleeping round trip"), so it can only go down; glibc's own round trip (no
# LD_PRELOAD) is printed beside it. Counted by callgrind over the four calls
# alone (--toggle-collect), at 1000 and 2000 round trips: the difference
# over 1000 leaves out the first round's one-time work (a thread's first
# lock call registers it). Deterministic, unlike any time. Exit 77 (skipped)
# without valgrind or without /proc/PID/task/TID/wchan.
set -euo pipefail
variant=$1 lib=$2 bin=$3 bound=$4
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# count TAG ROUNDS [ENV...]: sets `collected`, the instructions counted
# inside the four calls.
count() {
  local tag=$1 n=$2 rc=0
  shift 2
  env "$@" valgrind --tool=callgrind --callgrind-out-file="$out/$tag.$n.out" \
    --toggle-collect=ping_post --toggle-collect=ping_wait --toggle-collect=pong_wait --toggle-collect=pong_post \
    "$bin" "$n" >"$out/$tag.$n.stdout" 2>"$out/$tag.$n.log" || rc=$?
  if ((rc == 77)); then cat "$out/$tag.$n.stdout"; exit 77; fi
  # unforced > 0: some wait may not have slept, so the count would not be a
  # sleeping round trip's
  if ((rc != 0)) || ! grep -q "^rounds=$n unforced=0$" "$out/$tag.$n.stdout"; then
    echo "FAIL: $tag, $n rounds: exit $rc, $(cat "$out/$tag.$n.stdout")" >&2
    tail -5 "$out/$tag.$n.log" >&2
    exit 1
  fi
  collected=$(grep -oP 'Collected : \K[0-9]+' "$out/$tag.$n.log")
}
# per_round_trip TAG [ENV...]: sets `result`.
per_round_trip() {
  local tag=$1 a
  shift
  count "$tag" 1000 "$@"
  a=$collected
  count "$tag" 2000 "$@"
  result=$(awk -v a="$a" -v b="$collected" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
}
per_round_trip none
glibc=$result
per_round_trip "$variant" LD_PRELOAD="$lib" LOCKSWAP_SEM="$variant"
native=$result
echo "sleeping sem round trip: $variant $native instructions, glibc $glibc (no LD_PRELOAD), bound $bound," \
  "callgrind $(valgrind --version)"
if awk -v n="$native" -v b="$bound" 'BEGIN { exit !(n <= b) }'; then
  echo PASS
else
  echo "FAIL: the $variant semaphore's sleep and wake paths cost more than their recorded bound $bound" >&2
  exit 1
fi
