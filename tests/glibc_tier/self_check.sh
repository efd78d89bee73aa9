#!/bin/bash
# tests/glibc_tier/self_check.sh — lockswap's start-up self-check of the glibc
# facts its fast paths read (preload/self_check.cpp), seen through its test
# hook (self_check_hook.c, preloaded beside the library).
#
#   self_check.sh faults <hook.so> <fake-version.so> <liblockswap.so> <guest>
#     each fact made wrong in turn (SELF_CHECK_FAULT) stops the guest before
#     main with exit status 2, naming the fact and what to do, whatever
#     LOCKSWAP_GLIBC_UNCHECKED says; with no fault every fact is checked and
#     main runs, on the running glibc and on a faked unchecked one let
#     through by LOCKSWAP_GLIBC_UNCHECKED=1.
#   self_check.sh passes <hook.so> <guest>
#     under a test column's LD_PRELOAD and settings: every fact checked and
#     passed, main ran.
set -u
mode=${1:?usage: self_check.sh faults|passes <hook.so> ...}
hook=${2:?}
# expected, work, failures, fail, run, check_clean_run
source "$(dirname "${BASH_SOURCE[0]}")/../behaviour/guest_lib.sh"

# The facts in the order they are checked; the first two read x86-64's
# thread pointer, rseq needs glibc's rseq registration (on by default).
facts=(mutex_kind mutex_owner rwlock_fields sem_fields zero_init)
[ "$(uname -m)" = x86_64 ] && facts=(thread_pointer cancel_word "${facts[@]}")
[[ ${GLIBC_TUNABLES:-} == *glibc.pthread.rseq=0* ]] || facts+=(rseq)

# All facts checked, in order, then "passed", and main ran.
check_passed() {
  local label=$1
  check_clean_run "$label"
  local listed
  listed=$(sed -n 's/^self-check: \([a-z_]*\) at [0-9]* ns$/\1/p' "$work/err" | tr '\n' ' ')
  [ "$listed" = "${facts[*]} " ] || fail "$label: facts checked: '$listed', expected '${facts[*]} '"
  grep -qE '^self-check: passed in [0-9]+ ns$' "$work/err" || fail "$label: the self-check did not finish"
  grep -q '^lockswap' "$work/err" && fail "$label: lockswap wrote to stderr"
  sed -n "s/^self-check: passed in \(.*\)/$label: the self-check took \1/p" "$work/err"
}

check_refused() {
  local label=$1 fact=$2
  [ "$status" -eq 2 ] || fail "$label: exit status $status, expected 2"
  [ -s "$work/out" ] && fail "$label: main ran (or something wrote to stdout)"
  grep -qE "^lockswap: glibc [0-9.]+ does not behave as lockswap's fast paths expect\. Fact $fact: .*: read 0x[0-9a-f]+, expected 0x[0-9a-f]+\.$" \
    "$work/err" || fail "$label: stderr does not name the fact with what was read and expected"
  grep -qF "(no setting" "$work/err" && grep -qF "overrides this)" "$work/err" ||
    fail "$label: stderr does not say that nothing overrides it"
  grep -qF "take liblockswap.so out of LD_PRELOAD or" "$work/err" && grep -qF "/etc/ld.so.preload)" "$work/err" ||
    fail "$label: stderr does not say what to do"
  grep -q '^self-check: passed' "$work/err" && fail "$label: the self-check passed"
}

case $mode in
  faults)
    fake=${3:?}
    lib=${4:?}
    prog=${5:?}
    preload="$hook $lib"
    run SELF_CHECK_TRACE=1
    check_passed "no fault"
    for fact in "${facts[@]}"; do
      run SELF_CHECK_TRACE=1 SELF_CHECK_FAULT=$fact
      check_refused "$fact wrong" "$fact"
    done
    run SELF_CHECK_FAULT=cancel_word LOCKSWAP_GLIBC_UNCHECKED=1
    [ "$(uname -m)" = x86_64 ] && check_refused "cancel_word wrong, LOCKSWAP_GLIBC_UNCHECKED=1" cancel_word
    # An unchecked version let through is still self-checked.
    preload="$fake $hook $lib"
    run FAKE_GLIBC_VERSION=2.99 LOCKSWAP_GLIBC_UNCHECKED=1 SELF_CHECK_TRACE=1
    check_passed "fake glibc 2.99, LOCKSWAP_GLIBC_UNCHECKED=1"
    run FAKE_GLIBC_VERSION=2.99 LOCKSWAP_GLIBC_UNCHECKED=1 SELF_CHECK_FAULT=sem_fields
    check_refused "fake glibc 2.99, LOCKSWAP_GLIBC_UNCHECKED=1, sem_fields wrong" sem_fields
    ;;
  passes)
    prog=${3:?}
    preload="$hook ${LD_PRELOAD:?run under a test column}"
    run SELF_CHECK_TRACE=1
    check_passed "column ${TEST_VARIANT:-?}"
    ;;
  *) echo "self_check.sh: unknown mode $mode" >&2; exit 2 ;;
esac

if [ "$failures" -ne 0 ]; then
  echo "$failures self-check check(s) failed"
  exit 1
fi
echo "self check ($mode): all checks passed (${facts[*]})"
