#!/usr/bin/env bash
# scripts/glibc_tier.sh — the glibc 2.41 test tier: a Debian 13 (trixie) root
# file system, built once with debootstrap and cached outside the clone, in
# which the host-built tests and library run against trixie's glibc.
#
#   scripts/glibc_tier.sh ensure          build the root file system unless cached
#   scripts/glibc_tier.sh run CMD...      run CMD inside it (cwd and environment kept)
#   scripts/glibc_tier.sh version         print the root's glibc version
#   scripts/glibc_tier.sh archive         print the Debian archive debootstrap would use
#
# `run` sees the clone (and BUILD_DIR, when it lies elsewhere) at the same
# absolute paths as on the host, so the paths ctest registered work unchanged.
# Each `run` mounts in a private mount namespace (unshare -m): nothing is left
# mounted when it ends, and parallel runs do not see each other's mounts.
#
# Exit status 77 (ctest's "skipped") with the reason on stderr where the root
# file system cannot be built or entered: not root, no debootstrap, no
# network to Debian's archive, no archive known. A failed build is
# remembered for a while (GLIBC_TIER_RETRY_S) so that hundreds of tests do not
# each retry it.
#
# The archive is the machine's own: the first Debian archive among apt's
# sources (sources.list, then sources.list.d/*.list and deb822 *.sources, in
# apt's order; an entry whose path ends in /debian, else one signed by
# Debian's archive key or naming a Debian suite), so the tier fetches from
# wherever this machine's apt does. No archive host is written here.
#
# Environment: GLIBC_TIER_ROOT (default /var/cache/lockswap/trixie-root),
#              GLIBC_TIER_MIRROR (the archive URL; default: from apt's sources),
#              GLIBC_TIER_APT_DIR (where apt's sources are; default /etc/apt).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TIER_ROOT=${GLIBC_TIER_ROOT:-/var/cache/lockswap/trixie-root}
MIRROR=${GLIBC_TIER_MIRROR:-}
APT_DIR=${GLIBC_TIER_APT_DIR:-/etc/apt}
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

# apt_sources: every enabled binary (`deb`) entry of apt's sources, one line
# each: URI, then 1 when the entry is signed by Debian's archive key, then its
# suites. Read in this order: sources.list, sources.list.d/*.list (one-line
# format), sources.list.d/*.sources (deb822: Types, URIs, Suites, Signed-By,
# Enabled; # comments, continuation lines).
apt_sources() {
  local f files=()
  [[ -f $APT_DIR/sources.list ]] && files+=("$APT_DIR/sources.list")
  for f in "$APT_DIR"/sources.list.d/*.list "$APT_DIR"/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  ((${#files[@]})) || return 0
  awk '
    function flush() {   # one deb822 paragraph
      if (types ~ /(^| )deb( |$)/ && enabled !~ /^(no|false|0)$/)
        for (i = 1; i <= nuris; i++) print uris[i], (signed ~ /debian-archive-keyring/ ? 1 : 0), suites
      types = suites = signed = enabled = ""; nuris = 0; field = ""
    }
    FNR == 1 { if (deb822) flush(); deb822 = FILENAME ~ /\.sources$/ }
    deb822 {
      if ($0 ~ /^[ \t]*#/) next
      if ($0 ~ /^[ \t]*$/) { flush(); next }
      if ($0 ~ /^[ \t]/) { line = $0; name = field } else {
        name = tolower($0); sub(/:.*/, "", name); line = $0; sub(/^[^:]*:/, "", line); field = name
      }
      gsub(/^[ \t]+|[ \t]+$/, "", line)
      if (name == "types") types = types " " line
      else if (name == "uris") { n = split(line, u, /[ \t]+/); for (j = 1; j <= n; j++) if (u[j] != "") uris[++nuris] = u[j] }
      else if (name == "suites") suites = suites " " line
      else if (name == "signed-by") signed = signed " " line
      else if (name == "enabled") enabled = tolower(line)
      next
    }
    {
      sub(/#.*/, "")
      if ($1 != "deb") next
      k = 2; opts = ""
      if ($2 ~ /^\[/) { while (k <= NF && $k !~ /\]$/) { opts = opts " " $k; k++ }; opts = opts " " $k; k++ }
      print $k, (opts ~ /debian-archive-keyring/ ? 1 : 0), " " $(k + 1)
    }
    END { if (deb822) flush() }
  ' "${files[@]}"
}

# apt_archive: the Debian archive of apt's sources (see the header), or
# nothing. Only http(s), ftp and file URIs qualify; a -security or -updates
# suite alone does not name the archive itself.
apt_archive() {
  local uri signed suites best='' second='' s
  while read -r uri signed suites; do
    [[ $uri =~ ^(https?|ftp|file): ]] || continue
    uri=${uri%/}
    if [[ ${uri##*/} == debian ]]; then best=$uri; break; fi
    [[ -n $second ]] && continue
    for s in $suites; do
      if [[ $signed == 1 || $s =~ ^(oldstable|stable|testing|unstable|sid|buster|bullseye|bookworm|trixie|forky)$ ]]; then
        second=$uri; break
      fi
    done
  done < <(apt_sources)
  echo "${best:-$second}"
}

# mirror: GLIBC_TIER_MIRROR, else apt_archive; stops (77) when there is none.
mirror() {
  [[ -n $MIRROR ]] || MIRROR=$(apt_archive)
  [[ -n $MIRROR ]] || skip "no Debian archive among apt's sources in $APT_DIR (sources.list, sources.list.d/); set GLIBC_TIER_MIRROR to one"
}

ready() { [[ -f $STAMP && $(cat "$STAMP") == "$SUITE $PACKAGES" ]]; }

recent_failure() {
  [[ -f $FAILED ]] && (( $(date +%s) - $(stat -c %Y "$FAILED") < RETRY_S ))
}

build_root() {
  [[ $(id -u) -eq 0 ]] || skip "building the $SUITE root file system needs root (debootstrap, chroot)"
  command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/setup.sh installs it)"
  mirror
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
  archive) mirror; echo "$MIRROR" ;;
  *)
    echo "usage: $0 ensure | run CMD... | version | archive" >&2
    exit 2
    ;;
esac
