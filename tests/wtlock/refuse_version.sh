#!/usr/bin/env bash
# tests/wtlock/refuse_version.sh LIB FAKE_VERSION_LIB WT_OPEN_LINKED WT_OPEN_DLOPEN FAKE_DIAGNOSTIC_LIB
#
# A LOCKSWAP_WTLOCK other than off on a WiredTiger whose version lockswap has
# not checked stops the program with exit status 2 and a line naming the
# version found and the ones checked: before main when WiredTiger comes with
# the program, at the first interposed call when it is dlopen()ed later.
# `off` never checks. The unchecked version is fake_version.c's 3.3.0, loaded
# ahead of the real 3.2 library; the same file built with FAKE_DIAGNOSTIC
# makes the real 3.2 look like a diagnostic build (__wt_rwlock_islocked),
# refused the same way.
set -u
lib=${1:?} fake=${2:?} linked=${3:?} dlopened=${4:?} diagnostic=${5:?}
failures=0
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

# expect NAME WANT_RC WANT_MAIN(yes|no) STDERR_PATTERN|- -- COMMAND...
expect() {
  local name=$1 want_rc=$2 want_main=$3 pattern=$4 rc=0
  shift 5
  "$@" >"$out" 2>"$err" || rc=$?
  local main=no
  grep -q '^main reached$' "$out" && main=yes
  if [[ $rc != "$want_rc" || $main != "$want_main" ]] ||
     [[ $pattern != - ]] && ! grep -qE "$pattern" "$err"; then
    echo "FAIL: $name: exit $rc (want $want_rc), main reached: $main (want $want_main)"
    sed 's/^/  stderr: /' "$err"
    failures=$((failures + 1))
  else
    echo "ok: $name (exit $rc)"
  fi
}

refusal='LOCKSWAP_WTLOCK=[a-z-]+: WiredTiger 3\.3\.0 is not a version .*\(checked: 3\.2\.x\)'
for v in wt rwsem rwsem-rspin percid; do
  expect "linked, $v, 3.3.0: refused before main" 2 no "$refusal" -- \
    env LD_PRELOAD="$lib:$fake" LOCKSWAP_WTLOCK=$v "$linked"
  expect "dlopen, $v, 3.3.0: refused at the first call" 2 yes "$refusal" -- \
    env LD_PRELOAD="$lib" LOCKSWAP_WTLOCK=$v "$dlopened" "$fake" libwiredtiger.so.0
  expect "linked, $v, the real 3.2: runs" 0 yes - -- env LD_PRELOAD="$lib" LOCKSWAP_WTLOCK=$v "$linked"
done
expect "linked, rwsem, diagnostic build: refused before main" 2 no 'is a diagnostic build' -- \
  env LD_PRELOAD="$lib:$diagnostic" LOCKSWAP_WTLOCK=rwsem "$linked"
expect "linked, off, diagnostic build: never checked" 0 yes - -- \
  env LD_PRELOAD="$lib:$diagnostic" LOCKSWAP_WTLOCK=off "$linked"
expect "linked, off, 3.3.0: never checked" 0 yes - -- env LD_PRELOAD="$lib:$fake" LOCKSWAP_WTLOCK=off "$linked"
expect "dlopen, off, 3.3.0: never checked" 0 yes - -- \
  env LD_PRELOAD="$lib" LOCKSWAP_WTLOCK=off "$dlopened" "$fake" libwiredtiger.so.0
expect "unset (off), 3.3.0: never checked" 0 yes - -- env LD_PRELOAD="$lib:$fake" "$linked"
expect "misspelt variant: the valid ones listed" 2 no 'LOCKSWAP_WTLOCK = off wt rwsem rwsem-rspin percid' -- \
  env LD_PRELOAD="$lib" LOCKSWAP_WTLOCK=percpu "$linked"

if ((failures)); then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all cases passed"
