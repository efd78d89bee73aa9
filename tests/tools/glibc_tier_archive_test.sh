#!/usr/bin/env bash
# tests/tools/glibc_tier_archive_test.sh — scripts/glibc_tier.sh's choice of
# the Debian archive from apt's sources (GLIBC_TIER_APT_DIR: a made-up apt
# directory per case), and GLIBC_TIER_MIRROR over it. Only `archive` runs:
# nothing is built, nothing is fetched. The archives named here are local
# paths and loopback addresses.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=expect.sh
source "$HERE/expect.sh"
TIER=$HERE/../../scripts/glibc_tier.sh
TMP=$(mktemp -d /tmp/lockswap-tier-archive.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

apt_dir() {  # a fresh apt directory; the files are written by the caller
  local d
  d=$(mktemp -d "$TMP/apt.XXXXXX"); mkdir "$d/sources.list.d"; echo "$d"
}
archive() {  # APT_DIR: what glibc_tier.sh archive prints (its status in $rc)
  rc=0
  out=$(env -u GLIBC_TIER_MIRROR GLIBC_TIER_APT_DIR="$1" bash "$TIER" archive 2>"$TMP/err") || rc=$?
}
expect_archive() {  # WHAT APT_DIR WANT
  archive "$2"
  [[ $rc == 0 && "$out" == "$3" ]] && ok "$1" || bad "$1: got '$out' (status $rc): $(cat "$TMP/err")"
}

# Debian 12's layout: deb822, the security archive listed first in the paragraph order.
d=$(apt_dir)
cat >"$d/sources.list.d/debian.sources" <<'SRC'
Types: deb
# a comment inside the paragraph
URIs: http://127.0.0.1:3142/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://127.0.0.1:3142/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
expect_archive "deb822: the archive, not its security companion" "$d" "http://127.0.0.1:3142/debian"

# One-line format with options, deb-src and comments; a .list of another vendor first.
d=$(apt_dir)
cat >"$d/sources.list" <<'SRC'
# deb file:///srv/commented/debian bookworm main
deb-src file:///srv/src-only/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] file:///srv/mirror-a/debian/ bookworm main
SRC
cat >"$d/sources.list.d/other.list" <<'SRC'
deb [signed-by=/usr/share/keyrings/vendor.gpg] file:///srv/vendor/apt stable main
SRC
expect_archive "one-line sources.list with [options]" "$d" "file:///srv/mirror-a/debian"

# A disabled paragraph is skipped; URIs with two values and a continuation line.
d=$(apt_dir)
cat >"$d/sources.list.d/a.sources" <<'SRC'
Types: deb
URIs: file:///srv/disabled/debian
Suites: bookworm
Enabled: no

Types: deb
URIs: file:///srv/vendor/apt
 file:///srv/mirror-b/debian
Suites: bookworm
SRC
expect_archive "disabled paragraph skipped, continuation line read" "$d" "file:///srv/mirror-b/debian"

# A mirror whose path is not /debian: taken for its Debian suite (or key) when nothing better is there.
d=$(apt_dir)
cat >"$d/sources.list.d/vendor.sources" <<'SRC'
Types: deb
URIs: http://127.0.0.1:8080/apt
Suites: nodistro
SRC
cat >"$d/sources.list.d/z.sources" <<'SRC'
Types: deb
URIs: http://127.0.0.1:8081/mirror/
Suites: bookworm
SRC
expect_archive "a Debian suite under another path" "$d" "http://127.0.0.1:8081/mirror"

# Nothing Debian: skipped (77) with the reason and the variable to set.
d=$(apt_dir)
printf 'Types: deb\nURIs: http://127.0.0.1:8080/apt\nSuites: nodistro\n' >"$d/sources.list.d/vendor.sources"
archive "$d"
[[ $rc == 77 && -z "$out" ]] && grep -q "set GLIBC_TIER_MIRROR" "$TMP/err" && ok "no archive: skipped, says what to set" ||
  bad "no archive: status $rc, '$out', $(cat "$TMP/err")"
archive "$TMP/no-such-dir"
[[ $rc == 77 ]] && ok "no apt directory at all: skipped" || bad "no apt directory: status $rc"

# The variable wins over the sources.
d=$(apt_dir)
printf 'deb file:///srv/mirror-a/debian bookworm main\n' >"$d/sources.list"
out=$(GLIBC_TIER_MIRROR=file:///srv/chosen GLIBC_TIER_APT_DIR="$d" bash "$TIER" archive)
[[ "$out" == file:///srv/chosen ]] && ok "GLIBC_TIER_MIRROR overrides apt's sources" || bad "override: '$out'"

((fails == 0)) || { echo "glibc_tier_archive_test: $fails check(s) FAILED"; exit 1; }
echo "glibc_tier_archive_test: passed"
