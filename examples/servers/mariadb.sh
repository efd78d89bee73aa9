#!/usr/bin/env bash
# examples/servers/mariadb.sh — a private MariaDB server under one lockswap
# variant, driven by sysbench oltp_read_write.
#
#   mariadb.sh [options] prepare          create the instance and the tables
#   mariadb.sh [options] run VARIANT      start mariadbd with liblockswap.so
#                                         preloaded, warm up, measure, shut
#                                         down cleanly, print a RESULT line
#   mariadb.sh [options] all [VARIANT...] prepare + run each (default: glibc
#                                         futex rwsem rwsem-rspin)
#   mariadb.sh [options] clean            remove the instance directory
# options:
#   --dir D          instance directory (datadir, logs, stats) [build/servers/mariadb]
#   --time S         measured seconds [10]      --warmup S   warm-up seconds [2]
#   --threads N      sysbench threads [8]       --tables N   [4]   --table-size N [10000]
#   --port P         first port to try on 127.0.0.1 [23306]
#
# VARIANT: glibc | futex | rwsem | rwsem-rspin | MUTEX/RWLOCK (e.g. glibc/rwsem).
# The server listens on 127.0.0.1 and a socket inside --dir only. It runs as
# root (--user=root) from its own datadir; nothing of the system's MariaDB
# (/etc/mysql, /var/lib/mysql, the service) is used or touched.
#
# RESULT line (stdout, one per run):
#   RESULT bench=mariadb variant=V tps=.. qps=.. p95_ms=.. errors=.. reconnects=..
#          shutdown=clean|unclean|timeout status=ok|FAIL stats=FILE
# errors= is sysbench's "ignored errors": InnoDB deadlocks / lock-wait
# timeouts it retries by design; they are reported, not counted as failures.
# Exit status: 0 when sysbench completed without reconnects and the server
# shut down cleanly (exit status 0, "Shutdown complete", no [ERROR] in its
# log); 1 otherwise.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib.sh
source "$HERE/../../scripts/lib.sh"

DIR=$BUILD_DIR/servers/mariadb
TIME=10 WARMUP=2 THREADS=8 TABLES=4 TABLE_SIZE=10000 PORT_BASE=23306

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --time) TIME=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --tables) TABLES=$2; shift 2 ;;
    --table-size) TABLE_SIZE=$2; shift 2 ;;
    --port) PORT_BASE=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
CMD=$1; shift

for tool in mariadbd mariadb-install-db mariadb mysqladmin sysbench; do
  command -v "$tool" >/dev/null || die "$tool not found: run scripts/setup.sh"
done

DATA=$DIR/data
SOCK=$DIR/mysqld.sock
# A unix socket path is limited to 107 bytes.
if (( ${#SOCK} > 100 )); then SOCK=/tmp/lockswap-mariadb-$$.sock; fi
PIDFILE=$DIR/mysqld.pid   # the server's pid, for the caller's clean-up trap
SERVER_PID=''

client() { timeout 30 mariadb --no-defaults --protocol=socket -S "$SOCK" -uroot "$@"; }
admin() { timeout 60 mysqladmin --no-defaults --protocol=socket -S "$SOCK" -uroot "$@"; }

cleanup() {
  if pid_alive "$SERVER_PID" mariadbd; then
    log "mariadb: stopping leftover server $SERVER_PID"
    admin shutdown >/dev/null 2>&1 || true
    kill_pid "$SERVER_PID" mariadbd 20
  fi
  rm -f "$PIDFILE"
  if [[ "$SOCK" == /tmp/lockswap-mariadb-$$.sock ]]; then rm -f "$SOCK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server VARIANT LOGFILE STATSFILE: start in the background, wait until
# it answers. Sets SERVER_PID and PORT.
start_server() {
  local variant=$1 errlog=$2 stats=$3 envs=()
  PORT=$(free_port "$PORT_BASE")
  rm -f "$SOCK" "$errlog"
  if [[ "$variant" != none ]]; then
    read -r -a envs <<<"$(variant_env "$variant")"
    envs+=("LD_PRELOAD=$LIBLOCKSWAP" "LOCKSWAP_STATS_FILE=$stats")
    : >"$stats"
  fi
  # env execs mariadbd: $! is the server itself.
  env ${envs[@]+"${envs[@]}"} mariadbd --no-defaults --user=root \
    --datadir="$DATA" --socket="$SOCK" --port="$PORT" --bind-address=127.0.0.1 \
    --pid-file="$DIR/mariadbd.pid.server" --log-error="$errlog" \
    --skip-name-resolve --max-connections=200 \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=128M \
    --innodb-flush-log-at-trx-commit=2 \
    </dev/null >>"$errlog" 2>&1 &
  SERVER_PID=$!
  echo "$SERVER_PID" >"$PIDFILE"
  local i
  for ((i = 0; i < 600; i++)); do
    if ! pid_alive "$SERVER_PID"; then
      wait "$SERVER_PID" || true
      tail -20 "$errlog" >&2
      die "mariadbd ($variant) exited during start-up; log: $errlog"
    fi
    if [[ -S "$SOCK" ]] && admin ping >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  tail -20 "$errlog" >&2
  die "mariadbd ($variant) did not answer within 60 s; log: $errlog"
}

# stop_server ERRLOG: mysqladmin shutdown, then wait (bounded) for the
# process. Sets VERDICT to clean | unclean | timeout. Must run in this shell
# (not in $(...)): only the parent can wait for the server's exit status.
VERDICT=''
stop_server() {
  local errlog=$1 rc=0 verdict=clean
  if ! admin shutdown >/dev/null 2>&1; then
    log "mariadb: mysqladmin shutdown failed"
    verdict=unclean
  fi
  # The server is our child: wait (at most 90 s) until it is gone or a
  # zombie, then reap it for its real exit status.
  if ! wait_until 90 eval "! pid_alive $SERVER_PID"; then
    log "mariadb: mariadbd still running 90 s after shutdown; killing it"
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=''
  rm -f "$PIDFILE"
  if ((rc == 137)); then
    verdict=timeout
  elif ((rc != 0)); then
    log "mariadb: mariadbd exited with status $rc"
    verdict=unclean
  elif ! grep -q 'Shutdown complete' "$errlog"; then
    log "mariadb: no 'Shutdown complete' in $errlog"
    verdict=unclean
  fi
  if grep -q '\[ERROR\]' "$errlog"; then
    log "mariadb: errors in $errlog:"
    grep '\[ERROR\]' "$errlog" | head -5 >&2
    verdict=unclean
  fi
  VERDICT=$verdict
}

SB_ARGS=()
sb_args() {
  SB_ARGS=(oltp_read_write --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$PORT"
           --mysql-user=sbtest --mysql-password= --mysql-db=sbtest
           --tables="$TABLES" --table-size="$TABLE_SIZE")
}

do_prepare() {
  local marker="$DIR/prepared.$TABLES.$TABLE_SIZE"
  if [[ -f "$marker" && -d "$DATA/sbtest" ]]; then
    log "mariadb: instance in $DIR already prepared ($TABLES x $TABLE_SIZE rows)"
    return 0
  fi
  log "mariadb: creating instance in $DIR"
  rm -rf "$DATA" "$DIR"/prepared.*
  mkdir -p "$DIR"
  timeout 120 mariadb-install-db --no-defaults --user=root --datadir="$DATA" \
    --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve \
    >"$DIR/install.log" 2>&1 || { tail -20 "$DIR/install.log" >&2; die "mariadb-install-db failed"; }
  start_server none "$DIR/prepare.err" ""
  client -e "CREATE DATABASE IF NOT EXISTS sbtest;
             CREATE USER IF NOT EXISTS 'sbtest'@'127.0.0.1';
             GRANT ALL ON sbtest.* TO 'sbtest'@'127.0.0.1';"
  sb_args
  log "mariadb: sysbench prepare ($TABLES tables x $TABLE_SIZE rows)"
  timeout 300 sysbench "${SB_ARGS[@]}" --threads="$TABLES" prepare >"$DIR/prepare.log" 2>&1 \
    || { tail -20 "$DIR/prepare.log" >&2; die "sysbench prepare failed"; }
  stop_server "$DIR/prepare.err"
  [[ "$VERDICT" == clean ]] || die "mariadbd did not shut down cleanly after prepare ($VERDICT)"
  touch "$marker"
}

do_run() {
  local variant=$1
  require_library
  check_variant "$variant"
  [[ -f "$DIR/prepared.$TABLES.$TABLE_SIZE" ]] || do_prepare
  local tag=${variant//\//_}
  local errlog=$DIR/mysqld-$tag.err stats=$DIR/stats-$tag.log out=$DIR/sysbench-$tag.log
  log "mariadb: $variant: start"
  start_server "$variant" "$errlog" "$stats"
  sb_args
  local sb_rc=0
  if ((WARMUP > 0)); then
    timeout $((WARMUP + 60)) sysbench "${SB_ARGS[@]}" --threads="$THREADS" --time="$WARMUP" \
      run >"$out.warmup" 2>&1 || sb_rc=$?
  fi
  if ((sb_rc == 0)); then
    log "mariadb: $variant: sysbench oltp_read_write ${THREADS} threads ${TIME}s"
    timeout $((TIME + 60)) sysbench "${SB_ARGS[@]}" --threads="$THREADS" --time="$TIME" \
      --percentile=95 run >"$out" 2>&1 || sb_rc=$?
  else
    cp "$out.warmup" "$out"
  fi
  stop_server "$errlog"
  local verdict=$VERDICT
  local tps qps p95 errors reconnects status=ok
  tps=$(sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$out")
  qps=$(sed -n 's/.*queries: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$out")
  p95=$(sed -n 's/.*95th percentile: *\([0-9.]*\).*/\1/p' "$out")
  errors=$(sed -n 's/.*ignored errors: *\([0-9]*\).*/\1/p' "$out")
  reconnects=$(sed -n 's/.*reconnects: *\([0-9]*\).*/\1/p' "$out")
  if ((sb_rc != 0)) || [[ -z "$tps" ]]; then
    log "mariadb: $variant: sysbench failed (status $sb_rc):"
    tail -15 "$out" >&2
    status=FAIL
  fi
  # "ignored errors" are SQL errors sysbench retries by design (InnoDB
  # deadlock / lock-wait timeout, 1213/1205): reported, not a failure. A
  # reconnect means the server dropped a connection: a failure.
  if [[ "${reconnects:-0}" != 0 ]]; then status=FAIL; fi
  [[ "$verdict" == clean ]] || status=FAIL
  echo "RESULT bench=mariadb variant=$variant tps=${tps:-0} qps=${qps:-0} p95_ms=${p95:-0}" \
       "errors=${errors:-?} reconnects=${reconnects:-?} shutdown=$verdict status=$status stats=$stats"
  [[ "$status" == ok ]]
}

mkdir -p "$DIR"
case "$CMD" in
  prepare) do_prepare ;;
  run) [[ $# -eq 1 ]] || die "run takes one VARIANT"; do_run "$1" ;;
  all)
    do_prepare
    rc=0
    for v in "${@:-glibc futex rwsem rwsem-rspin}"; do
      for w in $v; do do_run "$w" || rc=1; done
    done
    exit $rc ;;
  clean) rm -rf "$DATA" "$DIR"/prepared.* ; log "mariadb: removed $DATA" ;;
  *) die "unknown command $CMD (see --help)" ;;
esac
