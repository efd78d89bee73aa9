#!/usr/bin/env bash
# scripts/glibc_tier.sh — the glibc 2.41 test tier: a Debian 13 (trixie) root
# file system, built once with debootstrap and cached outside the clone, in
# which the host-built tests and library run against trixie's glibc.
#
#   scripts/glibc_tier.sh ensure          build the root file system unless cached
#   scripts/glibc_tier.sh run CMD...      run CMD inside it (cwd and environment kept)
#   scripts/glibc_tier.sh version         print the root's glibc version
#
# `run` sees the clone (and BUILD_DIR, when it lies elsewhere) at the same
# absolute paths as on the host, so the paths ctest registered work unchanged.
# Each `run` mounts in a private mount namespace (unshare -m): nothing is left
# mounted when it ends, and parallel runs do not see each other's mounts.
#
# Exit status 77 (ctest's "skipped") with the reason on stderr where the root
# file system cannot be built or entered: not root, no debootstrap, no
# network to Debian's archive. A failed build is remembered for a while
# (GLIBC_TIER_RETRY_S) so that hundreds of tests do not each retry it.
#
# Environment: GLIBC_TIER_ROOT (default /var/cache/lockswap/trixie-root),
#              GLIBC_TIER_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TIER_ROOT=${GLIBC_TIER_ROOT:-/var/cache/lockswap/trixie-root}
MIRROR=${GLIBC_TIER_MIRROR:-http://deb.debian.org/debian}
SUITE=trixie
RETRY_S=${GLIBC_TIER_RETRY_S:-600}
# What the tests need at run time beyond minbase: libunwind8 (dlopen()ed for
# statistics backtraces), procps (tests that look at processes), python3
# (the `lockswap` command); and g++/cmake/make/libgtest-dev to compile the
# layout checks (tests/glibc_tier) against trixie's own headers.
PACKAGES=libunwind8,procps,python3,g++,cmake,make,libgtest-dev
STAMP=$TIER_ROOT/.lockswap-tier   # written last: its presence means "complete"
FAILED=$TIER_ROOT.failed          # the reason of the last failed build

skip() { echo "glibc_tier: skipped: $*" >&2; exit 77; }

ready() { [[ -f $STAMP && $(cat "$STAMP") == "$SUITE $PACKAGES" ]]; }

recent_failure() {
  [[ -f $FAILED ]] && (( $(date +%s) - $(stat -c %Y "$FAILED") < RETRY_S ))
}

build_root() {
  [[ $(id -u) -eq 0 ]] || skip "building the $SUITE root file system needs root (debootstrap, chroot)"
  command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/setup.sh installs it)"
  local tmp=$TIER_ROOT.tmp log=$TIER_ROOT.log start
  start=$(date +%s)
  rm -rf "$tmp"
  mkdir -p "$(dirname "$TIER_ROOT")"
  echo "glibc_tier: building the $SUITE root file system in $TIER_ROOT (once; log: $log)" >&2
  if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR" >"$log" 2>&1; then
    local why
    why="debootstrap $SUITE from $MIRROR failed (no network to Debian's archive?): $(tail -n 1 "$log")"
    echo "$why" >"$FAILED"
    rm -rf "$tmp"
    skip "$why"
  fi
  rm -rf "$TIER_ROOT"
  mv "$tmp" "$TIER_ROOT"
  echo "$SUITE $PACKAGES" >"$STAMP"
  rm -f "$FAILED"
  echo "glibc_tier: root file system ready in $(( $(date +%s) - start )) s" >&2
}

ensure() {
  ready && return 0
  [[ $(id -u) -eq 0 ]] || skip "the $SUITE root file system is not built and building it needs root"
  mkdir -p "$(dirname "$TIER_ROOT")"
  # One builder at a time; the others wait for it and then find it ready.
  exec 9>"$TIER_ROOT.lock"
  flock 9
  ready && return 0
  recent_failure && skip "$(cat "$FAILED") (retried after ${RETRY_S} s)"
  build_root
}

run_inside() {
  ensure
  [[ $(id -u) -eq 0 ]] || skip "entering the $SUITE root file system needs root (unshare, mount, chroot)"
  local build=${BUILD_DIR:-$ROOT/build}
  build=$(realpath -m "$build")
  export GLIBC_TIER_CWD=$PWD GLIBC_TIER_REPO=$ROOT GLIBC_TIER_BUILD=$build
  # The mounts live and die with this private mount namespace.
  exec unshare --mount --propagation private -- bash -c '
    set -e
    r=$0
    bind() { mkdir -p "$r$1"; mount --rbind "$1" "$r$1"; }
    mount -t proc proc "$r/proc"
    mount --rbind /dev "$r/dev"
    mount --rbind /sys "$r/sys"
    mount -t tmpfs tmpfs "$r/tmp"
    bind "$GLIBC_TIER_REPO"
    case "$GLIBC_TIER_BUILD/" in "$GLIBC_TIER_REPO"/*) ;; *) [ -d "$GLIBC_TIER_BUILD" ] && bind "$GLIBC_TIER_BUILD" ;; esac
    exec chroot "$r" /bin/bash -c "cd \"\$GLIBC_TIER_CWD\" 2>/dev/null || cd /; exec \"\$@\"" chroot-run "${@}"
  ' "$TIER_ROOT" "$@"
}

case ${1:-} in
  ensure) ensure ;;
  run)
    shift
    (($#)) || { echo "usage: $0 run CMD..." >&2; exit 2; }
    run_inside "$@"
    ;;
  version) run_inside getconf GNU_LIBC_VERSION ;;
  *)
    echo "usage: $0 ensure | run CMD... | version" >&2
    exit 2
    ;;
esac
