#!/usr/bin/env bash
# examples/servers/pg_lwlock_check.sh — the proof of LOCKSWAP_LWLOCK: a
# throwaway PostgreSQL 15 cluster started under each variant (the postmaster
# with LD_PRELOAD and LOCKSWAP_LWLOCK=V, so every backend it forks runs V;
# `none`: no preload at all), then PostgreSQL's own correctness checks.
#
#   pg_lwlock_check.sh [--variants V[,V...]] [--checks C[,C...]] [--time S]
#                      [--dir D] [--scale N] [--stats yes] [--fallback off]
#
#   --variants  none (no preload), off, pg, futex, rwsem, rwsem-rspin, percid
#               (any value LOCKSWAP_LWLOCK takes) [none,off]
#   --checks    [regress,pgbench,parallel,crash,cancel,uprobe,refuse]
#     regress   pg_regress --use-existing with the parallel schedule (the
#               suite of scripts/pg_regress.sh ensure): every test passes;
#               its summary line is shown, and must be none's when none ran
#               before
#     pgbench   pgbench -i -s SCALE, 64 clients x 4 jobs for --time s, no
#               failed transaction; then amcheck: bt_index_check(i, true) on
#               every btree index and verify_heapam on every table, clean
#     parallel  forced parallel plans (force_parallel_mode=regress, no
#               parallel setup or tuple cost): aggregates, a parallel hash
#               join, a parallel sort and a parallel B-tree build, each
#               plan checked for launched workers and each result against
#               the same query run serially (LWLocks in dynamic shared memory)
#     crash     SIGKILL to one backend under pgbench load: the postmaster
#               must reinitialise shared memory, accept connections again,
#               pass a second pgbench run and amcheck
#     cancel    two backends made to sleep in LWLock waits (OidGenLock
#               exclusive, TwoPhaseStateLock shared) behind a backend that
#               took both and is stopped under gdb: pg_cancel_backend,
#               statement_timeout and pg_terminate_backend must take effect
#               once the locks are released, not before, and leave nothing
#               held; then the holder is SIGKILLed: crash restart, pgbench
#               and amcheck pass. SKIP without gdb or ptrace permission
#     uprobe    bpftrace's uprobes on LWLockAcquire and LWLockRelease,
#               attached during a 16-client pgbench load, then attached
#               before the server starts: the server serves on (no process
#               dies, no failed transaction, amcheck clean) and the probes
#               count calls. SKIP without root or bpftrace
#     refuse    a copy of the postgres binary with one byte of LWLockAcquire
#               changed: under LOCKSWAP_LWLOCK=V (V not off) it must stop
#               with exit status 2 before main, naming the binary's build-id;
#               under off it must run. SKIP where the library refuses
#               nothing (it does not mention LWLockAcquire) and for none.
#               The pristine binary must run under V first.
#   --time S    seconds of each pgbench load [20]
#   --dir D     logs and results [build/servers/pg_lwlock/<date-time>]
#   --scale N   pgbench scale factor [10]
#   --stats yes LOCKSWAP_STATS=counts with a statistics file per run, copied
#               to D/stats-<variant>-<check>.txt; a variant other than off
#               then fails a check in which it took no LWLock (not in effect)
#   --fallback F  a variant the library does not act on yet (it does not
#               mention LWLockAcquire: the setting parses, nothing is
#               redirected) runs as F instead, said so in its line (`pg->off`):
#               the default test keeps running while the variants land
#
# Every (variant, check) starts from a copy of one cluster initialised
# without the preload (initdb --no-locale -E UTF8; pgbench tables at SCALE
# and amcheck when a check needs them), as the unprivileged server user when run as root
# (server_lib.sh), with fsync=off (commits still wait on the WAL write lock)
# and max_connections=120. The server must shut down cleanly after each
# check (exit status 0, "database system is shut down", no PANIC, no FATAL
# but the expected ones).
#
# OUTPUT: per (variant, check) a line `PASS|FAIL|SKIP V/C  N s  detail` on
# stdout and the same as a RESULT line in D/results.txt; logs in D.
# EXIT STATUS: 0 when nothing failed and something passed, 77 when every
# check was skipped or PostgreSQL 15 is not installed (ctest's
# SKIP_RETURN_CODE; the reason on stdout), 1 on any failure, 2 for bad
# arguments.
set -euo pipefail
SRV_NAME=pg_lwlock
SRV_PORT_BASE=26432
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/server_lib.sh"
source "$LOCKSWAP_ROOT/tests/common/options.sh"

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ALL_CHECKS=regress,pgbench,parallel,crash,cancel,uprobe,refuse
variants=none,off checks=$ALL_CHECKS time_s=20 dir='' scale=10 stats=no fallback=''

for a in "$@"; do [[ "$a" == -h || "$a" == --help ]] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }; done
lstest_options pg_lwlock_check.sh variants=variants checks=checks time=time_s dir=dir scale=scale stats=stats fallback=fallback -- "$@"
srv_need_number --time "$time_s" 1
srv_need_number --scale "$scale" 1
[[ "$stats" == yes || "$stats" == no ]] || { echo "error: --stats takes yes or no" >&2; exit 2; }
IFS=', ' read -r -a VARIANTS <<<"$variants"
IFS=', ' read -r -a CHECKS <<<"$checks"
((${#VARIANTS[@]} && ${#CHECKS[@]})) || { echo "error: no variant or no check" >&2; exit 2; }
for c in "${CHECKS[@]}"; do
  [[ ",$ALL_CHECKS," == *",$c,"* ]] || { echo "error: unknown check '$c' ($ALL_CHECKS)" >&2; exit 2; }
done
for tool in postgres initdb psql pg_isready pgbench; do
  [[ -x "$PGBIN/$tool" ]] || { echo "SKIP: $PGBIN/$tool not installed (scripts/setup.sh: postgresql-15)"; exit 77; }
done
require_library
# lwlock_acts: the library redirects LWLocks at all (it names LWLockAcquire).
lwlock_acts() { grep -qa LWLockAcquire "$LIBLOCKSWAP"; }
for v in "${VARIANTS[@]}" ${fallback:+"$fallback"}; do  # the library's own word on each value, before any server runs
  [[ "$v" == none ]] && continue
  out=$(env -i LOCKSWAP_LWLOCK="$v" LD_PRELOAD="$LIBLOCKSWAP" /bin/true 2>&1) ||
    { printf '%s\n' "$out" >&2; echo "error: LOCKSWAP_LWLOCK=$v rejected by $LIBLOCKSWAP" >&2; exit 2; }
done
REGRESS_ENV=''
if [[ " ${CHECKS[*]} " == *" regress "* ]]; then  # fetched and built once, then cached
  REGRESS_ENV=$(bash "$LOCKSWAP_ROOT/scripts/pg_regress.sh" ensure 2>&1 >/dev/null &&
                bash "$LOCKSWAP_ROOT/scripts/pg_regress.sh" env 2>&1) || REGRESS_ENV="unavailable: ${REGRESS_ENV#pg_regress: }"
fi

SRV_DIR=$dir
srv_setup_dirs
RESULTS=$SRV_DIR/results.txt
: >"$RESULTS"
SRV_STOP_SIGNAL=INT   # fast shutdown
DATA=$SRV_TMP/data PORT=''
PGOPTS=(-c listen_addresses=127.0.0.1 -c "unix_socket_directories=$SRV_TMP" -c max_connections=120
        -c huge_pages=off -c logging_collector=off -c fsync=off -c max_worker_processes=16
        -c max_parallel_workers=8)
log "pg_lwlock: $("$PGBIN/postgres" --version); library $LIBLOCKSWAP; variants ${VARIANTS[*]}; checks ${CHECKS[*]}"

# --- the server -------------------------------------------------------------

q() { timeout "${Q_TIMEOUT:-120}" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SRV_TMP" -p "$PORT" -U postgres -d "${PGDB:-bench}" "$@"; }
pg_ready() { "$PGBIN/pg_isready" -q -h "$SRV_TMP" -p "$PORT" -U postgres -d postgres 2>/dev/null; }
bench() { timeout $((time_s + 180)) "$PGBIN/pgbench" -h "$SRV_TMP" -p "$PORT" -U postgres "$@" bench; }

# srv_log_ok LOG (srv_stop's judge): the clean-shutdown line, no PANIC, and
# no FATAL but those of a shutdown, a start-up, a crash restart or a
# terminated connection (the crash and cancel checks cause them).
srv_log_ok() {
  local ok=0
  grep -q 'database system is shut down' "$1" || { log "pg_lwlock: no 'database system is shut down' in $1"; ok=1; }
  if grep -q 'PANIC:' "$1" || grep 'FATAL:' "$1" | grep -vqE 'terminating [a-z ]+ due to administrator command|the database system is (starting up|shutting down|in recovery mode|not yet accepting connections)'; then
    log "pg_lwlock: errors in $1:"; grep -E '(PANIC|FATAL):' "$1" | head -5 >&2; ok=1
  fi
  return "$ok"
}

# db_start LOG: the server on a free port with SRV_ENV.
db_start() {
  PORT=$(free_port "$SRV_PORT_BASE")
  srv_start postgres "$1" pg_ready 90 -- "$PGBIN/postgres" -D "$DATA" -c port="$PORT" "${PGOPTS[@]}"
}

# amcheck_all: bt_index_check(index, heapallindexed) on every btree index
# and verify_heapam on every table and materialised view of the database;
# prints what it checked, fails on any corruption or error.
amcheck_all() {
  local out
  out=$(Q_TIMEOUT=600 q -c "
    SELECT count(bt_index_check(c.oid, true)) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      JOIN pg_am am ON am.oid = c.relam WHERE am.amname = 'btree' AND c.relpersistence <> 't' AND i.indisvalid" \
    -c "SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'm') AND relpersistence <> 't'" \
    -c "SELECT count(*) FROM pg_class c, verify_heapam(c.oid) WHERE c.relkind IN ('r', 'm') AND c.relpersistence <> 't'" 2>&1) ||
    { echo "amcheck error: $(tr '\n' ' ' <<<"$out" | cut -c1-300)"; return 1; }
  local -a n
  mapfile -t n <<<"$out"
  [[ "${n[2]:-x}" == 0 && "${n[0]:-0}" -gt 0 ]] || { echo "amcheck: ${n[2]:-?} corrupt heap tuples (or no index: ${n[0]:-?})"; return 1; }
  echo "amcheck clean: ${n[0]} btree indexes, ${n[1]} tables"
}

# pgbench_run TAG ARGS...: one pgbench load; fails on a failed transaction
# or a non-zero exit; prints its tps.
pgbench_run() {
  local tag=$1 out=$SRV_DIR/pgbench-$1.log rc=0
  shift
  bench "$@" >"$out" 2>&1 || rc=$?
  if ((rc != 0)) || ! grep -q 'number of failed transactions: 0 ' "$out"; then
    echo "pgbench $tag failed (status $rc): $(grep -m2 -E 'error|abort|failed' "$out" | tr '\n' ' ')"; return 1
  fi
  echo "pgbench $tag $(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$out" | head -1 | cut -d. -f1) tps"
}

# --- the checks: each prints one detail line, status 0 (pass), 1 (fail), 77 (skip) --

check_regress() {
  [[ "$REGRESS_ENV" != unavailable:* ]] || { echo "suite ${REGRESS_ENV}"; return 77; }
  local PG_REGRESS PG_REGRESS_INPUTDIR PG_REGRESS_DLPATH out=$SRV_TMP/regress rc=0 summary db=regression
  eval "$REGRESS_ENV"
  # The database as pg_regress makes it itself without --use-existing.
  PGDB=postgres q -c "CREATE DATABASE $db TEMPLATE=template0" -c "ALTER DATABASE $db SET lc_messages TO 'C'" \
    -c "ALTER DATABASE $db SET lc_monetary TO 'C'" -c "ALTER DATABASE $db SET lc_numeric TO 'C'" \
    -c "ALTER DATABASE $db SET lc_time TO 'C'" -c "ALTER DATABASE $db SET bytea_output TO 'hex'" \
    -c "ALTER DATABASE $db SET timezone_abbreviations TO 'Default'" >/dev/null
  # As the server's user: the server writes into the output directory (COPY TO).
  srv_user timeout 1200 "$PG_REGRESS" --use-existing --dbname="$db" --inputdir="$PG_REGRESS_INPUTDIR" \
    --outputdir="$out" --bindir="$PGBIN" --dlpath="$PG_REGRESS_DLPATH" --schedule="$PG_REGRESS_INPUTDIR/parallel_schedule" \
    --host="$SRV_TMP" --port="$PORT" --user=postgres --max-connections=20 >"$CUR_LOG" 2>&1 || rc=$?
  summary=$(grep -E '^ *(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests (failed|passed))' "$CUR_LOG" | sed 's/^ *//; s/ *$//' | head -1)
  srv_user cat "$out/regression.diffs" >"$SRV_DIR/regression-$CUR_TAG.diffs" 2>/dev/null || rm -f "$SRV_DIR/regression-$CUR_TAG.diffs"
  if [[ "$1" != none && -n "$REGRESS_NONE" && "$summary" != "$REGRESS_NONE" ]]; then
    echo "${summary:-no summary line} (none: $REGRESS_NONE)"; return 1
  fi
  echo "${summary:-no summary line (pg_regress status $rc)}"
  ((rc == 0)) && [[ "$summary" == All*passed* ]]
}
REGRESS_NONE=''   # none's summary line, when none ran before (run_check sets it)

check_pgbench() {
  local init=$SRV_DIR/pgbench-init-$CUR_TAG.log
  bench -i -s "$scale" -q >"$init" 2>&1 || { echo "pgbench -i -s $scale failed: $(tail -2 "$init" | tr '\n' ' ')"; return 1; }
  local a b
  a=$(pgbench_run "$CUR_TAG" -c 64 -j 4 -T "$time_s") || { echo "$a"; return 1; }
  b=$(amcheck_all) || { echo "$a; $b"; return 1; }
  echo "$a; $b"
}

# The parallel queries: name, then the query. Each runs serially and
# parallel; the results must be equal, the parallel plan must launch workers.
PAR_QUERIES=(
  agg    "SELECT count(*), sum(abalance), min(aid), max(aid), sum(hashint4(aid)::bigint) FROM pgbench_accounts"
  hashjoin "SELECT count(*), sum(a.abalance + t.v) FROM pgbench_accounts a JOIN par_t t ON t.k = a.aid % 50000"
  sort   "SELECT md5(string_agg(aid::text, ',' ORDER BY aid)) FROM (SELECT aid FROM pgbench_accounts WHERE aid % 3 = 0 ORDER BY hashint4(aid), aid LIMIT 200000) s"
  group  "SELECT md5(string_agg(g::text || ':' || n::text, ',' ORDER BY g)) FROM (SELECT bid * 1000 + aid % 1000 AS g, count(*) AS n FROM pgbench_accounts GROUP BY 1) s"
)
PAR_ON="SET force_parallel_mode = regress; SET max_parallel_workers_per_gather = 4; SET parallel_setup_cost = 0;
  SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; SET min_parallel_index_scan_size = 0;
  SET enable_parallel_hash = on; SET enable_nestloop = off; SET enable_mergejoin = off;
  SET max_parallel_maintenance_workers = 4; SET maintenance_work_mem = '64MB';"
PAR_OFF="SET max_parallel_workers_per_gather = 0; SET max_parallel_maintenance_workers = 0;"
PAR_RANGE="SELECT md5(string_agg(aid::text, ',' ORDER BY abalance + aid % 97, aid)) FROM pgbench_accounts WHERE abalance + aid % 97 < 40"
check_parallel() {
  local i name sql serial par plan n=0 log=$CUR_LOG
  q -c "DROP TABLE IF EXISTS par_t" -c "CREATE TABLE par_t AS SELECT k, (k * 7) % 1000 AS v FROM generate_series(0, 49999) k" \
    -c "ANALYZE par_t" >>"$log" 2>&1 || { echo "set-up failed: $(tail -1 "$log")"; return 1; }
  for ((i = 0; i < ${#PAR_QUERIES[@]}; i += 2)); do
    name=${PAR_QUERIES[i]} sql=${PAR_QUERIES[i + 1]}
    serial=$(q -c "$PAR_OFF" -c "$sql" 2>>"$log") || { echo "$name: serial run failed"; return 1; }
    plan=$(q -c "$PAR_ON" -c "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) $sql" 2>>"$log") || { echo "$name: parallel run failed"; return 1; }
    par=$(q -c "$PAR_ON" -c "$sql" 2>>"$log") || { echo "$name: parallel run failed"; return 1; }
    printf '%s\n%s\n' "== $name" "$plan" >>"$log"
    grep -qE 'Workers Launched: [1-9]' <<<"$plan" || { echo "$name: no parallel worker launched"; return 1; }
    [[ "$name" != hashjoin ]] || grep -q 'Parallel Hash Join' <<<"$plan" || { echo "hashjoin: no Parallel Hash Join in the plan"; return 1; }
    [[ "$serial" == "$par" ]] || { echo "$name: parallel result '$par' differs from serial '$serial'"; return 1; }
    n=$((n + 1))
  done
  # A parallel B-tree build against a serial one: same entries, both intact.
  local built
  built=$(q -c "$PAR_OFF" -c "CREATE INDEX par_serial ON pgbench_accounts ((abalance + aid % 97), aid)" \
            -c "$PAR_ON" -c "SET client_min_messages = debug1" \
            -c "CREATE INDEX par_parallel ON pgbench_accounts ((abalance + aid % 97), aid)" 2>&1) ||
    { echo "index build failed: $(tail -1 <<<"$built")"; return 1; }
  printf '%s\n' "== index build" "$built" >>"$log"
  grep -qE 'with request for [1-9][0-9]* parallel worker' <<<"$built" ||
    { echo "the index build asked for no parallel worker"; return 1; }
  serial=$(q -c "SELECT bt_index_parent_check('par_serial', true, true)" \
             -c "SELECT bt_index_parent_check('par_parallel', true, true)" 2>&1) ||
    { echo "amcheck of the built indexes failed: $(tr '\n' ' ' <<<"$serial")"; return 1; }
  # The same range read by a sequential scan and through the parallel-built index alone.
  serial=$(q -c "SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = off" -c "$PAR_RANGE" 2>>"$log") &&
    q -c "DROP INDEX par_serial" 2>>"$log" &&
    plan=$(q -c "SET enable_seqscan = off; SET enable_bitmapscan = off" -c "EXPLAIN (COSTS OFF) $PAR_RANGE" 2>>"$log") &&
    par=$(q -c "SET enable_seqscan = off; SET enable_bitmapscan = off" -c "$PAR_RANGE" 2>>"$log") ||
    { echo "the range read failed"; return 1; }
  grep -q par_parallel <<<"$plan" || { echo "the range read did not use the parallel-built index"; return 1; }
  [[ "$serial" == "$par" ]] || { echo "the parallel-built index returns '$par', the table '$serial'"; return 1; }
  echo "$n queries equal serial and parallel (workers launched, Parallel Hash Join); parallel and serial B-tree builds intact, the parallel one reads as the table"
}

# crash: SIGKILL to a client backend in the middle of a pgbench load.
restarted() { sed -n '/reinitializing/,$p' "$CUR_SERVER_LOG" | grep -q 'ready to accept connections'; }
check_crash() {
  local pid='' out=$SRV_DIR/pgbench-$CUR_TAG-killed.log a b i
  srv_client_bg bench -c 16 -j 2 -T "$time_s" >"$out" 2>&1
  for ((i = 0; i < 100; i++)); do
    [[ -z "$pid" ]] || break
    sleep 0.2
    pid=$(q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = 'bench'
                  AND pid <> pg_backend_pid() AND state = 'active' LIMIT 1" 2>/dev/null || true)
  done
  [[ -n "$pid" ]] && pid_alive "$pid" postgres || { srv_client_wait || true; echo "no busy backend to kill"; return 1; }
  sleep 1
  kill -KILL "$pid"
  srv_client_wait || true   # its clients lose their connections: expected
  wait_until 60 grep -q 'all server processes terminated; reinitializing' "$CUR_SERVER_LOG" ||
    { echo "the postmaster did not reinitialise after the killed backend $pid"; return 1; }
  wait_until 120 restarted ||
    { echo "no 'ready to accept connections' after the restart"; return 1; }
  wait_until 30 pg_ready || { echo "no connection after the restart"; return 1; }
  a=$(pgbench_run "$CUR_TAG" -c 16 -j 2 -T "$time_s") || { echo "after the crash: $a"; return 1; }
  b=$(amcheck_all) || { echo "after the crash: $a; $b"; return 1; }
  echo "backend $pid killed, shared memory reinitialised; $a; $b"
}

# cancel: a backend cancelled, timed out and terminated while it sleeps
# inside an LWLock wait, and the holder of that LWLock killed.
#
# A statement under load almost never sits in an LWLock wait at the moment
# it is cancelled, so the waits are made: an idle backend H takes two
# LWLocks by gdb's `call LWLockAcquire(...)`, which enters through the
# function's entry, the redirected one under LOCKSWAP_LWLOCK (docs/lwlock.md,
# "Redirection"): the variant itself holds them. H then stays stopped under
# ptrace. Two backends need them:
#   X  lo_create(0): GetNewObjectId takes OidGenLock exclusive
#   S  pg_prepared_xacts: TwoPhaseStateLock shared
# Neither lock is taken by a new connection or by a query on
# pg_stat_activity (ProcArrayLock and XidGenLock are: with them held no
# client could connect), so the round keeps watching through SQL as well as
# through /proc. Each waiter must be seen asleep in the wait: state S in the
# futex system call (PostgreSQL's own semaphore and every variant sleep on a
# futex) and LWLock/<tranche> in pg_stat_activity.
#
# PostgreSQL holds interrupts off while a backend waits on an LWLock: a
# cancel, a statement timeout or a termination only sets a flag, and the
# backend must go back to sleep until the lock is released, then act on it.
# Rounds:
#   cancel     pg_cancel_backend (SIGINT) on both waiters
#   timeout    statement_timeout expires in both waiters' sessions
#   terminate  pg_terminate_backend (SIGTERM) on both waiters
#   holder     SIGKILL to H: the postmaster must reinitialise shared memory
#              (the waiters die with every backend) and serve again
# In the first three each waiter must have woken (its voluntary context
# switches grow) and still be asleep in the wait a second later; then H
# releases both locks (gdb `call LWLockRelease`) and detaches, each waiter's
# client must get the round's error, H must take both locks again from its
# own session, so must a new session, and once idle no backend may wait on
# an LWLock. After the last round pgbench and amcheck must pass.
# The waiters' statements end in pg_sleep(20): a cancel, timeout or
# termination lost in the wait surfaces as a statement that succeeds.
#
# Every wait is bounded; gdb runs under `timeout -s KILL` (a killed tracer
# lets H go: it then still holds both locks, until its session ends when the
# check closes its input) and the check's exit, however it ends, releases or
# drops the hold (cancel_hold_end).
no_lwlock_waiter() {
  [[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'LWLock'" 2>/dev/null)" == 0 ]]
}
# The locks: index in MainLWLockArray (PostgreSQL 15's lwlocknames.txt; one
# 128-byte LWLockPadded each) and wait event name, checked in the server
# before anything is taken (GetLWLockIdentifier and the lock's tranche).
CANCEL_X_INDEX=2 CANCEL_X_NAME=OidGen CANCEL_S_INDEX=18 CANCEL_S_NAME=TwoPhaseState
CANCEL_X_SQL="SELECT lo_create(0), pg_sleep(20)"
CANCEL_S_SQL="SELECT (SELECT count(*) FROM pg_prepared_xacts), pg_sleep(20)"
# What H and a new session run after the release: both locks again.
CANCEL_BOTH_SQL="SELECT lo_unlink(lo_create(0)), (SELECT count(*) FROM pg_prepared_xacts)"
CANCEL_TIMEOUT_MS=4000
case $(uname -m) in x86_64) FUTEX_NR=202 ;; aarch64) FUTEX_NR=98 ;; *) FUTEX_NR='' ;; esac

# in_futex_wait PID: PID sleeps in the futex system call; prints what /proc
# says (state, wchan).
in_futex_wait() {
  local st sc wchan
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st%% *}
  [[ "$st" == S ]] || return 1
  sc=$(cut -d' ' -f1 "/proc/$1/syscall" 2>/dev/null) || sc=''
  wchan=$(cat "/proc/$1/wchan" 2>/dev/null) || wchan=''
  if [[ -n "$FUTEX_NR" && "$sc" =~ ^[0-9]+$ ]]; then
    [[ "$sc" == "$FUTEX_NR" ]] || return 1
  else
    [[ "$wchan" == *futex* ]] || return 1
  fi
  echo "S/${wchan:-?}"
}
since() { awk -v t0="$1" -v t="$(date +%s.%N)" 'BEGIN { printf "%.2f", t - t0 }'; }   # seconds since T0 (date +%s.%N)
ctxt_switches() { sed -n 's/^voluntary_ctxt_switches:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null; }

# The hold. CANCEL_DIR (root's SRV_BASE): H's and gdb's input FIFOs.
HOLD_STATE='' HOLD_GDB='' HOLD_PSQL='' HOLD_FD_H='' HOLD_FD_G='' HOLD_PID='' HOLD_LOG=''
CANCEL_DIR=''
# gdb_wait MARK S: gdb's transcript has @@MARK (within S seconds).
gdb_wait() { wait_until "$2" grep -sq "@@$1" "$HOLD_LOG"; }
gdb_line() { grep -o "@@$1 .*" "$HOLD_LOG" | head -1 | cut -d' ' -f2-; }

# cancel_hold_begin ROUND: H, gdb attached, both locks taken. Prints why on
# failure; status 77 when gdb may not attach (no ptrace permission).
cancel_hold_begin() {
  local names tr
  CANCEL_DIR=$SRV_BASE/cancel HOLD_LOG=$SRV_DIR/cancel-gdb-$CUR_TAG-$1.log
  rm -rf "$CANCEL_DIR" && mkdir -m 700 "$CANCEL_DIR" && mkfifo "$CANCEL_DIR/h" "$CANCEL_DIR/g" || { echo "no FIFOs in $CANCEL_DIR"; return 1; }
  # H: a session that reads its statements from a FIFO, so that its backend
  # sits idle between them (the holder must be stopped where it takes no lock).
  PGAPPNAME=lockswap-holder Q_TIMEOUT=240 q <"$CANCEL_DIR/h" >"$CANCEL_DIR/h.out" 2>&1 &
  HOLD_PSQL=$!
  exec {HOLD_FD_H}<>"$CANCEL_DIR/h"
  echo 'SELECT pg_backend_pid();' >&"$HOLD_FD_H"
  wait_until 20 grep -sqE '^[0-9]+$' "$CANCEL_DIR/h.out" || { echo "the holder session did not start: $(head -2 "$CANCEL_DIR/h.out")"; return 1; }
  HOLD_PID=$(head -1 "$CANCEL_DIR/h.out")
  HOLD_STATE=attaching
  # No debuginfod, no shared libraries' symbols: the server's own exported
  # symbols are all it needs (MainLWLockArray, the LWLock functions).
  timeout -s KILL 240 gdb -q -nx -iex 'set debuginfod enabled off' -iex 'set auto-solib-add off' \
    -iex 'set auto-load off' -iex 'set pagination off' -iex 'set confirm off' -iex 'set width 0' \
    -p "$HOLD_PID" <"$CANCEL_DIR/g" >"$HOLD_LOG" 2>&1 &
  HOLD_GDB=$!
  exec {HOLD_FD_G}<>"$CANCEL_DIR/g"
  cat >&"$HOLD_FD_G" <<EOF
set \$arr = *(char **) &MainLWLockArray
printf "@@names %s %s\\n", (char *) GetLWLockIdentifier(0x01000000, $CANCEL_X_INDEX), (char *) GetLWLockIdentifier(0x01000000, $CANCEL_S_INDEX)
printf "@@tranches %d %d\\n", *(unsigned short *) (\$arr + 128 * $CANCEL_X_INDEX), *(unsigned short *) (\$arr + 128 * $CANCEL_S_INDEX)
echo @@attached\\n
EOF
  if ! gdb_wait attached 60; then
    grep -q 'ptrace: Operation not permitted' "$HOLD_LOG" &&
      { echo "gdb may not attach to a backend here (ptrace: Operation not permitted; kernel.yama.ptrace_scope, CAP_SYS_PTRACE)"; return 77; }
    echo "gdb did not attach to backend $HOLD_PID within 60 s: $(grep -v '^Reading' "$HOLD_LOG" | tail -2 | tr '\n' ' ')"; return 1
  fi
  names=$(gdb_line names) tr=$(gdb_line tranches)
  [[ -n "$names" ]] ||
    { echo "gdb could not read MainLWLockArray or the LWLock names in backend $HOLD_PID: $(grep -v '^Reading' "$HOLD_LOG" | grep -m2 -iE 'symbol|cannot|error' | tr '\n' ' ')"; return 1; }
  [[ "$names" == "$CANCEL_X_NAME $CANCEL_S_NAME" && "$tr" == "$CANCEL_X_INDEX $CANCEL_S_INDEX" ]] ||
    { echo "MainLWLockArray[$CANCEL_X_INDEX], [$CANCEL_S_INDEX] are '${names:-?}' (tranches ${tr:-?}), not $CANCEL_X_NAME and $CANCEL_S_NAME: another lwlocknames.txt?"; return 1; }
  HOLD_STATE=taking
  # LWLockAcquire's bool in %al: read back as a char.
  cat >&"$HOLD_FD_G" <<EOF
printf "@@took X %d\\n", (unsigned char) LWLockAcquire((void *) (\$arr + 128 * $CANCEL_X_INDEX), 0)
printf "@@took S %d\\n", (unsigned char) LWLockAcquire((void *) (\$arr + 128 * $CANCEL_S_INDEX), 0)
echo @@holding\\n
EOF
  gdb_wait holding 30 && grep -q '@@took S [01]$' "$HOLD_LOG" && grep -q '@@took X [01]$' "$HOLD_LOG" ||
    { echo "the holder did not take both locks: $(grep -v '^Reading' "$HOLD_LOG" | tail -3 | tr '\n' ' ')"; return 1; }
  HOLD_STATE=held
}

# cancel_hold_release: H releases both locks (the reverse order) and gdb
# detaches and quits.
cancel_hold_release() {
  printf '%s\n' "call (void) LWLockRelease((void *) (\$arr + 128 * $CANCEL_S_INDEX))" \
    "call (void) LWLockRelease((void *) (\$arr + 128 * $CANCEL_X_INDEX))" 'echo @@released\n' detach quit >&"$HOLD_FD_G"
  gdb_wait released 30 || { echo "the holder did not release: $(grep -v '^Reading' "$HOLD_LOG" | tail -3 | tr '\n' ' ')"; return 1; }
  HOLD_STATE=released
  cancel_gdb_end
}

# cancel_gdb_end: gdb's input closed (at its end of input gdb detaches and
# quits), gdb waited for. After 10 s a SIGTERM to its `timeout`, which
# passes it on (gdb detaches), after 5 more a SIGKILL to both (the kernel
# detaches a killed tracer's tracees).
cancel_gdb_end() {
  local kids
  [[ -n "$HOLD_FD_G" ]] && exec {HOLD_FD_G}>&-
  HOLD_FD_G=''
  [[ -n "$HOLD_GDB" ]] || return 0
  if ! wait_until 10 eval "! pid_alive $HOLD_GDB"; then
    kids=$(cat "/proc/$HOLD_GDB/task/$HOLD_GDB/children" 2>/dev/null || true)
    kill -TERM "$HOLD_GDB" 2>/dev/null || true
    wait_until 5 eval "! pid_alive $HOLD_GDB" || kill -KILL $kids "$HOLD_GDB" 2>/dev/null || true
  fi
  wait "$HOLD_GDB" 2>/dev/null || true
  HOLD_GDB=''
}

# cancel_hold_end: whatever state the round left: the locks released if
# gdb still holds H with both taken, gdb gone, H's session ended (its backend
# exits and releases what it still holds: a hold that was dropped rather
# than released, say after a failed acquisition, where releasing a lock not
# held would raise an error inside gdb's call).
cancel_hold_end() {
  if [[ "$HOLD_STATE" == held && -n "$HOLD_FD_G" ]] && pid_alive "$HOLD_GDB"; then
    cancel_hold_release >/dev/null || true
  fi
  cancel_gdb_end
  # Stopped by the holder round and not killed: let it go on (holding both
  # locks until its session ends, just below).
  [[ "$HOLD_STATE" != stopped ]] || ! pid_alive "$HOLD_PID" || kill -CONT "$HOLD_PID" 2>/dev/null || true
  HOLD_STATE=''
  [[ -n "$HOLD_FD_H" ]] && exec {HOLD_FD_H}>&-
  HOLD_FD_H=''
  if [[ -n "$HOLD_PSQL" ]]; then
    wait_until 10 eval "! pid_alive $HOLD_PSQL" || kill -TERM "$HOLD_PSQL" 2>/dev/null || true
    wait "$HOLD_PSQL" 2>/dev/null || true
    HOLD_PSQL=''
  fi
}

# cancel_waiters_start TIMEOUT_MS: the two waiters, each in its own session
# with statement_timeout TIMEOUT_MS (0: none).
WAIT_PIDS=() WAIT_CLIENTS=()
cancel_waiters_start() {
  local k sql
  WAIT_PIDS=() WAIT_CLIENTS=()
  for k in X S; do
    [[ "$k" == X ]] && sql=$CANCEL_X_SQL || sql=$CANCEL_S_SQL
    PGAPPNAME=lockswap-wait-$k Q_TIMEOUT=120 q -c "SET statement_timeout = $1" -c "$sql" >"$CANCEL_DIR/$k.out" 2>&1 &
    WAIT_CLIENTS+=($!)
  done
}

# cancel_seen_waiting: both waiters asleep in their LWLock waits (within
# 30 s); sets WAIT_PIDS (X, S) and WAIT_SEEN (what was seen).
WAIT_SEEN=''
cancel_seen_waiting() {
  local i rows k p ev want st
  for ((i = 0; i < 300; i++)); do
    rows=$(q -F ' ' -c "SELECT application_name, pid, wait_event_type || '/' || wait_event FROM pg_stat_activity
                        WHERE application_name IN ('lockswap-wait-X', 'lockswap-wait-S')" 2>/dev/null || true)
    WAIT_PIDS=() WAIT_SEEN=''
    for k in X S; do
      [[ "$k" == X ]] && want=LWLock/$CANCEL_X_NAME || want=LWLock/$CANCEL_S_NAME
      read -r _ p ev < <(grep "^lockswap-wait-$k " <<<"$rows" || true)
      [[ -n "${p:-}" && "${ev:-}" == "$want" ]] && st=$(in_futex_wait "$p") || break
      WAIT_PIDS+=("$p") WAIT_SEEN+="${WAIT_SEEN:+ }$k:${ev#LWLock/}($st)"
    done
    ((${#WAIT_PIDS[@]} == 2)) && return 0
    sleep 0.1
  done
  echo "not both waiters seen asleep in their LWLock waits within 30 s: $(tr '\n' ';' <<<"$rows")"
  return 1
}

# cancel_still_waiting BASE_X BASE_S: each waiter woke (voluntary context
# switches past BASE) within 10 s, and a second later sleeps in the wait again.
cancel_still_waiting() {
  local -a base=("$@")
  local i
  for i in 0 1; do
    wait_until 10 eval "(( \$(ctxt_switches ${WAIT_PIDS[i]} || echo 0) > ${base[i]} ))" ||
      { echo "waiter ${WAIT_PIDS[i]} never woke (voluntary context switches stay at ${base[i]})"; return 1; }
  done
  sleep 1
  for i in 0 1; do
    in_futex_wait "${WAIT_PIDS[i]}" >/dev/null ||
      { echo "waiter ${WAIT_PIDS[i]} left its LWLock wait while the lock was held ($(sed 's/.*) //' "/proc/${WAIT_PIDS[i]}/stat" 2>/dev/null | cut -d' ' -f1 || echo gone))"; return 1; }
  done
  [[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE pid IN (${WAIT_PIDS[0]}, ${WAIT_PIDS[1]}) AND wait_event_type = 'LWLock'" 2>/dev/null)" == 2 ]] ||
    { echo "pg_stat_activity no longer shows both waiters in an LWLock wait while the locks are held"; return 1; }
}

# cancel_clients_end T_RELEASE PATTERN: both waiters' clients end (within
# 30 s) with PATTERN in their output; CLIENTS_S: the seconds from T_RELEASE.
CLIENTS_S=''
cancel_clients_end() {
  local t0=$1 pat=$2 k i=0
  for k in X S; do
    wait_until 30 eval "! pid_alive ${WAIT_CLIENTS[i]}" ||
      { echo "waiter $k (${WAIT_PIDS[i]}) did not finish within 30 s of the release"; return 1; }
    wait "${WAIT_CLIENTS[i]}" 2>/dev/null || true
    grep -q "$pat" "$CANCEL_DIR/$k.out" ||
      { echo "waiter $k (${WAIT_PIDS[i]}): no '$pat' but '$(grep -v '^SET$' "$CANCEL_DIR/$k.out" | tr '\n' ' ' | cut -c1-160)'"; return 1; }
    cat "$CANCEL_DIR/$k.out" >>"$CUR_LOG"
    i=$((i + 1))
  done
  CLIENTS_S=$(since "$t0")
}

# cancel_round KIND: one round; prints its detail line.
cancel_round() {
  local kind=$1 t_rel ms=0 want base=() out i seen t_start
  cancel_hold_begin "$kind" || return $?
  [[ "$kind" == timeout ]] && ms=$CANCEL_TIMEOUT_MS
  t_start=$(date +%s.%N)
  cancel_waiters_start "$ms"
  cancel_seen_waiting || return 1
  seen=$WAIT_SEEN
  for i in 0 1; do base+=("$(ctxt_switches "${WAIT_PIDS[i]}")"); done
  if [[ "$kind" == timeout ]] && awk -v t="$(since "$t_start")" -v ms="$ms" 'BEGIN { exit !(t * 1000 >= ms) }'; then
    echo "the waiters were seen only after their statement_timeout (${ms} ms)"; return 1
  fi
  case $kind in
    cancel) want='canceling statement due to user request'
            out=$(q -c "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM unnest(ARRAY[${WAIT_PIDS[0]}, ${WAIT_PIDS[1]}]) pid") ;;
    terminate) want='terminating connection due to administrator command'
            out=$(q -c "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM unnest(ARRAY[${WAIT_PIDS[0]}, ${WAIT_PIDS[1]}]) pid") ;;
    timeout) want='canceling statement due to statement timeout' out=2 ;;
    holder) cancel_round_holder; return $? ;;
  esac
  [[ "$out" == 2 ]] || { echo "$kind: the signal reached $out of 2 waiters"; return 1; }
  # The timeout's timer wakes each waiter (SIGALRM, then its own SIGINT):
  # the release waits until it has surely fired.
  cancel_still_waiting "${base[@]}" || return 1
  [[ "$kind" != timeout ]] || sleep "$(awk -v t="$(since "$t_start")" -v ms="$ms" 'BEGIN { d = (ms + 500) / 1000 - t; printf "%.2f", (d > 0 ? d : 0) }')"
  t_rel=$(date +%s.%N)
  cancel_hold_release || return 1
  cancel_clients_end "$t_rel" "$want" || return 1
  [[ "$kind" != terminate ]] || wait_until 10 eval "! pid_alive ${WAIT_PIDS[0]} && ! pid_alive ${WAIT_PIDS[1]}" ||
    { echo "terminated waiters still alive"; return 1; }
  # H's own session, then a new one, take both locks again; nobody waits.
  echo "$CANCEL_BOTH_SQL;" >&"$HOLD_FD_H"
  wait_until 20 grep -sqx '1|0' "$CANCEL_DIR/h.out" ||
    { echo "the holder's session could not take the locks again: $(tail -2 "$CANCEL_DIR/h.out" | tr '\n' ' ')"; return 1; }
  out=$(Q_TIMEOUT=20 q -c "$CANCEL_BOTH_SQL" 2>&1) && [[ "$out" == '1|0' ]] ||
    { echo "a new session could not take both locks: $out"; return 1; }
  wait_until 20 no_lwlock_waiter || { echo "backends still in an LWLock wait after the round"; return 1; }
  echo "$kind: asleep in LWLock waits $seen, woke and slept on; '$want' $CLIENTS_S s after the release"
}

# The holder dies holding both locks, both waiters asleep behind it. Not
# while traced: the postmaster learns of a traced child's death only when
# the tracer reaps it (a gdb that detaches from the dead process left the
# postmaster unaware until its next child exited). So gdb detaches with a
# SIGSTOP pending: H goes from the trace stop into a plain stop, still
# holding both locks, without running an instruction.
cancel_round_holder() {
  local i out st
  kill -STOP "$HOLD_PID"
  HOLD_STATE=stopped
  printf '%s\n' detach 'echo @@detached\n' quit >&"$HOLD_FD_G"
  gdb_wait detached 30 || { echo "holder: gdb did not detach: $(grep -v '^Reading' "$HOLD_LOG" | tail -2 | tr '\n' ' ')"; return 1; }
  cancel_gdb_end
  st=$(sed 's/.*) //' "/proc/$HOLD_PID/stat" 2>/dev/null | cut -d' ' -f1)
  [[ "$st" == T ]] && grep -q '^TracerPid:[[:space:]]*0$' "/proc/$HOLD_PID/status" ||
    { echo "holder: H ($HOLD_PID) is not stopped untraced after gdb detached (state ${st:-gone})"; return 1; }
  for i in 0 1; do
    in_futex_wait "${WAIT_PIDS[i]}" >/dev/null || { echo "holder: waiter ${WAIT_PIDS[i]} left its wait when gdb detached"; return 1; }
  done
  kill -KILL "$HOLD_PID"
  HOLD_STATE=killed
  wait_until 60 grep -q 'all server processes terminated; reinitializing' "$CUR_SERVER_LOG" ||
    { echo "holder: the postmaster did not reinitialise after H ($HOLD_PID) was killed"; return 1; }
  for i in 0 1; do
    wait_until 20 eval "! pid_alive ${WAIT_PIDS[i]}" || { echo "holder: waiter ${WAIT_PIDS[i]} survived the crash restart"; return 1; }
  done
  if grep -q 'issuing SIGKILL to recalcitrant children' "$CUR_SERVER_LOG"; then
    echo "holder: a backend did not exit on the postmaster's SIGQUIT (it had to be killed)"; return 1
  fi
  wait_until 120 restarted || { echo "holder: no 'ready to accept connections' after the restart"; return 1; }
  wait_until 30 pg_ready || { echo "holder: no connection after the restart"; return 1; }
  for i in 0 1; do wait "${WAIT_CLIENTS[i]}" 2>/dev/null || true; done
  out=$(Q_TIMEOUT=20 q -c "$CANCEL_BOTH_SQL" 2>&1) && [[ "$out" == '1|0' ]] ||
    { echo "holder: a new session could not take both locks after the restart: $out"; return 1; }
  echo "holder: asleep in LWLock waits $WAIT_SEEN, H SIGKILLed: both waiters ended with the crash restart, shared memory reinitialised, both locks free"
}

# cancel_waiters_kill: after a failed round, waiter backends still there 5 s
# after the hold went are killed (a crash restart): a backend that never
# wakes from an LWLock wait would hold the server's shutdown forever.
cancel_waiters_kill() {
  local p pids n=0
  pids="${WAIT_PIDS[*]} $(Q_TIMEOUT=10 q -c "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'lockswap-wait-%'" 2>/dev/null | tr '\n' ' ')"
  for p in $pids; do
    wait_until 5 eval "! pid_alive $p postgres" && continue
    kill -KILL "$p" 2>/dev/null && n=$((n + 1))
  done
  ((n == 0)) || echo " ($n waiter backend(s) still there after the hold went: killed)"
}

check_cancel() {
  local kind lines=() rc a b out=$SRV_BASE/cancel-round.txt seen=0
  command -v gdb >/dev/null || { echo "needs gdb (to hold an LWLock in a stopped backend)"; return 77; }
  # However the check ends, the hold goes (this runs in run_check's subshell).
  trap cancel_hold_end EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  for kind in cancel timeout terminate holder; do
    rc=0
    cancel_round "$kind" >"$out" || rc=$?   # not in a subshell: the round's state is this shell's
    cancel_hold_end
    if ((rc != 0)); then
      ((rc == 77)) && { cat "$out"; return 77; }
      echo "${lines[*]:+${lines[*]} }$kind round failed: $(tr '\n' ' ' <"$out" | sed 's/ *$//')$(cancel_waiters_kill)"; return 1
    fi
    lines+=("$(cat "$out");")
    seen=$((seen + ${#WAIT_PIDS[@]}))   # a round passes only with both waiters seen asleep
  done
  a=$(pgbench_run "$CUR_TAG" -c 16 -j 2 -T "$(( time_s < 5 ? time_s : 5 ))") || { echo "${lines[*]} after the rounds: $a"; return 1; }
  b=$(amcheck_all) || { echo "${lines[*]} after the rounds: $a; $b"; return 1; }
  wait_until 20 no_lwlock_waiter || { echo "${lines[*]} backends in an LWLock wait when idle"; return 1; }
  echo "$seen of 8 waiters seen asleep in an LWLock wait (4 rounds); ${lines[*]} no LWLock waiter when idle; $a; $b"
}

# uprobe: a tracer's entry uprobes on LWLockAcquire and LWLockRelease
# (bpftrace, as perf probe and pg-lock-tracer attach them): attached before
# the server starts (run_check starts the tracer first: the entries then hold
# the breakpoint when lockswap checks them), then attached while the server
# serves a pgbench load. The server must serve on (no process dies, no crash
# restart, no failed transaction) and the probes must count calls
# (docs/lwlock.md, "Redirection").
UPROBE_TRACER='' UPROBE_BEFORE=''
uprobe_program() { local b=$PGBIN/postgres; echo "uprobe:$b:LWLockAcquire { @acquire = count(); } uprobe:$b:LWLockRelease { @release = count(); } $*"; }
uprobe_attach_before() {
  UPROBE_BEFORE=$SRV_DIR/bpftrace-$CUR_TAG-before.txt
  [[ $(id -u) == 0 ]] && command -v bpftrace >/dev/null || return 0
  timeout 900 bpftrace -e "$(uprobe_program)" >"$UPROBE_BEFORE" 2>&1 &
  UPROBE_TRACER=$!
  wait_until 30 grep -qs "^Attaching" "$UPROBE_BEFORE" || log "pg_lwlock: bpftrace did not attach: $(tail -2 "$UPROBE_BEFORE")"
  sleep 1
}
uprobe_detach_before() {
  [[ -n "$UPROBE_TRACER" ]] || return 0
  kill -INT "$UPROBE_TRACER" 2>/dev/null || true
  wait "$UPROBE_TRACER" 2>/dev/null || true
  UPROBE_TRACER=''
}
uprobe_counts() {  # uprobe_counts OUT: "A acquisitions and R releases" from bpftrace's maps, or fails
  local a r
  a=$(sed -n 's/^@acquire: \([0-9]*\)/\1/p' "$1") r=$(sed -n 's/^@release: \([0-9]*\)/\1/p' "$1")
  ((${a:-0} > 0 && ${r:-0} > 0)) || return 1
  echo "$a acquisitions and $r releases"
}
check_uprobe() {
  local during=$SRV_DIR/bpftrace-$CUR_TAG-during.txt load=$SRV_DIR/pgbench-$CUR_TAG-during.log a b c1 c2 i
  [[ -n "$UPROBE_TRACER" ]] || { echo "needs root and bpftrace"; return 77; }
  a=$(pgbench_run "$CUR_TAG-before" -c 16 -j 2 -T "$(( time_s / 2 > 5 ? time_s / 2 : 5 ))") ||
    { echo "under probes attached before start: $a"; return 1; }
  kill -INT "$UPROBE_TRACER" 2>/dev/null  # run_check's process: its maps appear in the file when it exits
  for ((i = 0; i < 100; i++)); do c1=$(uprobe_counts "$UPROBE_BEFORE") && break; sleep 0.2; done
  [[ -n "$c1" ]] || { echo "the probes attached before start counted nothing: $(tr '\n' ' ' <"$UPROBE_BEFORE" | cut -c1-200)"; return 1; }
  srv_client_bg bench -c 16 -j 2 -T "$time_s" >"$load" 2>&1
  sleep 2
  timeout $((time_s + 60)) bpftrace -e "$(uprobe_program "interval:s:$(( time_s / 2 > 2 ? time_s / 2 : 2 )) { exit(); }")" >"$during" 2>&1
  srv_client_wait && grep -q 'number of failed transactions: 0 ' "$load" ||
    { echo "the load under the probes failed: $(grep -m2 -E 'error|abort|failed' "$load" | tr '\n' ' ')"; return 1; }
  c2=$(uprobe_counts "$during") || { echo "the probes attached during the load counted nothing: $(tr '\n' ' ' <"$during" | cut -c1-200)"; return 1; }
  if grep -qE 'terminated by signal|reinitializing' "$CUR_SERVER_LOG"; then
    echo "a server process died under the probes: $(grep -m1 -E 'terminated by signal' "$CUR_SERVER_LOG")"; return 1
  fi
  b=$(amcheck_all) || { echo "$b"; return 1; }
  echo "probes attached before start: $c1, $a; attached during a 16-client load: $c2, no failed transaction; no process died; $b"
}

# refuse: a postgres binary with one byte of LWLockAcquire changed.
check_refuse() {
  local v=$1 copy=$SRV_BASE/postgres-altered bin=$PGBIN/postgres addr off byte id rc=0 out
  [[ "$v" != none ]] || { echo "not applicable without the library"; return 77; }
  out=$(env -i LOCKSWAP_LWLOCK="$v" LD_PRELOAD="$SRV_LIB" "$bin" --version 2>&1) ||
    { echo "the pristine binary does not run under LOCKSWAP_LWLOCK=$v: $(tr '\n' ' ' <<<"$out")"; return 1; }
  [[ "$out" == *'postgres (PostgreSQL) 15'* ]] || { echo "the pristine binary printed '$out'"; return 1; }
  if [[ "$v" != off ]] && ! lwlock_acts; then
    echo "the library refuses nothing yet (no LWLockAcquire in it): LOCKSWAP_LWLOCK=$v redirects nothing"; return 77
  fi
  addr=$(readelf -W --dyn-syms "$bin" | awk '$8 == "LWLockAcquire" && $4 == "FUNC" { print $2; exit }')
  [[ -n "$addr" ]] || { echo "no LWLockAcquire in $bin's dynamic symbols"; return 1; }
  # The file offset of the address through the LOAD segment that maps it.
  off=$(readelf -W -l "$bin" | awk -v a=$((16#$addr)) '$1 == "LOAD" {
          o = strtonum($2); va = strtonum($3); fs = strtonum($5)
          if (a >= va && a < va + fs) { print a - va + o; exit } }')
  [[ -n "$off" ]] || { echo "LWLockAcquire (0x$addr) lies in no LOAD segment"; return 1; }
  id=$(readelf -n "$bin" | sed -n 's/.*Build ID: *\([0-9a-f]*\).*/\1/p' | head -1)
  cp "$bin" "$copy"
  byte=$(od -An -tu1 -j "$off" -N1 "$copy" | tr -d ' ')
  printf "\\$(printf '%03o' $(( byte ^ 0xff )))" | dd of="$copy" bs=1 seek="$off" count=1 conv=notrunc status=none
  chmod 755 "$copy"
  out=$(env -i LOCKSWAP_LWLOCK="$v" LD_PRELOAD="$SRV_LIB" "$copy" --version 2>&1) || rc=$?
  printf 'altered byte at file offset %s (LWLockAcquire 0x%s): %s -> %s; build-id %s\nstatus %s\n%s\n' \
    "$off" "$addr" "$byte" $(( byte ^ 0xff )) "$id" "$rc" "$out" >>"$CUR_LOG"
  rm -f "$copy"
  if [[ "$v" == off ]]; then
    ((rc == 0)) || { echo "LOCKSWAP_LWLOCK=off refused the altered binary (status $rc): $(head -1 <<<"$out")"; return 1; }
    echo "off leaves the altered binary alone (status 0)"; return 0
  fi
  ((rc == 2)) || { echo "the altered binary ran under LOCKSWAP_LWLOCK=$v (status $rc, want 2)"; return 1; }
  [[ "$out" != *'postgres (PostgreSQL)'* ]] || { echo "refused only after main ran (it printed its version)"; return 1; }
  [[ -n "$id" && "$out" == *"$id"* ]] || { echo "refused (status 2) without naming build-id $id: $(head -2 <<<"$out" | tr '\n' ' ')"; return 1; }
  echo "refused before main with status 2, naming build-id $id"
}

# --- the runs ---------------------------------------------------------------

# prepare: one cluster, initialised and loaded without the preload.
prepare() {
  SRV_ENV=()
  log "pg_lwlock: initdb (no preload)"
  srv_as "$PGBIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --no-locale --no-instructions \
    >"$SRV_DIR/initdb.log" 2>&1 || { tail -20 "$SRV_DIR/initdb.log" >&2; die "initdb failed"; }
  db_start "$SRV_DIR/server-prepare.log" || die "the server did not start for the prepare step"
  PGDB=postgres q -c "CREATE DATABASE bench" >/dev/null
  if [[ " ${CHECKS[*]} " =~ \ (pgbench|parallel|crash|cancel|uprobe)\  ]]; then
    bench -i -s "$scale" -q >"$SRV_DIR/pgbench-prepare.log" 2>&1 || { tail -5 "$SRV_DIR/pgbench-prepare.log" >&2; die "pgbench -i failed"; }
  fi
  q -c "CREATE EXTENSION amcheck" -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
  srv_stop INT "$SRV_DIR/server-prepare.log"
  [[ "$SRV_VERDICT" == clean ]] || die "the server did not shut down cleanly after the prepare step ($SRV_VERDICT)"
  srv_data_snapshot
}

PASSED=0 FAILED=0 SKIPPED=0
report() {  # report STATUS VARIANT CHECK SECONDS DETAIL
  printf '%-4s %-22s %4d s  %s\n' "$1" "$2/$3" "$4" "$5"
  echo "RESULT variant=$2 check=$3 status=$1 seconds=$4 detail=${5// /_}" >>"$RESULTS"
  case "$1" in PASS) PASSED=$((PASSED + 1)) ;; FAIL) FAILED=$((FAILED + 1)) ;; *) SKIPPED=$((SKIPPED + 1)) ;; esac
}

# run_check VARIANT CHECK [LABEL]: one check on a fresh copy of the cluster,
# reported under LABEL (default VARIANT).
run_check() {
  local v=$1 c=$2 label=${3:-$1} t0 rc=0 detail status stats_tmp=''
  CUR_TAG=$(srv_tag "$v-$c") CUR_LOG=$SRV_DIR/$c-$(srv_tag "$v").log CUR_SERVER_LOG=$SRV_DIR/server-$(srv_tag "$v-$c").log
  : >"$CUR_LOG"
  t0=$(date +%s)
  log "pg_lwlock: $v/$c"
  if [[ "$c" == refuse ]]; then
    detail=$(check_refuse "$v") || rc=$?
  else
    SRV_ENV=()
    if [[ "$v" != none ]]; then
      SRV_ENV=(LD_PRELOAD="$SRV_LIB" LOCKSWAP_LWLOCK="$v")
      if [[ "$stats" == yes ]]; then stats_tmp=$SRV_TMP/stats-$CUR_TAG.txt; SRV_ENV+=(LOCKSWAP_STATS=counts LOCKSWAP_STATS_FILE="$stats_tmp"); fi
    fi
    SRV_STATS_TMP=$stats_tmp
    srv_data_reset
    : >"$CUR_SERVER_LOG"
    [[ "$c" != uprobe ]] || uprobe_attach_before
    if db_start "$CUR_SERVER_LOG"; then
      detail=$("check_$c" "$v") || rc=$?
      [[ "$v/$c" != none/regress ]] || REGRESS_NONE=$detail
      srv_stop INT "$CUR_SERVER_LOG" 90
      if [[ "$SRV_VERDICT" != clean ]]; then
        ((rc == 0 || rc == 77)) && rc=1
        detail="$detail; shutdown $SRV_VERDICT (see $CUR_SERVER_LOG)"
      fi
    else
      rc=1 detail="the server did not start (see $CUR_SERVER_LOG)"
    fi
    uprobe_detach_before
    if [[ -n "$stats_tmp" ]]; then
      local file acq
      file=$(srv_stats "$CUR_TAG" "$CUR_SERVER_LOG")
      # The proof that V ran: its per-tranche LWLock acquisitions, summed over the processes.
      acq=$(awk -v v="$v" '$2 == "lwlock" && $0 ~ (" variant=" v " ") { for (i = 3; i <= NF; i++) if ($i ~ /^acq=/) n += substr($i, 5) }
                          END { print n + 0 }' "$file")
      detail="$detail; stats $file"
      if [[ "$v" != none && "$v" != off ]]; then
        detail="$detail ($acq LWLock acquisitions under $v)"
        ((acq > 0 || rc != 0)) || { rc=1; detail="$detail: the variant was not in effect"; }
      fi
      # The cancel check's waits in the variant's own code: the waiters of its
      # first three rounds write their records as they exit (the last
      # round's die with the crash restart).
      if [[ "$c" == cancel && "$v" != none && "$v" != off ]] && ((rc == 0)); then
        local waits
        waits=$(awk -v v="$v" '$2 == "lwlock" && $0 ~ (" variant=" v " ") && $0 ~ / tranche=(OidGen|TwoPhaseState) / {
                                 for (i = 3; i <= NF; i++) if ($i ~ /^waits=/) n += substr($i, 7) } END { print n + 0 }' "$file")
        detail="$detail; $waits waits on OidGen and TwoPhaseState counted under $v"
        ((waits >= 6)) || { rc=1; detail="$detail, not the 6 of the first three rounds: the waits did not run $v"; }
      fi
    fi
  fi
  case "$rc" in 0) status=PASS ;; 77) status=SKIP ;; *) status=FAIL ;; esac
  report "$status" "$label" "$c" $(( $(date +%s) - t0 )) "$detail"
}

needs_server=0
for c in "${CHECKS[@]}"; do [[ "$c" == refuse ]] || needs_server=1; done
((needs_server)) && prepare
for v in "${VARIANTS[@]}"; do
  label=$v
  if [[ -n "$fallback" && "$v" != none && "$v" != off ]] && ! lwlock_acts; then
    log "pg_lwlock: LOCKSWAP_LWLOCK=$v redirects nothing in this library yet: running $fallback instead"
    label="$v->$fallback" v=$fallback
  fi
  for c in "${CHECKS[@]}"; do run_check "$v" "$c" "$label"; done
done
log "pg_lwlock: $PASSED passed, $FAILED failed, $SKIPPED skipped; logs in $SRV_DIR"
((FAILED == 0)) || exit 1
((PASSED > 0)) || exit 77
exit 0
