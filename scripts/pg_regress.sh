#!/usr/bin/env bash
# scripts/pg_regress.sh — PostgreSQL's own regression suite for the installed
# server (Debian 12's postgresql-15): fetched once from Debian's source
# package of the installed version, built as far as the suite needs and
# cached outside the clone.
#
#   scripts/pg_regress.sh ensure     fetch and build unless cached
#   scripts/pg_regress.sh env        print PG_REGRESS=, PG_REGRESS_INPUTDIR=,
#                                    PG_REGRESS_DLPATH= (shell words; fails
#                                    with the reason when not ensured)
#
# What it takes: pg_regress itself is Debian's (postgresql-client-15 ships it
# under the server's pgxs tree). The suite (sql/, expected/, data/,
# parallel_schedule, resultmap) and regress.c come from `apt-get source
# postgresql-15=<installed version>`, through a private apt state in the
# cache (the machine's own `deb` entries turned into `deb-src` ones: apt's
# configuration on the machine is read, never changed, and no archive host is
# written here). regress.so needs the server's headers, which Debian ships
# only with postgresql-server-dev-15 (clang and LLVM with it): the extracted
# tree is configured instead (no readline, zlib, ICU, LLVM, OpenSSL: none of
# them changes the module ABI the server checks), its generated headers made,
# and regress.c compiled alone. The suite's other two modules, autoinc and
# refint, are the installed server's (linked into the same directory, which
# pg_regress's --dlpath names). About 50 s once on a quiet 2-CPU machine;
# 166 MB in the cache.
#
# Exit status 77 (ctest's "skipped") with the reason on stderr where the
# suite cannot be had: postgresql-15 or pg_regress not installed, the cache
# not writable (not root), no dpkg-source, no deb entry in apt's sources, the
# source package not reachable. A failed attempt is remembered for
# PG_REGRESS_RETRY_S seconds (default 600) so that parallel tests do not each
# retry it.
#
# Environment: PG_REGRESS_CACHE (default /var/cache/lockswap/pg-regress-<version>),
#              PGBIN (default /usr/lib/postgresql/15/bin),
#              PG_REGRESS_APT_DIR (where apt's sources are; default /etc/apt).
set -euo pipefail
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGLIB=$(dirname "$PGBIN")/lib
PG_REGRESS=$PGLIB/pgxs/src/test/regress/pg_regress
APT_DIR=${PG_REGRESS_APT_DIR:-/etc/apt}
RETRY_S=${PG_REGRESS_RETRY_S:-600}

skip() { echo "pg_regress: skipped: $*" >&2; exit 77; }

VERSION=$(dpkg-query -W -f='${Version}' postgresql-15 2>/dev/null || true)
[[ -n "$VERSION" ]] || skip "postgresql-15 is not installed (scripts/setup.sh installs it)"
UPSTREAM=${VERSION%%-*}
CACHE=${PG_REGRESS_CACHE:-/var/cache/lockswap/pg-regress-$UPSTREAM}
TREE=$CACHE/tree
SUITE=$TREE/src/test/regress
DLPATH=$CACHE/lib
STAMP=$CACHE/.ready        # written last: the installed version it was built for
FAILED=$CACHE.failed       # the reason of the last failed attempt

ready() { [[ -f $STAMP && "$(cat "$STAMP")" == "$VERSION" && -f $DLPATH/regress.so ]]; }

# deb_src_lists / deb_src_deb822: the machine's enabled `deb` entries as
# `deb-src` ones, in apt's one-line format (from sources.list and
# sources.list.d/*.list) and in deb822 (from sources.list.d/*.sources).
deb_src_lists() {
  local f
  for f in "$APT_DIR/sources.list" "$APT_DIR"/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    sed -nE 's/^[[:space:]]*deb([[:space:]]+)/deb-src\1/p' "$f"
  done
}
deb_src_deb822() {
  local f
  for f in "$APT_DIR"/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk '
      function flush() { if (keep && !off && body != "") printf "%s\n", body; body = ""; keep = off = 0 }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      tolower($0) ~ /^types:/ { keep = ($0 ~ /[: \t]deb([ \t]|$)/); body = body "Types: deb-src\n"; next }
      tolower($0) ~ /^enabled:[ \t]*(no|false|0)/ { off = 1 }
      { body = body $0 "\n" }
      END { flush() }' "$f"
  done
}

fail() {  # fail REASON: remembered, then skipped
  echo "$(date +%s) $*" >"$FAILED" 2>/dev/null || true
  skip "$*"
}

ensure() {
  ready && return 0
  [[ -x $PG_REGRESS ]] || skip "$PG_REGRESS not installed (package postgresql-client-15)"
  command -v dpkg-source >/dev/null || skip "dpkg-source not installed (package dpkg-dev)"
  command -v gcc >/dev/null && command -v make >/dev/null || skip "gcc or make not installed (scripts/setup.sh)"
  { mkdir -p "$(dirname "$CACHE")" && exec 9>"$CACHE.lock"; } 2>/dev/null ||
    skip "cannot write in $(dirname "$CACHE") (run as root, or set PG_REGRESS_CACHE)"
  flock 9
  ready && return 0   # built by another process while this one waited
  if [[ -f $FAILED ]]; then
    local when why
    read -r when why <"$FAILED" || true
    if (( $(date +%s) - ${when:-0} < RETRY_S )); then skip "an attempt $(( $(date +%s) - when )) s ago failed: $why"; fi
  fi
  local t0 apt log
  t0=$(date +%s)
  rm -rf "$CACHE"
  mkdir -p "$CACHE/apt/sources.list.d" "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial" "$CACHE/src"
  log=$CACHE/build.log
  deb_src_deb822 >"$CACHE/apt/sources.list.d/deb-src.sources"
  deb_src_lists >"$CACHE/apt/sources.list"
  [[ -s $CACHE/apt/sources.list.d/deb-src.sources || -s $CACHE/apt/sources.list ]] ||
    fail "no deb entry in apt's sources under $APT_DIR"
  # A private apt state: the machine's lists and caches stay as they are.
  apt=(-q -o Dir::Etc::SourceList="$CACHE/apt/sources.list" -o Dir::Etc::SourceParts="$CACHE/apt/sources.list.d"
       -o Dir::State::Lists="$CACHE/apt/lists" -o Dir::Cache="$CACHE/apt/cache" -o APT::Sandbox::User=root)
  echo "pg_regress: fetching the source of postgresql-15 $VERSION into $CACHE" >&2
  timeout 300 apt-get "${apt[@]}" update >>"$log" 2>&1 || fail "apt-get update (deb-src) failed: see $log"
  (cd "$CACHE/src" && timeout 600 apt-get "${apt[@]}" source --download-only "postgresql-15=$VERSION") >>"$log" 2>&1 ||
    fail "apt-get source postgresql-15=$VERSION failed: see $log"
  (cd "$CACHE/src" && dpkg-source --no-check -x ./*.dsc "$TREE") >>"$log" 2>&1 || fail "dpkg-source -x failed: see $log"
  # The tree is all that is kept (dpkg-source also links the upstream tarball beside it).
  rm -rf "$CACHE/src" "$CACHE/apt/cache" "$CACHE/apt/lists" "$CACHE"/*.orig.tar.*
  [[ -f $SUITE/parallel_schedule && -f $SUITE/regress.c ]] || fail "no src/test/regress in the source package"
  echo "pg_regress: configuring the tree for regress.so (the server's headers)" >&2
  (cd "$TREE" && ./configure --without-readline --without-zlib --without-icu --without-llvm --without-openssl) \
    >>"$log" 2>&1 || fail "configure failed: see $log"
  make -C "$TREE/src/backend" generated-headers >>"$log" 2>&1 || fail "make generated-headers failed: see $log"
  mkdir -p "$DLPATH"
  # The flags of the tree's Makefile.global that bear on code generation.
  gcc -O2 -fPIC -shared -fno-strict-aliasing -fwrapv -fexcess-precision=standard -D_GNU_SOURCE \
    -I"$TREE/src/include" -o "$DLPATH/regress.so" "$SUITE/regress.c" >>"$log" 2>&1 || fail "regress.so did not build: see $log"
  local m
  for m in autoinc refint; do
    [[ -f $PGLIB/$m.so ]] || fail "$PGLIB/$m.so missing (package postgresql-15)"
    ln -sf "$PGLIB/$m.so" "$DLPATH/$m.so"
  done
  rm -f "$FAILED"
  echo "$VERSION" >"$STAMP"
  echo "pg_regress: suite ready in $(( $(date +%s) - t0 )) s: $SUITE" >&2
}

case "${1:-}" in
  ensure) ensure ;;
  env)
    ready || skip "the suite is not fetched for postgresql-15 $VERSION (scripts/pg_regress.sh ensure)"
    printf 'PG_REGRESS=%q\nPG_REGRESS_INPUTDIR=%q\nPG_REGRESS_DLPATH=%q\n' "$PG_REGRESS" "$SUITE" "$DLPATH" ;;
  *) echo "usage: pg_regress.sh ensure|env" >&2; exit 2 ;;
esac
