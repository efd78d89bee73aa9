#!/bin/bash
# tests/glibc_tier/refuse_unchecked.sh <fake-version.so> <liblockswap.so> <guest>
#
# On a glibc version lockswap was not checked against (faked by preloading
# fake-version.so in front of the library), the program stops before main
# with exit status 2, saying the version, the checked ones and the override;
# LOCKSWAP_GLIBC_UNCHECKED=1 lets it run. On the running glibc (2.36 on the
# host, 2.41 in the glibc241 tier) the guest runs untouched.
set -u
fake=${1:?usage: refuse_unchecked.sh <fake-version.so> <liblockswap.so> <guest>}
lib=${2:?}
guest=${3:?}
expected='lockswap good guest: main ran'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  sed 's/^/  stdout| /' "$work/out"
  sed 's/^/  stderr| /' "$work/err"
  failures=$((failures + 1))
}

# run PRELOAD VAR=value...: the guest under PRELOAD with extra settings.
run() {
  local preload=$1
  shift
  timeout 60 env "$@" LD_PRELOAD="$preload" "$guest" >"$work/out" 2>"$work/err"
  status=$?
}

expect_clean() {
  [ "$status" -eq 0 ] && [ "$(cat "$work/out")" = "$expected" ] && [ ! -s "$work/err" ] ||
    fail "$1: expected a clean run (status $status)"
}

expect_refused() {
  local label=$1 version=$2
  [ "$status" -eq 2 ] || fail "$label: exit status $status, expected 2"
  [ ! -s "$work/out" ] || fail "$label: main ran or stdout was written"
  grep -qF "lockswap: glibc $version is not a version lockswap has been checked against (checked: 2.36 2.41)" \
    "$work/err" || fail "$label: stderr does not name the version and the checked ones"
  grep -qF "LOCKSWAP_GLIBC_UNCHECKED=1" "$work/err" || fail "$label: stderr does not name the override"
}

run "$lib"
expect_clean "glibc $(getconf GNU_LIBC_VERSION)"
for v in 2.99 2.39 2.41.9000; do
  run "$fake $lib" FAKE_GLIBC_VERSION=$v
  expect_refused "fake glibc $v" "$v"
done
run "$fake $lib" FAKE_GLIBC_VERSION=2.39 LOCKSWAP_GLIBC_UNCHECKED=1
expect_clean "fake glibc 2.39, LOCKSWAP_GLIBC_UNCHECKED=1"
run "$fake $lib" FAKE_GLIBC_VERSION=2.39 LOCKSWAP_GLIBC_UNCHECKED=0
expect_refused "fake glibc 2.39, LOCKSWAP_GLIBC_UNCHECKED=0" 2.39
run "$fake $lib" FAKE_GLIBC_VERSION=2.41
expect_clean "fake glibc 2.41 (checked)"
# A control character in the version is not echoed raw to the terminal.
run "$fake $lib" FAKE_GLIBC_VERSION=$'2.9\e[2J'
expect_refused "fake glibc with an escape" '2.9?[2J'

if [ "$failures" -eq 0 ]; then echo "PASS: refuse_unchecked"; else echo "$failures failure(s)"; fi
[ "$failures" -eq 0 ]
