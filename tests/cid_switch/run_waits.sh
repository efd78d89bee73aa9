#!/bin/bash
# tests/cid_switch/run_waits.sh <waits_transcript>
#
# Registered through lockswap_add_preload_test (LD_PRELOAD and the variant's
# settings in the environment). Runs the transcript program without any
# preload (glibc's own waits: the reference), then under the preload with
# the switch model off and on under every allocator, and requires:
#   - every transcript identical to the reference (return values, errno,
#     EINTR, timeouts, what the calls wrote back, cancellation);
#   - model on: one switch-out per wait called (cid_switch_out == calls, less
#     those made with asynchronous cancellation: they wait unswitched) and
#     one switch-in per wait that returned, plus the main thread's first
#     (cid_switch_in == calls - cancelled + 1): a thread cancelled inside a
#     wait unwinds without switching in;
#   - model off: no switch event at all.
set -u
prog=${1:?usage: run_waits.sh <waits_transcript>}
preload=${LD_PRELOAD:?run_waits.sh must run with LD_PRELOAD set}
unset LD_PRELOAD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

env -u LD_PRELOAD timeout 120 "$prog" >"$work/reference.txt" 2>"$work/reference.err" ||
  { echo "reference run (no preload) failed:"; cat "$work/reference.err"; exit 1; }
read -r calls cancelled async < <(sed -n 's/^calls \([0-9]*\) cancelled \([0-9]*\) asynchronous \([0-9]*\)$/\1 \2 \3/p' \
  "$work/reference.txt")
[[ -n "${async:-}" ]] || { echo "no 'calls N cancelled M asynchronous A' line in the reference"; exit 1; }

event() {  # event STATS NAME: the count, 0 when absent
  local n
  n=$(sed -n "s/^lockswap-v1 event name=$2 count=\([0-9]*\)$/\1/p" "$1" | awk '{s += $1} END {print s + 0}')
  echo "$n"
}

run() {  # run NAME SWITCH [CID]
  local name=$1 switch=$2 cid=${3:-} stats=$work/stats-$1.txt
  local env=(LD_PRELOAD="$preload" LOCKSWAP_CID_SWITCH="$switch" LOCKSWAP_STATS=counts LOCKSWAP_STATS_FILE="$stats")
  [[ -z "$cid" ]] || env+=(LOCKSWAP_CID="$cid")
  if ! timeout 120 env "${env[@]}" "$prog" >"$work/$name.txt" 2>"$work/$name.err"; then
    echo "FAIL $name: exited with an error"; cat "$work/$name.err"; failures=$((failures + 1)); return
  fi
  if ! diff -u --label "glibc (no preload)" --label "lockswap $name" "$work/reference.txt" "$work/$name.txt"; then
    echo "FAIL $name: transcript differs from glibc's"; failures=$((failures + 1))
  fi
  local out in want_in=$((calls - cancelled + 1))
  out=$(event "$stats" cid_switch_out) in=$(event "$stats" cid_switch_in)
  if [[ "$switch" == 0 ]]; then want_in=0 && calls_want=0; else calls_want=$((calls - async)); fi
  if [[ "$out" != "$calls_want" || "$in" != "$want_in" ]]; then
    echo "FAIL $name: cid_switch_out=$out (want $calls_want) cid_switch_in=$in (want $want_in)"
    failures=$((failures + 1))
  else
    echo "ok   $name: identical transcript, cid_switch_out=$out cid_switch_in=$in"
  fi
}

run model-off 0
for cid in global percpu rseq thread; do run "switch-$cid" 1 "$cid"; done
exit $((failures != 0))
