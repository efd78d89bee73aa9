#!/bin/bash
# tests/glibc_tier/secure_refusal.sh <guest>
#
# What a setuid program does where lockswap must refuse (the situation of an
# /etc/ld.so.preload entry after a glibc upgrade): in secure-execution mode
# every LOCKSWAP_* setting is ignored, LOCKSWAP_GLIBC_UNCHECKED=1 included,
# so an unchecked glibc stops it before main with exit status 2, as a fact
# the self-check finds wrong does (nothing overrides that anywhere). The guest
# links the fake gnu_get_libc_version, the self-check's test hook and
# liblockswap (the loader ignores LD_PRELOAD paths in secure-execution
# mode); it is made setuid to `nobody` and run by root; the same binary
# without the setuid bit is the control. Skipped (77) when not root or when
# the temporary directory is mounted nosuid.
set -u
prog=${1:?usage: secure_refusal.sh <guest>}
# shellcheck source-path=SCRIPTDIR source=../common/setuid_guest.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common/setuid_guest.sh"
setuid_guest_copy "$prog"
real_version=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
fail() {
  echo "FAIL: $*"
  sed 's/^/  | /' "$work/out" "$work/err"
  failures=$((failures + 1))
}

# run VAR=value...: the guest, with the running glibc's version unless told.
run() {
  env FAKE_GLIBC_VERSION="$real_version" "$@" timeout 60 "$work/guest" >"$work/out" 2>"$work/err"
  status=$?
}

expect_main() {
  local label=$1 secure=$2
  [ "$status" -eq 0 ] && grep -q "secure=$secure lockswap=1" "$work/out" || fail "$label: main did not run"
}

expect_refusal() {
  local label=$1 text=$2
  [ "$status" -eq 2 ] || fail "$label: exit status $status, expected 2"
  [ -s "$work/out" ] && fail "$label: main ran"
  grep -qF "$text" "$work/err" || fail "$label: stderr does not say '$text'"
}

unchecked="lockswap: glibc 2.99 is not a version lockswap has been checked against"
fact="does not behave as lockswap's fast paths expect. Fact mutex_kind:"

run
expect_main control 0
run FAKE_GLIBC_VERSION=2.99 LOCKSWAP_GLIBC_UNCHECKED=1
expect_main "control, glibc 2.99, LOCKSWAP_GLIBC_UNCHECKED=1" 0
run FAKE_GLIBC_VERSION=2.99
expect_refusal "control, glibc 2.99" "$unchecked"

setuid_guest_make_setuid
run
setuid_guest_skip_unless_secure
expect_main setuid 1
run FAKE_GLIBC_VERSION=2.99 LOCKSWAP_GLIBC_UNCHECKED=1
expect_refusal "setuid, glibc 2.99, LOCKSWAP_GLIBC_UNCHECKED=1 (ignored)" "$unchecked"
run SELF_CHECK_FAULT=mutex_kind LOCKSWAP_GLIBC_UNCHECKED=1
expect_refusal "setuid, mutex_kind wrong" "$fact"

[ "$failures" -eq 0 ] || exit 1
echo "secure execution: an unchecked glibc and a wrong fact stop a setuid program with exit status 2"
