#!/usr/bin/env bash
# tests/tools/package_test.sh BUILD_DIR — the Debian package, end to end:
# `cpack -G DEB` in the build tree, the package's control fields, the package
# unpacked into a scratch root with `dpkg -x` (what `dpkg -i` would write,
# without its database; `dpkg -i --root` needs a whole dpkg admin tree), and
# the installed command run from there: --list through the installed
# library, `lockswap doctor --summary`, `lockswap help liblockswap` and a
# one-round `lockswap compare` of a tiny program. About 10-30 s; ctest label
# `package`.
set -euo pipefail
build=$(cd "$1" && pwd)
for tool in cpack dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "package: $tool missing, skipped"; exit 77; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lockswap-package.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "package: FAIL: $*" >&2; exit 1; }

# cpack's own install step runs the install rules: the build must be complete.
( cd "$build" && cpack -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1 ) || { cat "$tmp/cpack.log"; fail "cpack"; }
deb=$(find "$tmp/out" -maxdepth 1 -name "lockswap_*.deb" | head -1)
[[ -n "$deb" ]] || { cat "$tmp/cpack.log"; fail "no lockswap_*.deb in $tmp/out"; }
echo "package: built ${deb##*/} ($(du -k "$deb" | cut -f1) KiB)"
depends=$(dpkg-deb -f "$deb" Depends)
echo "package: Depends: $depends"
[[ "$depends" == *python3* && "$depends" == *libc6* ]] || fail "Depends lacks python3 or libc6"

root=$tmp/root
dpkg-deb -x "$deb" "$root"
for f in usr/bin/lockswap usr/bin/lockswap-probe usr/libexec/lockswap/lockswap_cli/__main__.py \
         usr/libexec/lockswap/__main__.py usr/libexec/lockswap/lockswap_cli/doctor.py \
         usr/libexec/lockswap/lockswap_cli/stats.py \
         usr/share/man/man1/lockswap.1 usr/share/man/man1/lockswap-compare.1 \
         usr/share/man/man1/lockswap-report.1 usr/share/man/man1/lockswap-doctor.1 \
         usr/share/man/man7/liblockswap.7 usr/share/doc/lockswap/README.md; do
  [[ -e "$root/$f" ]] || fail "the package lacks /$f"
done
lib=$(find "$root/usr/lib" -name "liblockswap.so.*" | sort | head -1)
[[ -n "$lib" ]] || fail "the package lacks liblockswap.so"
echo "package: unpacked into the scratch root: $(cd "$root" && find . -type f | wc -l) files, library /${lib#$root/}"

cli=$root/usr/bin/lockswap
# The installed command must preload the installed library, not the build tree's.
# (Outputs into variables: grep -q would close the pipe early under pipefail.)
dry=$(env -u LOCKSWAP_LIB "$cli" --dry-run -- true)
[[ "$dry" == *"LD_PRELOAD=$(realpath "$root")/usr/lib/"* ]] || fail "the installed lockswap does not preload its own library: $dry"
list=$(env -u LOCKSWAP_LIB "$cli" --list) || fail "--list through the installed library"
[[ "$list" == *LOCKSWAP_MUTEX* ]] || fail "--list printed no LOCKSWAP_MUTEX"
summary=$(env -u LOCKSWAP_LIB "$cli" doctor --summary) || fail "lockswap doctor --summary"
echo "package: doctor --summary: $summary"
page=$(env -u LOCKSWAP_LIB "$cli" help liblockswap) || fail "lockswap help liblockswap"
[[ "$page" == *LOCKSWAP_SELECT* ]] || fail "lockswap help liblockswap shows no LOCKSWAP_SELECT"
out=$(cd "$tmp" && env -u LOCKSWAP_LIB "$cli" compare --variants futex --repeat 1 --time -- true 2>&1) \
  || { echo "$out"; fail "lockswap compare"; }
grep -q 'futex' <<<"$out" || { echo "$out"; fail "compare printed no futex row"; }
echo "$out" | sed 's/^/package: compare: /' | grep -E 'variant|none|glibc|futex' | head -5
echo "package: ok"
