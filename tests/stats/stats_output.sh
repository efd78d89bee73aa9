#!/bin/bash
# tests/stats/stats_output.sh <stats_guest> <lockswap wrapper>
#
# Where lockswap's statistics and messages may go, under the variant of the
# environment (LD_PRELOAD is given to the guest only):
#   * statistics files: a FIFO neither hangs the program nor receives the
#     dump, a hard link or another user's file is refused, a fresh pid's %p
#     file that already exists is refused, new files are 0600;
#   * a host that closes its stderr and opens its own file as fd 2 never
#     finds lockswap's text there;
#   * paths in a dump are percent-encoded: an executable whose name holds a
#     newline still gives one record per line;
#   * the statistics signal: only USR1, USR2 and real-time signals; an
#     inherited SIG_IGN is left alone and said once; the handler fits on an
#     alternate signal stack; a burst of signals gives few dumps, the rest
#     counted;
#   * LOCKSWAP_ONCPU=bpf inherited from `lockswap --oncpu`
#     (LOCKSWAP_ONCPU_STRICT=0) degrades with one line where its descriptor
#     is gone; LOCKSWAP_ONCPU_FD is checked whenever set; the wrapper's own
#     variables are accepted.
set -u
guest=${1:?usage: stats_output.sh <stats_guest> <lockswap wrapper>}
wrapper=${2:?usage: stats_output.sh <stats_guest> <lockswap wrapper>}
preload=${LD_PRELOAD:?stats_output.sh must run with LD_PRELOAD set}
unset LD_PRELOAD
work=$(mktemp -d)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  echo "  --- stdout ---"; sed 's/^/  | /' "$work/out" | head -20
  echo "  --- stderr ---"; sed 's/^/  | /' "$work/err" | head -20
  failures=$((failures + 1))
}

# run VAR=value... -- program args... : under the preload, stdout and
# stderr captured, at most 20 s.
run() {
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  timeout 20 env "${vars[@]}" LD_PRELOAD="$preload" "$@" >"$work/out" 2>"$work/err"
  status=$?
}

expect_ran() {
  [ "$status" -eq 0 ] || fail "$1: exit status $status, expected 0"
}

# refused LABEL REASON: the program ran, one line said the file was not
# used and why, and the statistics followed on stderr.
refused() {
  expect_ran "$1"
  [ "$(grep -c "cannot open LOCKSWAP_STATS_FILE=.*($2)" "$work/err")" -eq 1 ] ||
    fail "$1: not exactly one line saying the file was refused ($2)"
  grep -q '^lockswap-v1 end ' "$work/err" || fail "$1: the statistics did not follow on stderr"
}

# --- statistics files -------------------------------------------------------

mkfifo "$work/fifo"
run LOCKSWAP_STATS_FILE="$work/fifo" -- "$guest"
[ "$status" -ne 124 ] || fail "FIFO without a reader: the program hung at exit"
refused "FIFO without a reader" "No such device or address"

cat "$work/fifo" >"$work/fifo.got" &
reader=$!
sleep 0.2
run LOCKSWAP_STATS_FILE="$work/fifo" -- "$guest"
refused "FIFO with a reader" "not a regular file"
kill "$reader" 2>/dev/null  # still waiting if lockswap never opened the FIFO
wait "$reader" 2>/dev/null
[ -s "$work/fifo.got" ] && fail "FIFO with a reader: the dump went into the FIFO"

: >"$work/target"
ln "$work/target" "$work/hardlink"
run LOCKSWAP_STATS_FILE="$work/hardlink" -- "$guest"
refused "hard link" "a file with more than one link"
[ -s "$work/target" ] && fail "hard link: written through the link"

if [ "$(id -u)" -eq 0 ]; then
  : >"$work/theirs"
  chown nobody "$work/theirs"
  run LOCKSWAP_STATS_FILE="$work/theirs" -- "$guest"
  refused "another user's file" "owned by another user"
  [ -s "$work/theirs" ] && fail "another user's file: written"
fi

# %p: the pid is known before the program runs when bash execs it.
bash -c 'echo planted >"$1.$$"; exec env "LOCKSWAP_STATS_FILE=$1.%p" LD_PRELOAD="$2" "$3"' _ \
  "$work/pid" "$preload" "$guest" >"$work/out" 2>"$work/err"
status=$?
refused "%p file planted before the process" "File exists"
planted=$(ls "$work"/pid.*)
[ "$(cat "$planted")" = planted ] || fail "%p: the planted file was written to"

run LOCKSWAP_STATS_FILE="$work/fresh.%p" -- "$guest"
expect_ran "%p fresh"
fresh=$(ls "$work"/fresh.* 2>/dev/null | head -1)
[ -n "$fresh" ] && grep -q '^lockswap-v1 end ' "$fresh" || fail "%p fresh: no statistics file"
[ -n "$fresh" ] && [ "$(stat -c %a "$fresh")" = 600 ] || fail "%p fresh: mode $(stat -c %a "$fresh"), expected 600"
[ -s "$work/err" ] && fail "%p fresh: something on stderr"

# --- a host that reuses fd 2 ------------------------------------------------

run LOCKSWAP_STATS=1 -- "$guest" host-stderr "$work/hostfile"
expect_ran "host reuses fd 2"
[ "$(cat "$work/hostfile")" = host ] || fail "host reuses fd 2: lockswap wrote into the host's file: $(head -3 "$work/hostfile")"
grep -q '^lockswap-v1 end ' "$work/err" || fail "host reuses fd 2: the dump did not reach the original stderr"

run LOCKSWAP_STATS_FILE="$work/missing/stats" -- "$guest" host-stderr "$work/hostfile"
expect_ran "host reuses fd 2, unusable statistics file"
[ "$(cat "$work/hostfile")" = host ] || fail "host reuses fd 2: the open failure went into the host's file"
grep -q 'cannot open LOCKSWAP_STATS_FILE' "$work/err" || fail "host reuses fd 2: the open failure was not said on the original stderr"

# --- paths in a dump ----------------------------------------------------------
# A newline, a space, '%' and a UTF-8 C1 control (CSI, which a terminal obeys)
# in the executable's name: each percent-encoded.

odd="$work/odd"$'\n'"name %x"$'\xc2\x9b'"2J"
cp "$guest" "$odd"
run LOCKSWAP_STATS=profile LOCKSWAP_STATS_FILE="$work/odd.stats" -- "$odd"
expect_ran "newline in the executable's name"
bad=$(grep -cv '^lockswap' "$work/odd.stats")
[ "$bad" -eq 0 ] || fail "newline in the executable's name: $bad line(s) that are not records: $(grep -v '^lockswap' "$work/odd.stats" | head -2)"
grep -q '^lockswap-v1 begin .* exe=[^ ]*/odd%0Aname%20%25x%C2%9B2J$' "$work/odd.stats" ||
  fail "newline in the executable's name: exe not percent-encoded: $(grep 'v1 begin' "$work/odd.stats")"
grep -q '^lockswap-v1 map .* path=[^ ]*/odd%0Aname%20%25x%C2%9B2J$' "$work/odd.stats" ||
  fail "newline in the executable's name: map path not percent-encoded"

# --- the statistics signal ----------------------------------------------------

for sig in PIPE SIGCHLD URG WINCH IO POLL ALRM VTALRM PROF TSTP TTIN TTOU CONT PWR SYS HUP INT TERM QUIT XCPU 13 17 33; do
  run LOCKSWAP_STATS=1 LOCKSWAP_STATS_SIGNAL=$sig -- "$guest"
  [ "$status" -eq 2 ] && [ ! -s "$work/out" ] || fail "LOCKSWAP_STATS_SIGNAL=$sig: status $status, expected 2 before main"
  grep -q 'LOCKSWAP_STATS_SIGNAL = USR1, USR2 or a real-time signal' "$work/err" ||
    fail "LOCKSWAP_STATS_SIGNAL=$sig: the valid choices are not listed"
done
for sig in USR1 SIGUSR2 RTMIN RTMIN+1 SIGRTMAX-2 RTMAX 10 12 40; do
  run LOCKSWAP_STATS=1 LOCKSWAP_STATS_SIGNAL=$sig -- "$guest"
  expect_ran "LOCKSWAP_STATS_SIGNAL=$sig"
done

# Inherited SIG_IGN: left ignored (the raise does nothing), said once.
trap '' USR1
run LOCKSWAP_STATS=1 LOCKSWAP_STATS_SIGNAL=USR1 -- "$guest" raise USR1 3
trap - USR1
expect_ran "inherited SIG_IGN"
[ "$(grep -c 'is ignored in this process' "$work/err")" -eq 1 ] || fail "inherited SIG_IGN: not said exactly once"
[ "$(grep -c '^lockswap-v1 begin ' "$work/err")" -eq 1 ] || fail "inherited SIG_IGN: a dump other than the exit's"

# On a 16 KiB alternate stack (with a guard page below), the dump runs there.
run LOCKSWAP_STATS=profile LOCKSWAP_STATS_SIGNAL=USR2 -- "$guest" altstack USR2
expect_ran "alternate signal stack"
used=$(sed -n 's/^altstack_used=\([0-9]*\) .*/\1/p' "$work/out")
[ -n "$used" ] && [ "$used" -gt 0 ] || fail "alternate signal stack: the handler did not run on it (SA_ONSTACK)"
[ "$(grep -c '^lockswap-v1 begin ' "$work/err")" -eq 2 ] || fail "alternate signal stack: no signal dump"
echo "alternate signal stack: $(cat "$work/out")"

# A burst: 50 signals in a row give one dump (two if the first took 100 ms),
# the others are counted in the exit dump.
run LOCKSWAP_STATS_FILE="$work/burst" LOCKSWAP_STATS_SIGNAL=USR2 -- "$guest" raise USR2 50
expect_ran "signal burst"
dumps=$(grep -c '^lockswap-v1 begin ' "$work/burst")
dropped=$(grep '^lockswap-v1 dropped ' "$work/burst" | tail -1 | sed -n 's/.* signals=\([0-9]*\).*/\1/p')
[ -n "$dropped" ] && [ $((dumps - 1 + dropped)) -eq 50 ] && [ "$dumps" -le 3 ] ||
  fail "signal burst: $dumps dumps (the exit's included), $dropped signals dropped, expected 50 in all and at most 2 signal dumps"

# --- LOCKSWAP_ONCPU inherited through the wrapper ---------------------------

run LOCKSWAP_ONCPU=bpf LOCKSWAP_ONCPU_STRICT=0 LOCKSWAP_ONCPU_FD=77 -- "$guest"
expect_ran "ONCPU=bpf STRICT=0 with a closed descriptor"
[ "$(wc -l <"$work/err")" -eq 1 ] && grep -q '^lockswap: LOCKSWAP_ONCPU=bpf (LOCKSWAP_ONCPU_STRICT=0): .*; using rseq$' "$work/err" ||
  fail "ONCPU=bpf STRICT=0 with a closed descriptor: not one line on stderr"
# Started with fd 2 closed: silent, and still runs.
: >"$work/err"
timeout 20 env LOCKSWAP_ONCPU=bpf LOCKSWAP_ONCPU_STRICT=0 LOCKSWAP_ONCPU_FD=77 LD_PRELOAD="$preload" "$guest" \
  >"$work/out" 2>&-
status=$?
expect_ran "ONCPU=bpf STRICT=0, stderr closed"

run LOCKSWAP_ONCPU=bpf LOCKSWAP_ONCPU_FD=77 -- "$guest"
[ "$status" -eq 2 ] && [ ! -s "$work/out" ] || fail "ONCPU=bpf by hand with a closed descriptor: status $status, expected 2 before main"

for mode in off rseq auto; do
  run LOCKSWAP_ONCPU=$mode LOCKSWAP_ONCPU_FD=x7 -- "$guest"
  [ "$status" -eq 2 ] || fail "LOCKSWAP_ONCPU=$mode LOCKSWAP_ONCPU_FD=x7: status $status, expected 2"
done

run LOCKSWAP_ONCPU_LOADER=/nonexistent LOCKSWAP_ROOT=/nonexistent LOCKSWAP_OVERSUB_STARTED_LOADER=1 LOCKSWAP_LIB="$preload" -- "$guest"
expect_ran "the wrapper's and scripts' variables"
[ -s "$work/err" ] && fail "the wrapper's and scripts' variables: something on stderr"

# `lockswap --oncpu` with a stand-in loader that execs its command as
# `lockswap-oncpu exec --` would, but hands over no map: the command runs,
# with one line.
printf '#!/bin/sh\n[ "$1" = exec ] && shift && [ "$1" = -- ] && shift\nexec "$@"\n' >"$work/loader"
chmod +x "$work/loader"
timeout 20 env LOCKSWAP_ONCPU_LOADER="$work/loader" "$wrapper" --lib "$preload" --oncpu --dry-run -- true >"$work/out" 2>"$work/err"
grep -qx 'LOCKSWAP_ONCPU=bpf' "$work/out" && grep -qx 'LOCKSWAP_ONCPU_STRICT=0' "$work/out" ||
  fail "lockswap --oncpu --dry-run: LOCKSWAP_ONCPU=bpf and LOCKSWAP_ONCPU_STRICT=0 not both set"
timeout 20 env LOCKSWAP_ONCPU_LOADER="$work/loader" "$wrapper" --lib "$preload" --oncpu -- "$guest" >"$work/out" 2>"$work/err"
status=$?
expect_ran "lockswap --oncpu, no map"
[ "$(cat "$work/out")" = "main ran" ] || fail "lockswap --oncpu, no map: main did not run"
[ "$(wc -l <"$work/err")" -eq 1 ] || fail "lockswap --oncpu, no map: not one line on stderr"

if [ "$failures" -ne 0 ]; then
  echo "$failures statistics output check(s) failed"
  exit 1
fi
echo "statistics output: all checks passed"
