#!/usr/bin/env bash
# tests/security/runner_symlinks.sh — a server's user cannot make a root-run
# runner write (or read) through a link it plants in its private directory.
#
# Sources examples/servers/server_lib.sh as a runner does, runs srv_setup as
# root, then plays the server's user (the runner's account) with setpriv:
#   1. the run's statistics file is a link to a root-owned file: srv_stats
#      must leave that file as it was and put a plain file in --dir;
#   2. the same link to a root-only secret: its content must not reach --dir;
#   3. the data snapshot and reset (remove, then copy): the user wins the race
#      between the two steps by planting a link to a root-owned directory
#      right after the removal (a PATH shim for rm makes it deterministic);
#      nothing may appear in that directory;
#   4. links inside the data directory when it is copied and emptied, and at
#      clean-up: their targets stay untouched, the private directory goes.
# Exit 77 (ctest SKIP_RETURN_CODE) with the reason when not root.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
[[ $(id -u) -eq 0 ]] || { echo "SKIP: security/runner_symlinks: needs root (the runners drop to the server's user only as root)"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: security/runner_symlinks: setpriv not installed"; exit 77; }
[[ -n "${LIBLOCKSWAP:-}" && -f "$LIBLOCKSWAP" ]] || { echo "LIBLOCKSWAP is not set to the built library" >&2; exit 1; }

WORK=$(mktemp -d /tmp/lockswap-security.XXXXXX)   # root's, 0700
SHIMS=$(mktemp -d /tmp/lockswap-security-shims.XXXXXX)
chmod 755 "$SHIMS"
trap 'rm -rf "$WORK" "$SHIMS"' EXIT
VICTIM_DIR=$WORK/victim
mkdir "$VICTIM_DIR"
chmod 755 "$VICTIM_DIR"   # even a user who could reach it could not write there
TARGET=$VICTIM_DIR/target SECRET=$WORK/secret
echo "root's file, must stay as it is" >"$TARGET"
echo "root-only secret 4f1c" >"$SECRET"
chmod 600 "$SECRET"
state() { (cd "$VICTIM_DIR" && find . -printf '%p %y %s\n' | sort && md5sum target); }
before=$(state)

fails=0
check() {  # check WHAT CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok:   $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
victim_untouched() { [[ "$(state)" == "$before" ]]; }

SRV_NAME=security SRV_DIR=$WORK/results SRV_QUIET=1 SRV_PLOT=0 SRV_VARIANTS=glibc SRV_USER=lockswap-srv
# shellcheck source=../../examples/servers/server_lib.sh
source "$ROOT/examples/servers/server_lib.sh"
srv_setup
trap 'rm -rf "$WORK" "$SHIMS"' EXIT   # srv_setup's clean-up trap runs below, explicitly
[[ ${#SRV_AS[@]} -gt 0 ]] || { echo "the runner did not drop to a server user" >&2; exit 1; }
as_server_user() { "${SRV_AS[@]}" "$@"; }   # the attacker

# 1. statistics file -> root's file
srv_env glibc t1
errlog=$SRV_DIR/server-t1.log
printf 'lockswap: pid 4242 exe=server\nlockswap: mutex_slowpath 7\n' >"$errlog"
as_server_user ln -s "$TARGET" "$SRV_STATS_TMP"
out=$(srv_stats t1 "$errlog")
check "statistics link: root's file untouched" victim_untouched
check "statistics link: --dir holds a plain file" eval '[[ -f "$out" && ! -L "$out" ]]'
check "statistics link: the lines from the log were collected" grep -q '^lockswap: mutex_slowpath 7' "$out"

# 2. statistics file -> root-only secret
srv_env glibc t2
as_server_user ln -s "$SECRET" "$SRV_STATS_TMP"
out=$(srv_stats t2 "")
check "statistics link: the secret did not reach --dir" eval '! grep -q 4f1c "$out"'

# 3. the race between removal and copy, won by the user
cat >"$SHIMS/rm" <<'SHIM'
#!/bin/bash
# rm, then the server's user plants a link where the removed path was.
/bin/rm "$@"; rc=$?
for a in "$@"; do
  if [[ "$a" == "$ATTACK_PATH" ]]; then
    if [[ $(id -u) -eq 0 ]]; then setpriv --reuid="$ATTACK_USER" --regid="$ATTACK_USER" --clear-groups -- ln -sfn "$ATTACK_TARGET" "$a"
    else ln -sfn "$ATTACK_TARGET" "$a"; fi
  fi
done
exit $rc
SHIM
chmod 755 "$SHIMS/rm"
as_server_user mkdir "$SRV_TMP/data"
as_server_user sh -c "echo data >'$SRV_TMP/data/file'"
race() {  # race FUNCTION PATH: FUNCTION with the link planted at PATH after rm
  ( export ATTACK_PATH=$2 ATTACK_TARGET=$VICTIM_DIR ATTACK_USER=$SRV_USER PATH=$SHIMS:$PATH
    "$1" ) >/dev/null 2>&1 || true
  as_server_user /bin/rm -f "$2" 2>/dev/null || true   # the planted link, if still there
}
race srv_data_snapshot "$SRV_TMP/pristine"
check "snapshot race: root's directory untouched" victim_untouched
as_server_user /bin/rm -rf "$SRV_TMP/pristine"
srv_data_snapshot
race srv_data_reset "$SRV_TMP/data"
check "reset race: root's directory untouched" victim_untouched

# 4. links inside the data, copied, emptied, cleaned up
as_server_user /bin/rm -rf "$SRV_TMP/data" "$SRV_TMP/pristine"
as_server_user mkdir "$SRV_TMP/data"
as_server_user ln -s "$VICTIM_DIR" "$SRV_TMP/data/dirlink"
as_server_user ln -s "$TARGET" "$SRV_TMP/data/filelink"
as_server_user ln -s "$VICTIM_DIR" "$SRV_TMP/toplink"
srv_data_snapshot
srv_data_reset
check "links in the data: root's files untouched by copy and removal" victim_untouched
tmp=$SRV_TMP
(srv_cleanup) || true
check "clean-up: root's files untouched" victim_untouched
check "clean-up: the private directory is gone" eval '[[ ! -e "$tmp" ]]'

if ((fails)); then echo "security/runner_symlinks: $fails check(s) FAILED"; exit 1; fi
echo "security/runner_symlinks: passed"
