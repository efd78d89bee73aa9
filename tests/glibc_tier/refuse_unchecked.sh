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
prog=${3:?}
# expected, work, failures, fail, run, check_clean_run
source "$(dirname "${BASH_SOURCE[0]}")/../behaviour/guest_lib.sh"

check_silent_run() {
  check_clean_run "$1"
  [ -s "$work/err" ] && fail "$1: lockswap wrote to stderr"
}

check_refused() {
  local label=$1 version=$2
  [ "$status" -eq 2 ] || fail "$label: exit status $status, expected 2"
  [ -s "$work/out" ] && fail "$label: main ran (or something wrote to stdout)"
  grep -qF "lockswap: glibc $version is not a version lockswap has been checked against (checked: 2.36 2.41)" \
    "$work/err" || fail "$label: stderr does not name the version and the checked ones"
  grep -qF "LOCKSWAP_GLIBC_UNCHECKED=1" "$work/err" || fail "$label: stderr does not name the override"
}

preload=$lib
run
check_silent_run "glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"

preload="$fake $lib"
for v in 2.99 2.39 2.41.9000; do
  run FAKE_GLIBC_VERSION=$v
  check_refused "fake glibc $v" "$v"
done
run FAKE_GLIBC_VERSION=2.39 LOCKSWAP_GLIBC_UNCHECKED=1
check_silent_run "fake glibc 2.39, LOCKSWAP_GLIBC_UNCHECKED=1"
run FAKE_GLIBC_VERSION=2.39 LOCKSWAP_GLIBC_UNCHECKED=0
check_refused "fake glibc 2.39, LOCKSWAP_GLIBC_UNCHECKED=0" 2.39
run FAKE_GLIBC_VERSION=2.41
check_silent_run "fake glibc 2.41 (checked)"
# A control character in the version is not echoed raw to the terminal.
run FAKE_GLIBC_VERSION=$'2.9\e[2J'
check_refused "fake glibc with an escape" '2.9?[2J'

if [ "$failures" -ne 0 ]; then
  echo "$failures refuse-unchecked check(s) failed"
  exit 1
fi
echo "refuse unchecked: all checks passed"
