#!/usr/bin/env bash
# tests/attribute/pg_probes_test.sh OUTDIR — integration/attribute-postgres:
# `lockswap attribute --pg-probes` on a throwaway PostgreSQL 15 cluster.
#
# initdb (as the postgres user, through setpriv) into a temporary directory,
# a server on a free port of 127.0.0.1 and a socket in that directory,
# pgbench -i -s 1 and then pgbench -c 8 -j 2 for PGBENCH_S seconds (default 4;
# scale 1: every transaction updates the one pgbench_branches row, so the
# backends queue on heavyweight tuple/transaction locks and on the WAL locks)
# while `lockswap attribute --pg-probes --pid POSTMASTER` watches the tree.
# Passes when lwlock probe records with tranche names (and n, ns > 0) and
# src=ebpf wait records of the backends came back, the semaphore sleeps of
# the LWLock waits among them (PGSemaphoreLock). The cluster is stopped
# (fast shutdown) and removed whatever happens.
# Exit 77 with the reason when not root, when eBPF cannot be used (the
# command's 77) or when PostgreSQL 15 / pgbench / the postgres user is absent.
set -euo pipefail
OUT=${1:?usage: pg_probes_test.sh OUTDIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}
export PYTHONPATH=${PYTHONPATH:-$HERE/../../tools}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
skip() { echo "SKIP: integration/attribute-postgres: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (eBPF, and the server runs as postgres through setpriv)"
for t in postgres initdb pg_ctl pgbench psql; do
  [[ -x "$PGBIN/$t" ]] || skip "$PGBIN/$t not installed (Debian package postgresql-15)"
done
id postgres >/dev/null 2>&1 || skip "user postgres does not exist (created by the postgresql package)"
command -v setpriv >/dev/null || skip "setpriv not installed"

mkdir -p "$OUT"
BASE=$(mktemp -d /tmp/lockswap-attr-pg.XXXXXX)
chmod 755 "$BASE"
chown postgres: "$BASE"
DATA=$BASE/data PID='' APID=''
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups env -i PATH="$PATH" LANG=C.UTF-8 HOME="$BASE" "$@"; }
cleanup() {
  local rc=$?
  [[ -z "$APID" ]] || { kill -INT "$APID" 2>/dev/null || true; wait "$APID" 2>/dev/null || true; }
  if [[ -f "$DATA/postmaster.pid" ]]; then
    as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  fi
  cp "$BASE/server.log" "$OUT/server.log" 2>/dev/null || true
  rm -rf "$BASE"
  exit "$rc"
}
trap cleanup EXIT

PORT=$(( 26000 + RANDOM % 2000 ))
as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust --no-instructions >"$OUT/initdb.log" 2>&1 ||
  { tail -20 "$OUT/initdb.log"; echo "FAIL: initdb"; exit 1; }
as_pg "$PGBIN/pg_ctl" -D "$DATA" -w -t 60 -l "$BASE/server.log" \
  -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$BASE -c shared_buffers=32MB" start \
  >/dev/null 2>&1 || { tail -20 "$BASE/server.log"; echo "FAIL: the server did not start"; exit 1; }
PID=$(head -1 "$DATA/postmaster.pid")
pgb() { as_pg "$PGBIN/pgbench" -h "$BASE" -p "$PORT" -U postgres "$@"; }
pgb -i -s 1 postgres >"$OUT/pgbench-init.log" 2>&1 || { tail "$OUT/pgbench-init.log"; echo "FAIL: pgbench -i"; exit 1; }

rm -f "$OUT/records.txt" "$OUT/ready"
"$PY" -m lockswap_cli attribute --pg-probes --pg-bin "$PGBIN/postgres" --pid "$PID" \
  --out "$OUT/records.txt" --ready-file "$OUT/ready" 2>"$OUT/summary.txt" &
APID=$!
for ((i = 0; i < 1200; i++)); do
  [[ -f "$OUT/ready" ]] && break
  kill -0 "$APID" 2>/dev/null || break
  sleep 0.1
done
if [[ ! -f "$OUT/ready" ]]; then
  rc=0; wait "$APID" || rc=$?; APID=''
  ((rc != 77)) || skip "$(grep -m1 attribute "$OUT/summary.txt" || echo 'eBPF unavailable')"
  cat "$OUT/summary.txt"; echo "FAIL: lockswap attribute did not attach (status $rc)"; exit 1
fi
pgb -c 8 -j 2 -T "${PGBENCH_S:-4}" postgres >"$OUT/pgbench.log" 2>&1 || { tail "$OUT/pgbench.log"; echo "FAIL: pgbench"; exit 1; }
kill -INT "$APID"
rc=0; wait "$APID" || rc=$?; APID=''
cat "$OUT/summary.txt"
((rc == 0)) || { echo "FAIL: lockswap attribute exited $rc"; exit 1; }

"$PY" - "$OUT/records.txt" <<'PYEOF'
import sys
recs = [l.split() for l in open(sys.argv[1]) if l.startswith("lockswap-v1 ")]
f = lambda w: dict(x.split("=", 1) for x in w[2:] if "=" in x)
probes = [f(w) for w in recs if w[1] == "probe"]
waits = [f(w) for w in recs if w[1] == "wait"]
lw = [p for p in probes if p.get("app") == "postgres" and p.get("kind") == "lwlock"
      and p.get("name", "-") not in ("", "-") and int(p["n"]) > 0 and int(p["ns"]) > 0]
names = sorted({p["name"] for p in lw})
fails = []
if not lw:
    fails.append(f"no lwlock probe records with a tranche name ({len(probes)} probe records)")
if not all(p.get("mode") in ("exclusive", "shared", "wait_until_free") for p in lw):
    fails.append("an lwlock record without a known mode")
if not any(w.get("src") == "ebpf" and w.get("comm") == "postgres" for w in waits):
    fails.append("no wait records of the postgres processes")
if not any("PGSemaphoreLock" in w.get("site", "") + w.get("stack", "") for w in waits):
    fails.append("no wait at PGSemaphoreLock (the LWLock and lock sleeps)")
print(f"lwlock tranches: {names}; {len(waits)} wait records, {len(probes)} probe records")
for x in fails:
    print("FAIL:", x)
sys.exit(1 if fails else 0)
PYEOF
echo "PASS: integration/attribute-postgres"
