#!/usr/bin/env bash
# examples/servers/postgres.sh — a private PostgreSQL 15 server under each
# variant, driven by sysbench (pgsql driver): oltp_read_only in the shape of
# the original reproducer (16 tables x 10,000 rows, shared_buffers=80MB,
# max_connections=250, 8 client threads per CPU) and oltp_read_write.
# PostgreSQL's processes take no pthread lock: their LWLocks sleep on POSIX
# semaphores, so LOCKSWAP_SEM changes the sleep; LOCKSWAP_LWLOCK (--lwlock)
# swaps the LWLock algorithm itself (docs/lwlock.md).
#
#   postgres.sh [options]
# options (and the common ones below):
#   --workload W     read_only | read_write | both [both]
#   --tables N       sysbench tables [16]      --rows N   rows per table [10000]
#   --lwlock V[,V..] one more variant per LOCKSWAP_LWLOCK value V (pg, futex, rwsem,
#                    rwsem-rspin, percid; docs/lwlock.md): glibc's locks with PostgreSQL's
#                    LWLocks on V, the --variants spec glibc:LOCKSWAP_LWLOCK=V; one
#                    tranche alone, the others on pg:
#                    --select 'procarray=lwlock=percid@tranche:ProcArrayLock'
#   --no-fsync       fsync, synchronous_commit and full_page_writes off (default:
#                    PostgreSQL's own settings, under which commits wait for the
#                    WAL flush and backends sleep on their semaphores more often)
#   --attribute      after the rounds, one labelled attribution run per load:
#                    no preload, `lockswap attribute --pg-probes --pid POSTMASTER`
#                    (root, bpftrace: futex/idle/delay waits and the LWLock and
#                    heavyweight lock wait probes) around --time s of sysbench,
#                    in attribute-*.txt; never in the comparison
#                    (attribute_lib.sh, docs/attribution.md)
#   --attribute-only the attribution runs alone
#   --attribute-variant V  the attribution run under variant V (with its counts
#                    dump: both views of one run); default none
# defaults: --variants: the bench columns that choose a semaphore variant (futex,lockref when this was written; none and glibc are always rows) --repeat 6 --time 20 --warmup 3
#           --threads 8 x CPUs (8..128) --user lockswap-srv --port 25432
#
# How: initdb into a private temporary directory owned by the unprivileged
# user; the server listens on 127.0.0.1 (a free port) and a socket in that
# directory only. The tables are prepared once WITHOUT the preload (and the
# amcheck extension created); the stopped data directory is kept as a copy
# that every run starts from. For every run the postmaster is started with
# LD_PRELOAD and the variant's settings, so the postmaster and every backend
# it forks run that variant (processes that share semaphores must). It is
# stopped by its PID (SIGINT, fast shutdown), must exit with status 0 and log
# "database system is shut down". A pg_stat_activity snapshot taken mid-run
# names each pid's process kind for the per-process lock events. --check:
# bt_index_check(index, heapallindexed => true) on every index of the
# sysbench tables after the load, under the variant.
set -euo pipefail
SRV_NAME=postgres
SRV_TIME=20 SRV_WARMUP=3 SRV_PORT_BASE=25432
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/server_lib.sh"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/attribute_lib.sh"
# PostgreSQL takes no pthread lock, only semaphores: by default the columns
# tagged bench whose settings choose a semaphore variant (none and glibc are
# always rows).
SRV_VARIANTS=$(matrix_column_lines | awk '$3 ~ /(^|,)bench(,|$)/ && $2 ~ /LOCKSWAP_SEM=/ && $2 !~ /LOCKSWAP_SEM=glibc/ { print $1 }' | paste -sd, -)
[[ -n "$SRV_VARIANTS" ]] || die "no column tagged bench chooses a semaphore variant in preload/config/variant_columns.def"

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
TABLES=16 ROWS=10000 WORKLOAD=both DURABLE=1 LWLOCKS=''
while [[ $# -gt 0 ]]; do
  srv_parse_common "$@" && { shift "$SRV_SHIFT"; continue; }
  attr_parse_common "$@" && { shift "$ATTR_SHIFT"; continue; }
  case "$1" in
    --workload) WORKLOAD=${2:?}; shift 2 ;;
    --tables) TABLES=${2:?}; shift 2 ;;
    --rows) ROWS=${2:?}; shift 2 ;;
    --no-fsync) DURABLE=0; shift ;;
    --lwlock) LWLOCKS=${2:?}; shift 2 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -z "$LWLOCKS" ]] || srv_add_family_values --lwlock LOCKSWAP_LWLOCK "$LWLOCKS"
srv_need_number --tables "$TABLES" 1
srv_need_number --rows "$ROWS" 1
if [[ -z "$SRV_THREADS" ]]; then
  SRV_THREADS=$(( $(nproc) * 8 )); ((SRV_THREADS >= 8)) || SRV_THREADS=8; ((SRV_THREADS <= 128)) || SRV_THREADS=128
fi
srv_need_number --threads "$SRV_THREADS" 1
((SRV_THREADS <= 240)) || { echo "error: --threads must be <= 240 (max_connections=250)" >&2; exit 2; }
case "$WORKLOAD" in
  read_write|read_only) LOADS=("oltp_$WORKLOAD") ;;
  both) LOADS=(oltp_read_only oltp_read_write) ;;
  *) echo "error: --workload must be read_only, read_write or both" >&2; exit 2 ;;
esac
for tool in postgres initdb psql pg_isready; do
  [[ -x "$PGBIN/$tool" ]] || die "$PGBIN/$tool not found: run scripts/setup.sh (Debian package postgresql-15)"
done
command -v sysbench >/dev/null || die "sysbench not found: run scripts/setup.sh"
[[ "$(sysbench --help 2>&1)" == *'pgsql - PostgreSQL'* ]] || die "this sysbench has no pgsql driver"

srv_setup
SRV_STOP_SIGNAL=INT SRV_DB_STOP=INT   # fast shutdown
if ! nm -D "$LIBLOCKSWAP" 2>/dev/null | grep -qE ' T sem_wait(@|$)'; then
  log "postgres: note: $LIBLOCKSWAP does not export sem_wait: every variant runs glibc's semaphores"
fi
srv_note "postgres:  $("$PGBIN/postgres" --version), $(sysbench --version); ${LOADS[*]}, $SRV_THREADS threads," \
     "$TABLES tables x $ROWS rows, durable=$DURABLE, shared_buffers=80MB max_connections=250"

DATA=$SRV_TMP/data PORT=''
PGOPTS=(-c listen_addresses=127.0.0.1 -c "unix_socket_directories=$SRV_TMP" -c shared_buffers=80MB
        -c max_connections=250 -c huge_pages=off -c logging_collector=off)
((DURABLE)) || PGOPTS+=(-c fsync=off -c synchronous_commit=off -c full_page_writes=off)

psql_q() { timeout 60 "$PGBIN/psql" -X -q -At -h "$SRV_TMP" -p "$PORT" -U postgres -d "${PGDB:-postgres}" "$@"; }
pg_ready() { "$PGBIN/pg_isready" -q -h "$SRV_TMP" -p "$PORT" -U postgres -d postgres 2>/dev/null; }
srv_log_ok() {
  local ok=0
  grep -q 'database system is shut down' "$1" || { log "postgres: no 'database system is shut down' in $1"; ok=1; }
  if grep -E '(PANIC|FATAL):' "$1" |
      grep -vqE 'terminating (connection|autovacuum process) due to administrator command|the database system is (starting up|shutting down)'; then
    log "postgres: errors in $1:"; grep -E '(PANIC|FATAL):' "$1" | head -5 >&2; ok=1
  fi
  return "$ok"
}
db_start() {  # db_start LOG: the server on a free port, with SRV_ENV
  PORT=$(free_port "$SRV_PORT_BASE")
  : >"$1"
  srv_start postgres "$1" pg_ready 60 -- "$PGBIN/postgres" -D "$DATA" -c port="$PORT" "${PGOPTS[@]}"
}
sb_args() {  # sb_args WORKLOAD
  SB_ARGS=("$1" --db-driver=pgsql --pgsql-host=127.0.0.1 --pgsql-port="$PORT" --pgsql-user=sbtest
           --pgsql-password=sbtest --pgsql-db=sbtest --tables="$TABLES" --table-size="$ROWS")
}
# db_check: amcheck on every index of the sysbench tables; prints a verdict.
db_check() {
  local out
  if out=$(PGDB=sbtest psql_q -v ON_ERROR_STOP=1 -c "
      SELECT count(bt_index_check(c.oid, true)) FROM pg_index i
        JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
        JOIN pg_am am ON am.oid = c.relam
       WHERE t.relname LIKE 'sbtest%' AND am.amname = 'btree'" 2>&1) && [[ "$out" =~ ^[0-9]+$ && "$out" -ge "$TABLES" ]]; then
    echo "amcheck-ok:$out"
  else
    log "postgres: amcheck failed: $out"; echo "amcheck-FAIL"
  fi
}

# --- prepare once, without the preload ---
SRV_ENV=()
log "postgres: initdb in $DATA"
srv_as "$PGBIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-instructions \
  >"$SRV_DIR/initdb.log" 2>&1 || { tail -20 "$SRV_DIR/initdb.log" >&2; die "initdb failed"; }
db_start "$SRV_DIR/prepare.log" || die "the server did not start for the prepare step"
psql_q -c "CREATE ROLE sbtest LOGIN PASSWORD 'sbtest'" -c "CREATE DATABASE sbtest OWNER sbtest" >/dev/null
PGDB=sbtest psql_q -c "CREATE EXTENSION IF NOT EXISTS amcheck" >/dev/null
log "postgres: sysbench prepare ($TABLES tables x $ROWS rows, no preload)"
sb_args oltp_read_write
timeout 900 sysbench "${SB_ARGS[@]}" --threads=$(( TABLES < 8 ? TABLES : 8 )) prepare \
  >"$SRV_DIR/sysbench-prepare.log" 2>&1 || { tail -20 "$SRV_DIR/sysbench-prepare.log" >&2; die "sysbench prepare failed"; }
PGDB=sbtest psql_q -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
srv_stop INT "$SRV_DIR/prepare.log"
[[ "$SRV_VERDICT" == clean ]] || die "the server did not shut down cleanly after prepare ($SRV_VERDICT)"
srv_data_snapshot

db_midrun() {  # which pid is which kind of process, for the per-process lock events
  local act=$SRV_DIR/activity-$1.txt
  psql_q -F $'\t' -c "SELECT pid, backend_type FROM pg_stat_activity ORDER BY pid" >"$act" 2>/dev/null || true
  echo "$SRV_PID	postmaster" >>"$act"
  SRV_RUN_EXTRA="activity=$act"
}
run_one() {  # run_one WORKLOAD VARIANT REP
  srv_sysbench_one "postgres-$1-t$SRV_THREADS" "PostgreSQL $1 $SRV_THREADS thr" "$1" "$SRV_THREADS" "$2" "$3" \
    "$(srv_tag "${1#oltp_}-$2-r$3")"
}

ATTR_ARGS=(--pg-probes --pg-bin "$PGBIN/postgres")
((ATTR_MODE == 2)) || srv_matrix "${LOADS[@]}"
attr_matrix "${LOADS[@]}"
((ATTR_MODE == 2)) || srv_finish "PostgreSQL 15 + sysbench"
