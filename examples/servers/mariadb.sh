#!/usr/bin/env bash
# examples/servers/mariadb.sh — a private MariaDB 10.11 server under each
# variant, driven by sysbench oltp_read_only and oltp_read_write, plus an
# oversubscribed oltp_read_write (64 client threads on this machine's CPUs).
#
#   mariadb.sh [options]
# options (and the common ones below):
#   --workload W     read_only | read_write | both [both]
#   --oversub N      client threads of the extra oversubscribed oltp_read_write
#                    run [64]; 0: none
#   --tables N       sysbench tables [4]        --table-size N  rows per table [10000]
#   --attribute      after the rounds, per load two labelled attribution runs,
#                    never in the comparison (attribute_lib.sh,
#                    docs/attribution.md): `lockswap attribute --pid MARIADBD`
#                    (root, bpftrace) with no preload, in attribute-*.txt; then
#                    a server with --performance-schema=ON and every
#                    wait/synch instrument on, whose
#                    events_waits_summary_global_by_event_name (truncated before
#                    the load) becomes `lockswap-v1 probe src=pfs app=mariadb
#                    kind=innodb|server name=EVENT n= ns=` records in
#                    attribute-pfs-*.txt
#   --attribute-only the attribution runs alone
#   --attribute-variant V  the eBPF attribution run under variant V (with its
#                    counts dump: both views of one run); default none
# defaults: --variants: the columns tagged bench (preload/config/variant_columns.def), --repeat 6 --time 10
#           --warmup 2 --threads 8 --user lockswap-srv --port 23306
#
# How: mariadb-install-db into a private temporary directory owned by the
# unprivileged user (nothing of the system's MariaDB, /etc/mysql or
# /var/lib/mysql, is used or touched); the server listens on 127.0.0.1 (a
# free port) and a socket in that directory only. The tables are prepared
# once WITHOUT the preload; every run starts from a copy of that data
# directory, with LD_PRELOAD and the variant's settings. Shutdown: mysqladmin
# shutdown; clean = exit status 0, "Shutdown complete" and no [ERROR] in the
# log. sysbench's "ignored errors" (InnoDB deadlocks and lock-wait timeouts it
# retries by design) are reported, not failures; a reconnect is a failure.
# --check: CHECK TABLE on every sysbench table after the load, under the
# variant; anything but "OK" fails the run.
# Only MariaDB's pthread mutexes, condition variables and rwlocks go through
# lockswap; InnoDB's own srw_lock sleeps on raw futexes.
set -euo pipefail
SRV_NAME=mariadb
SRV_TIME=10 SRV_WARMUP=2 SRV_THREADS=8 SRV_PORT_BASE=23306
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/server_lib.sh"
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/attribute_lib.sh"

TABLES=4 TABLE_SIZE=10000 WORKLOAD=both OVERSUB=64
while [[ $# -gt 0 ]]; do
  srv_parse_common "$@" && { shift "$SRV_SHIFT"; continue; }
  attr_parse_common "$@" && { shift "$ATTR_SHIFT"; continue; }
  case "$1" in
    --workload) WORKLOAD=${2:?}; shift 2 ;;
    --oversub) OVERSUB=${2:?}; shift 2 ;;
    --tables) TABLES=${2:?}; shift 2 ;;
    --table-size) TABLE_SIZE=${2:?}; shift 2 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in TABLES TABLE_SIZE; do srv_need_number "--${n,,}" "${!n}" 1; done
srv_need_number --oversub "$OVERSUB" 0
srv_need_number --threads "$SRV_THREADS" 1
case "$WORKLOAD" in
  read_only|read_write) LOADS=("oltp_$WORKLOAD:$SRV_THREADS") ;;
  both) LOADS=("oltp_read_only:$SRV_THREADS" "oltp_read_write:$SRV_THREADS") ;;
  *) echo "error: --workload must be read_only, read_write or both" >&2; exit 2 ;;
esac
((OVERSUB == 0)) || LOADS+=("oltp_read_write:$OVERSUB")
for tool in mariadbd mariadb-install-db mariadb mysqladmin sysbench; do
  command -v "$tool" >/dev/null || die "$tool not found: run scripts/setup.sh"
done

srv_setup
SRV_DB_STOP=maria_shutdown
srv_note "mariadb:   $(mariadbd --version | awk '{print $3}'), $(sysbench --version); ${LOADS[*]} (workload:threads)," \
     "$TABLES tables x $TABLE_SIZE rows"
DATA=$SRV_TMP/data SOCK=$SRV_TMP/mysqld.sock PORT=''
MARIA_EXTRA=()   # more server options (the performance_schema attribution run)

client() { timeout 60 mariadb --no-defaults --protocol=socket -S "$SOCK" -uroot "$@"; }
admin() { timeout 60 mysqladmin --no-defaults --protocol=socket -S "$SOCK" -uroot "$@"; }
maria_ready() { [[ -S "$SOCK" ]] && admin ping >/dev/null 2>&1; }
maria_shutdown() { admin shutdown >/dev/null 2>&1; }
srv_log_ok() {
  local ok=0
  grep -q 'Shutdown complete' "$1" || { log "mariadb: no 'Shutdown complete' in $1"; ok=1; }
  if grep -q '\[ERROR\]' "$1"; then log "mariadb: errors in $1:"; grep '\[ERROR\]' "$1" | head -5 >&2; ok=1; fi
  return "$ok"
}
db_start() {  # db_start LOG: the server on a free port, with SRV_ENV
  PORT=$(free_port "$SRV_PORT_BASE")
  srv_user rm -f "$SOCK"; : >"$1"   # the socket is in the server user's directory
  srv_start mariadbd "$1" maria_ready 120 -- mariadbd --no-defaults \
    --datadir="$DATA" --socket="$SOCK" --port="$PORT" --bind-address=127.0.0.1 \
    --pid-file="$SRV_TMP/mariadbd.pid" --log-error="$1" --tmpdir="$SRV_TMP" \
    --skip-name-resolve --max-connections=300 \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=128M --innodb-flush-log-at-trx-commit=2 \
    ${MARIA_EXTRA[@]+"${MARIA_EXTRA[@]}"}
}
sb_args() {  # sb_args WORKLOAD
  SB_ARGS=("$1" --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$PORT" --mysql-user=sbtest
           --mysql-password= --mysql-db=sbtest --tables="$TABLES" --table-size="$TABLE_SIZE")
}
# db_check: CHECK TABLE on every sysbench table; prints a verdict.
db_check() {
  local list='' i out
  for ((i = 1; i <= TABLES; i++)); do list+="${list:+, }sbtest.sbtest$i"; done
  if out=$(client -N -B -e "CHECK TABLE $list" 2>&1) &&
     [[ $(awk -F'\t' '$3 == "status" && $4 == "OK"' <<<"$out" | wc -l) -eq $TABLES ]] &&
     ! awk -F'\t' '$3 == "error" || $3 == "Error"' <<<"$out" | grep -q .; then
    echo "check-table-ok:$TABLES"
  else
    log "mariadb: CHECK TABLE:"; printf '%s\n' "$out" | head -20 >&2; echo "check-table-FAIL"
  fi
}

# --- prepare once, without the preload ---
SRV_ENV=()
log "mariadb: mariadb-install-db in $DATA"
srv_as timeout 300 mariadb-install-db --no-defaults --datadir="$DATA" --auth-root-authentication-method=normal \
  --skip-test-db --skip-name-resolve >"$SRV_DIR/install.log" 2>&1 \
  || { tail -20 "$SRV_DIR/install.log" >&2; die "mariadb-install-db failed"; }
db_start "$SRV_DIR/prepare.log" || die "mariadbd did not start for the prepare step"
client -e "CREATE DATABASE IF NOT EXISTS sbtest;
           CREATE USER IF NOT EXISTS 'sbtest'@'127.0.0.1';
           GRANT ALL ON sbtest.* TO 'sbtest'@'127.0.0.1';"
log "mariadb: sysbench prepare ($TABLES tables x $TABLE_SIZE rows, no preload)"
sb_args oltp_read_write
timeout 600 sysbench "${SB_ARGS[@]}" --threads="$TABLES" prepare >"$SRV_DIR/sysbench-prepare.log" 2>&1 \
  || { tail -20 "$SRV_DIR/sysbench-prepare.log" >&2; die "sysbench prepare failed"; }
srv_stop maria_shutdown "$SRV_DIR/prepare.log" 90
[[ "$SRV_VERDICT" == clean ]] || die "mariadbd did not shut down cleanly after prepare ($SRV_VERDICT)"
srv_data_snapshot

run_one() {  # run_one WORKLOAD:THREADS VARIANT REP
  local w=${1%%:*} t=${1#*:}
  srv_sysbench_one "mariadb-$w-t$t" "MariaDB $w $t thr" "$w" "$t" "$2" "$3" "$(srv_tag "${w#oltp_}-t$t-$2-r$3")"
}

# attr_app_run LABEL WORKLOAD THREADS (attribute_lib.sh): the performance_schema
# attribution run. Every wait/synch instrument on (enabled and timed); the
# summary is truncated once the server is up, read after the load.
# SUM_TIMER_WAIT is in picoseconds.
attr_app_run() {
  local label=pfs-$1 out=$SRV_DIR/attribute-pfs-$1.txt rows
  SRV_ENV=()
  MARIA_EXTRA=(--performance-schema=ON "--performance-schema-instrument=wait/synch/%=ON")
  srv_data_reset
  db_start "$SRV_DIR/attribute-$label.log" || die "mariadbd did not start for the performance_schema run"
  MARIA_EXTRA=()
  client -e "TRUNCATE TABLE performance_schema.events_waits_summary_global_by_event_name" ||
    log "mariadb: could not truncate the performance_schema summary"
  log "mariadb: attribution run $label: performance_schema wait/synch/% ($2, $3 threads, ${SRV_TIME}s)"
  attr_load "$label" "$2" "$3" || log "mariadb: sysbench failed in the attribution run $label"
  rows=$(client -N -B -e "SELECT EVENT_NAME, COUNT_STAR, SUM_TIMER_WAIT
      FROM performance_schema.events_waits_summary_global_by_event_name
      WHERE COUNT_STAR > 0 AND EVENT_NAME LIKE 'wait/synch/%' ORDER BY SUM_TIMER_WAIT DESC") ||
    log "mariadb: could not read the performance_schema summary"
  awk -F'\t' '{ kind = ($1 ~ /\/innodb\//) ? "innodb" : "server"; name = $1; gsub(/[^A-Za-z0-9_.:\/-]/, "_", name)
                 printf "lockswap-v1 probe src=pfs app=mariadb kind=%s name=%s n=%s ns=%.0f\n", kind, name, $2, $3 / 1000 }' \
    <<<"$rows" >"$out"
  srv_stop "$SRV_DB_STOP" "$SRV_DIR/attribute-$label.log" 90
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" attribute-pfs "$2" "$3" \
    "$(awk '/transactions:/ { gsub(/[(]/, "", $3); print $3 }' "$SRV_DIR/attribute-$label.sysbench.txt")" 0 "$out" \
    >>"$SRV_DIR/attribute.tsv"
  log "mariadb: attribution run $label: $(wc -l <"$out") records in $out; top by time:"
  sort -t= -k7 -n -r "$out" | head -8 >&2 || true
}

((ATTR_MODE == 2)) || srv_matrix "${LOADS[@]}"
attr_matrix "${LOADS[@]}"
((ATTR_MODE == 2)) || srv_finish "MariaDB 10.11 + sysbench"
