#!/usr/bin/env bash
# tests/integration/run.sh — the integration tier: one real server under
# every variant of the test matrix, a few seconds of load each, through the
# runner in examples/servers/ with --check.
#
#   run.sh SERVER OUTDIR VARIANT...     SERVER: postgres | mariadb | memcached
#
# Passes when, for every variant: the server started (as an unprivileged
# user, on 127.0.0.1, data in a temporary directory), the load completed with
# no error and no reconnect, the data check came back clean (PostgreSQL:
# amcheck bt_index_check with heapallindexed on every sysbench index;
# MariaDB: CHECK TABLE on every sysbench table; memcached: a set/get round
# trip), and the server shut down cleanly (exit status 0 and its log's own
# clean-shutdown line). Afterwards no process may still run from the
# runner's temporary directory, and the directory must be gone.
# Exit 77 (ctest SKIP_RETURN_CODE) with the reason when not root or when the
# server's programs are not installed (scripts/setup.sh installs them).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SERVER=${1:?usage: run.sh SERVER OUTDIR VARIANT...}
OUTDIR=${2:?usage: run.sh SERVER OUTDIR VARIANT...}
shift 2
[[ $# -ge 1 ]] || { echo "run.sh: no variants given" >&2; exit 2; }

skip() { echo "SKIP: integration/$SERVER: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (the servers run as their unprivileged users through setpriv)"
need() { command -v "$1" >/dev/null || [[ -x "$1" ]] || skip "$1 not installed (scripts/setup.sh installs it)"; }
need_user() { id "$1" >/dev/null 2>&1 || skip "user $1 does not exist (created by the server's Debian package)"; }
need setpriv
case "$SERVER" in
  postgres)
    for t in postgres initdb psql pg_isready; do need "/usr/lib/postgresql/15/bin/$t"; done
    need sysbench; need_user postgres
    [[ -f /usr/share/postgresql/15/extension/amcheck.control ]] || skip "amcheck extension not installed"
    ARGS=(--workload read_write --tables 2 --rows 2000 --threads 4) ;;
  mariadb)
    for t in mariadbd mariadb-install-db mariadb mysqladmin sysbench; do need "$t"; done
    need_user mysql
    ARGS=(--workload read_write --oversub 0 --tables 2 --table-size 2000 --threads 4) ;;
  memcached)
    need memcached; need memcaslap; need_user memcache
    ARGS=(--client-threads 2 --concurrency 16 --server-threads 4) ;;
  *) echo "run.sh: unknown server $SERVER" >&2; exit 2 ;;
esac
[[ -n "${LIBLOCKSWAP:-}" && -f "$LIBLOCKSWAP" ]] || { echo "run.sh: LIBLOCKSWAP is not set to the built library" >&2; exit 1; }

# shellcheck source=../../scripts/lib.sh
source "$ROOT/scripts/lib.sh"   # pid_alive, kill_pid
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
# Last resort, should the runner itself be killed before its own trap ran:
# its server (by the pid and name it recorded) and its temporary directory.
cleanup() {
  local rc=$? pid comm tmp
  if [[ -f "$OUTDIR/server.pid" ]] && read -r pid comm <"$OUTDIR/server.pid"; then
    echo "integration/$SERVER: stopping leftover $comm $pid"; kill_pid "$pid" "$comm" 20
  fi
  tmp=$(sed -n 's/^tmpdir: *\([^ ]*\).*/\1/p' "$OUTDIR/header.txt" 2>/dev/null || true)
  [[ -z "$tmp" || "$tmp" != /tmp/lockswap-* || ! -d "$tmp" ]] || rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
VARIANTS=$(IFS=,; echo "$*")
start=$(date +%s)
rc=0
# The runner's own trap stops its server and removes its directory on any
# exit; ctest's timeout kills this script, so bound the runner below that.
timeout -k 20 330 bash "$ROOT/examples/servers/$SERVER.sh" --check --repeat 1 --time 3 --warmup 0 --no-plot \
  --variants "$VARIANTS" --dir "$OUTDIR" "${ARGS[@]}" || rc=$?
echo "integration/$SERVER: runner exit status $rc after $(( $(date +%s) - start )) s"

fail=0
# one ok run per variant (none, the reference, and glibc always run)
want=$(printf '%s\n' none glibc "$@" | sort -u | wc -l)
ok=$(awk -F'\t' 'NR > 1 && $11 == "ok"' "$OUTDIR/runs.tsv" 2>/dev/null | cut -f3 | sort -u | wc -l)
if ((ok != want)); then
  echo "FAIL: $ok of $want variants completed cleanly:"; cut -f3,5,9-11,13 "$OUTDIR/runs.tsv" 2>/dev/null || true
  fail=1
fi
((rc == 0)) || { echo "FAIL: the runner exited with status $rc"; fail=1; }
# nothing left behind
tmp=$(sed -n 's/^tmpdir: *\([^ ]*\).*/\1/p' "$OUTDIR/header.txt" 2>/dev/null || true)
if [[ -n "$tmp" ]]; then
  [[ ! -e "$tmp" ]] || { echo "FAIL: $tmp was not removed"; fail=1; }
  for e in /proc/[0-9]*/environ; do
    if grep -qzx "TMPDIR=$tmp" "$e" 2>/dev/null; then
      p=${e#/proc/}; p=${p%/environ}
      echo "FAIL: process $p ($(cat "/proc/$p/comm" 2>/dev/null)) still runs from $tmp"; fail=1
    fi
  done
fi
[[ ! -f "$OUTDIR/server.pid" ]] || { echo "FAIL: $OUTDIR/server.pid left behind"; fail=1; }
if ((fail)); then
  echo "integration/$SERVER: FAILED; logs in $OUTDIR"
  exit 1
fi
echo "integration/$SERVER: passed: ${want} variants ($*), load, checks and shutdown clean"
