# tests/common/setuid_guest.sh — the set-up shared by the tests that run a
# guest program setuid, in secure-execution mode (sourced; bash).
#
#   setuid_guest_copy PROG
#       Exits 77 (skip) unless run by root, who alone can make a binary
#       setuid to another user. Copies PROG to $work/guest, $work being a
#       new directory removed at exit, both mode 755 so that `nobody` can
#       run the copy; sets failures=0. The copy is the control until
#       setuid_guest_make_setuid.
#   setuid_guest_make_setuid
#       The copy becomes setuid to `nobody` (root runs it: a real change of
#       user, so the loader sets AT_SECURE).
#   setuid_guest_skip_unless_secure
#       After a run of the setuid copy whose stdout is in $work/out: exits
#       77 where the guest reported secure=0, i.e. the set-user-ID bit had
#       no effect (the temporary directory is mounted nosuid): what follows
#       would prove nothing.
# shellcheck shell=bash

setuid_guest_copy() {
  local prog=$1
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to make a setuid binary"; exit 77; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  chmod 755 "$work"
  cp "$prog" "$work/guest"
  chmod 755 "$work/guest"
  # shellcheck disable=SC2034  # the sourcing test's count of failed checks
  failures=0
}

setuid_guest_make_setuid() {
  chown nobody "$work/guest" && chmod 4755 "$work/guest"
}

setuid_guest_skip_unless_secure() {
  if grep -q 'secure=0' "$work/out"; then
    echo "SKIP: setuid has no effect here (nosuid mount?)"
    exit 77
  fi
}
