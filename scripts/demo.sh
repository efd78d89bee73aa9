#!/usr/bin/env bash
# scripts/demo.sh — unmodified servers and programs without lockswap (`none`,
# the reference), under lockswap with glibc's locks (`glibc`) and under each
# lockswap variant, compared in one table: per benchmark, the speed against
# none as the median of per-round ratios with its 95% interval and a verdict
# (a round runs every variant once, in a rotated order; rounds the
# core-to-core probe flags as unsteady are dropped and run again, up to twice
# --repeat in all, and the table says how many were kept). Measured runs are profiler-free (LOCKSWAP_STATS=counts).
# Never blank: when fewer rounds than asked are steady (and too few for a
# verdict), a row's figures are over every completed round and its verdict
# reads `host unsteady (k of n rounds steady)`, explained under the table;
# --strict-steady shows steady rounds only (a row may then be blank).
#
#   scripts/demo.sh [--quick] [--variants "V1 V2 ..."] [--print-variants]
#                   [--only "postgres mariadb wiredtiger mongod memcached rocksdb sysbench jemalloc"]
#                   [--repeat N] [--time S] [--oversub N] [--sysbench-threads "2 16 64"]
#                   [--profile] [--strict-steady] [--no-setup]
#                   [--lwlock "pg,rwsem"] [--wtlock rwsem]
#
#   postgres   PostgreSQL 15 + sysbench oltp_read_only (16 tables x 10,000 rows,
#              shared_buffers=80MB, max_connections=250, 8 threads per CPU);
#              only the variants that change LOCKSWAP_SEM (PostgreSQL's
#              processes take no pthread lock: they sleep on semaphores), or
#              all chosen ones if none does; and its LWLocks on each
#              --lwlock value (default pg,rwsem; "" for none);
#   mariadb    MariaDB 10.11 + sysbench oltp_read_write at 8 threads;
#   wiredtiger WiredTiger (mongod's engine), YCSB workload A by ycsb_wt.c;
#              and its rwlocks on each --wtlock value (default rwsem);
#   mongod     mongod + YCSB-style workload A, only when mongod is on PATH;
#   memcached  memcached + memcaslap;
#   rocksdb    RocksDB db_bench readwhilewriting;
#   sysbench   sysbench's built-in mutex and threads tests, 2 threads and
#              oversubscribed (--oversub, 16; --sysbench-threads lists them);
#   jemalloc   a 16-thread malloc/free stress with jemalloc, whose mutexes then
#              go through lockswap (and a check that they bind to it).
# Default: 6 steady rounds (the fewest that can give a verdict at 95%) of
# 3-second runs (1 s warm-up), about 25 minutes on a quiet 2-CPU machine
# (more when rounds are dropped and run again); each runner
# alone (examples/servers/, see its --help) covers more workloads.
# --profile: after the rounds, one more run per variant with the per-lock
# profiler (LOCKSWAP_STATS=profile), listed apart and never compared; its
# statistics files are for `lockswap report`.
# --quick: one round of short runs on small data, a smoke run of a few
# minutes (its verdicts read "not enough runs").
# Every server runs as an unprivileged user on 127.0.0.1 with its data in a
# temporary directory, is prepared once without the preload, and is stopped
# by its PID with its shutdown checked.
# Output: build/demo/<date-time>/ (build/demo/latest): table.txt, table.csv,
# table.png (a forest plot: a row per benchmark x variant, the speed against
# none with its interval on a log axis), table.html (header, plot and table on
# one page), audit.json (the host before and after, the exact command,
# lockswap's version, commit and settings: lockswap doctor's audit record),
# results.txt (every RESULT line) and one directory per part with its logs,
# runs.tsv, rounds.tsv, audit.json and LOCKSWAP_STATS output (stats-*.txt).
# Exit status: 0 when every run completed cleanly, 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRV_NAME=demo
# shellcheck source=../examples/servers/server_lib.sh
source "$ROOT/examples/servers/server_lib.sh"

PARTS="postgres mariadb wiredtiger mongod memcached rocksdb sysbench jemalloc"
QUICK=0 SETUP=1 REPEAT='' TIME='' OVERSUB=16 SB_THREADS='' PROFILE=0 STRICT=0
# The servers' own locks: PostgreSQL's LWLocks under the port of its own
# algorithm (the control) and the kernel's rw_semaphore; WiredTiger's
# rwlocks under the rw_semaphore (docs/lwlock.md, docs/wtlock.md).
LWLOCKS=pg,rwsem WTLOCKS=rwsem
DEMO_ARGV=("$0" "$@")
# The default variants: the columns tagged `bench` in
# preload/config/variant_columns.def (as the server runners' default).
VARIANTS=$(matrix_columns_tagged bench | paste -sd' ' -)
PRINT_VARIANTS=0
ONLY=$PARTS
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --variants) [[ $# -ge 2 ]] || die "--variants needs a value"; VARIANTS=$2; shift 2 ;;
    --variants=*) VARIANTS=${1#*=}; shift ;;
    --only) [[ $# -ge 2 ]] || die "--only needs a value"; ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#*=}; shift ;;
    --repeat) REPEAT=${2:?}; shift 2 ;;
    --time) TIME=${2:?}; shift 2 ;;
    --oversub) OVERSUB=${2:?}; shift 2 ;;
    --lwlock) LWLOCKS=${2?}; shift 2 ;;
    --wtlock) WTLOCKS=${2?}; shift 2 ;;
    --sysbench-threads) SB_THREADS=${2:?}; shift 2 ;;
    --no-setup) SETUP=0; shift ;;
    --profile) PROFILE=1; shift ;;
    --strict-steady) STRICT=1; shift ;;
    --print-variants) PRINT_VARIANTS=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
ONLY=${ONLY//,/ }
for part in $ONLY; do
  [[ " $PARTS " == *" $part "* ]] || die "--only: unknown part '$part' (parts: $PARTS)"
done
wants() { [[ " $ONLY " == *" $1 "* ]]; }
# --print-variants: the variants this run would take (before the library
# checks them), and stop.
if ((PRINT_VARIANTS)); then
  echo "variants: $VARIANTS"
  exit 0
fi

if ((QUICK)); then
  REPEAT=${REPEAT:-1} TIME=${TIME:-2} WARMUP=0
  PG=(--workload read_only --tables 4 --rows 2000 --threads 8)
  MARIA=(--workload read_write --oversub 0 --tables 2 --table-size 2000)
  WT=(--records 20000 --threads 4) MC=() ROCKS=(--workload readrandom --num 50000 --threads 4)
  SB_MUTEX_TOTAL=4000000 SB_THREADS_TIME=1 JE_OPS=20000
else
  # 6 rounds give a verdict at 95% (lockswap_stats.runs_needed()); one
  # workload per server and 3-second runs keep the whole demo near 25 minutes.
  REPEAT=${REPEAT:-6} TIME=${TIME:-3} WARMUP=1
  PG=(--workload read_only) MARIA=(--workload read_write --oversub 0) WT=() MC=() ROCKS=(--workload readwhilewriting)
  SB_MUTEX_TOTAL=4000000 SB_THREADS_TIME=2 JE_OPS=100000
fi
SB_THREADS=${SB_THREADS:-2 $OVERSUB}
for t in $SB_THREADS; do srv_need_number --sysbench-threads "$t" 1; done
srv_need_number --repeat "$REPEAT" 1
srv_need_number --time "$TIME" 1

if ((SETUP)); then
  bash "$ROOT/scripts/setup.sh"
  bash "$ROOT/scripts/build.sh" >/dev/null
fi
require_library

# The reference (no preload) and the control first, then each variant; the
# library validates every name.
ALL=(none glibc)
for v in ${VARIANTS//,/ }; do [[ " ${ALL[*]} " == *" $v "* ]] || ALL+=("$v"); done
for v in "${ALL[@]}"; do
  [[ "$v" == none ]] && continue
  envs=$(srv_variant_envs "$v") || exit 2
  # shellcheck disable=SC2086
  env -i PATH="$PATH" $envs LD_PRELOAD="$LIBLOCKSWAP" /bin/true || die "variant '$v' rejected by $LIBLOCKSWAP"
done
# PostgreSQL: the variants whose LOCKSWAP_SEM is not glibc's.
PG_VARIANTS=()
for v in "${ALL[@]:2}"; do
  if srv_variant_envs "$v" | grep -qE '^LOCKSWAP_SEM=' && ! srv_variant_envs "$v" | grep -qx 'LOCKSWAP_SEM=glibc'; then
    PG_VARIANTS+=("$v")
  fi
done
((${#PG_VARIANTS[@]})) || PG_VARIANTS=("${ALL[@]:2}")

OUT=$BUILD_DIR/demo/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
ln -sfn "$(basename "$OUT")" "$BUILD_DIR/demo/latest"
RESULTS=$OUT/results.txt
: >"$RESULTS"

HELPER_PID=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$HELPER_PID" ]] && kill -0 "$HELPER_PID" 2>/dev/null; then
    kill -TERM "$HELPER_PID" 2>/dev/null || true   # a runner's own trap stops its server
    wait_until 60 eval "! kill -0 $HELPER_PID 2>/dev/null" || kill -KILL "$HELPER_PID" 2>/dev/null || true
  fi
  # Last resort: a server a runner could not stop (its pid and name, never by name alone).
  local f pid comm
  for f in "$OUT"/*/server.pid; do
    [[ -f "$f" ]] || continue
    read -r pid comm <"$f" || continue
    kill_pid "$pid" "$comm" 20
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run_part NAME CMD...: a runner in the background (so a signal interrupts
# the wait); its RESULT lines go to results.txt, its table to NAME/table.txt.
FAILED=0 TSVS=()
run_part() {
  local name=$1 rc=0; shift
  log "demo: --- $name ---"
  "$@" >"$OUT/$name.out" &
  HELPER_PID=$!
  wait "$HELPER_PID" || rc=$?
  HELPER_PID=''
  grep -E '^(RESULT|SKIP) ' "$OUT/$name.out" >>"$RESULTS" || true
  if grep -q '^SKIP ' "$OUT/$name.out"; then log "demo: $name skipped ($(grep '^SKIP ' "$OUT/$name.out"))"
  elif [[ -f "$OUT/$name/runs.tsv" ]]; then TSVS+=("$OUT/$name/runs.tsv"); fi
  ((rc == 0)) || { FAILED=1; log "demo: $name: exit status $rc (see $OUT/$name.out and $OUT/$name/)"; }
  return 0
}

log "demo: output in $OUT"
{
  echo "date:      $(date -Is)"
  echo "host:      $(uname -sr), $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
  echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (at start)"
  srv_probe_summary
  srv_host_summary
  echo "library:   $LIBLOCKSWAP"
  echo "variants:  ${ALL[*]}  (PostgreSQL: none glibc ${PG_VARIANTS[*]}); rounds $REPEAT, ${TIME}s runs, quick=$QUICK"
  SRV_PROFILE=$PROFILE srv_stats_header
} | tee "$OUT/header.txt" >&2
SRV_ALL=("${ALL[@]}") SRV_REPEAT=$REPEAT SRV_TIME=$TIME SRV_WARMUP=$WARMUP SRV_STRICT=$STRICT
srv_audit_begin "$OUT/audit.json" "${DEMO_ARGV[@]}"

COMMON=(--repeat "$REPEAT" --time "$TIME" --warmup "$WARMUP")
((PROFILE)) && COMMON+=(--profile)
((STRICT)) && COMMON+=(--strict-steady)
VLIST=$(IFS=,; echo "${ALL[*]}")
S=$ROOT/examples/servers
wants postgres && run_part postgres bash "$S/postgres.sh" --dir "$OUT/postgres" "${COMMON[@]}" \
  --variants "$(IFS=,; echo "${PG_VARIANTS[*]}")" ${LWLOCKS:+--lwlock "$LWLOCKS"} "${PG[@]}"
wants mariadb && run_part mariadb bash "$S/mariadb.sh" --dir "$OUT/mariadb" "${COMMON[@]}" --variants "$VLIST" "${MARIA[@]}"
wants wiredtiger && run_part wiredtiger bash "$S/wiredtiger.sh" --dir "$OUT/wiredtiger" "${COMMON[@]}" \
  --variants "$VLIST" ${WTLOCKS:+--wtlock "$WTLOCKS"} ${WT[@]+"${WT[@]}"}
wants mongod && run_part mongod bash "$S/mongod.sh" --dir "$OUT/mongod" "${COMMON[@]}" --variants "$VLIST"
wants memcached && run_part memcached bash "$S/memcached.sh" --dir "$OUT/memcached" "${COMMON[@]}" \
  --variants "$VLIST" ${MC[@]+"${MC[@]}"}
wants rocksdb && run_part rocksdb bash "$S/rocksdb.sh" --dir "$OUT/rocksdb" "${COMMON[@]}" --variants "$VLIST" "${ROCKS[@]}"

# ------------------------------------------------- sysbench's built-in tests
# One row per run in sysbench/runs.tsv, the format of the runners.
sysbench_run() {  # sysbench_run TEST THREADS VARIANT REP
  local test=$1 t=$2 v=$3 rep=$4 out stats='' rc=0 args tag
  tag=$(srv_tag "$test-t$t-$v-r$rep")
  out=$SRV_DIR/$tag.log
  [[ "$v" == none ]] || stats=$SRV_DIR/stats-$tag.txt
  srv_env_words "$v" "$LIBLOCKSWAP" "$stats"
  if [[ $test == mutex ]]; then
    args=(mutex --threads="$t" --mutex-num=1 --mutex-locks=$((SB_MUTEX_TOTAL / t)) --mutex-loops=100)
  else
    args=(threads --threads="$t" --thread-yields=100 --thread-locks=4 --time="$SB_THREADS_TIME")
  fi
  timeout 300 env -i PATH="$PATH" ${SRV_ENV[@]+"${SRV_ENV[@]}"} sysbench "${args[@]}" run >"$out" 2>&1 || rc=$?
  local secs events value status=ok
  secs=$(sed -n 's/^ *total time: *\([0-9.]*\)s.*/\1/p' "$out")
  events=$(sed -n 's/^ *total number of events: *\([0-9]*\).*/\1/p' "$out")
  if ((rc != 0)) || [[ -z "$secs" ]]; then
    log "sysbench $test $t threads $v: failed (status $rc), see $out"; tail -5 "$out" >&2; status=FAIL
  fi
  if [[ $test == mutex ]]; then  # a fixed number of acquisitions: acquisitions per second
    value=$(awk -v n="$SB_MUTEX_TOTAL" -v s="${secs:-0}" 'BEGIN { if (s > 0) printf "%.0f", n / s }')
    srv_record bench="sb-mutex-t$t" label="sysbench mutex $t thr" variant="$v" rep="$rep" value="$value" \
      unit=locks/s status="$status" stats="$stats" extra="time_s=$secs" | tee -a "$RESULTS"
  else
    value=$(awk -v e="${events:-0}" -v s="${secs:-0}" 'BEGIN { if (s > 0) printf "%.1f", e / s }')
    srv_record bench="sb-threads-t$t" label="sysbench threads $t thr" variant="$v" rep="$rep" value="$value" \
      unit=events/s status="$status" stats="$stats" | tee -a "$RESULTS"
  fi
}
if wants sysbench; then
  log "demo: --- sysbench mutex + threads, threads: $SB_THREADS ---"
  SRV_DIR=$OUT/sysbench SRV_ALL=("${ALL[@]}") SRV_REPEAT=$REPEAT SRV_TIME=$SB_THREADS_TIME SRV_WARMUP=0
  SRV_QUIET=1 SRV_AS=() SRV_EXTRA_ENV=() SRV_PROFILE=$PROFILE
  mkdir -p "$SRV_DIR"
  rm -f "$SRV_DIR/rounds.tsv"
  srv_write_header
  sysbench_one() { sysbench_run "${1%-t*}" "${1##*-t}" "$2" "$3"; }  # TEST-tTHREADS VARIANT REP (srv_rounds)
  keys=()
  for t in $SB_THREADS; do keys+=("mutex-t$t" "threads-t$t"); done
  srv_rounds sysbench_one "${keys[@]}" >/dev/null
  if ((PROFILE)); then
    srv_profile_begin
    for t in $SB_THREADS; do
      for test in mutex threads; do
        for v in "${ALL[@]:1}"; do sysbench_run "$test" "$t" "$v" profile; done
      done
    done >/dev/null
    srv_profile_end
  fi
  TSVS+=("$SRV_DIR/runs.tsv")
fi

# ----------------------------------------------------------------- jemalloc
if wants jemalloc; then
  JE_ARGS=(--dir "$OUT/jemalloc" --threads 16 --ops "$JE_OPS" --repeat "$REPEAT")
  ((PROFILE)) && JE_ARGS+=(--profile)
  run_part jemalloc bash "$S/jemalloc.sh" "${JE_ARGS[@]}" "${ALL[@]}"
  SRV_DIR=$OUT/jemalloc SRV_QUIET=1 SRV_PROFILE=$PROFILE
  srv_write_header
  while read -r line; do  # the runs in runs.tsv (rounds.tsv is jemalloc.sh's), the profiled ones apart
    if [[ "$(kv rep "$line")" == profile ]]; then srv_profile_begin; else SRV_ROUND=$(kv round "$line"); fi
    srv_record bench=jemalloc label="jemalloc malloc/free 16 thr" variant="$(kv variant "$line")" \
      rep="$(kv rep "$line")" value="$(kv mops "$line")" unit=M-ops/s status="$(kv status "$line")" \
      stats="$(kv stats "$line")" extra="lock_events=$(kv lock_events "$line")" >/dev/null
    srv_profile_end
  done < <(grep '^RESULT bench=jemalloc ' "$OUT/jemalloc.out" || true)
  [[ ! -s "$SRV_DIR/runs.tsv" ]] || TSVS+=("$SRV_DIR/runs.tsv")
fi

# ------------------------------------------------------------------ the table
echo
if ((${#TSVS[@]})); then
  STRICT_ARG=()
  ((STRICT)) && STRICT_ARG=(--strict-steady)
  "$SRV_PYTHON" "$ROOT/examples/servers/report.py" --title "lockswap demo" --header "$OUT/header.txt" --events \
    --repeat "$REPEAT" ${STRICT_ARG[@]+"${STRICT_ARG[@]}"} \
    --md "$OUT/table.txt" --csv "$OUT/table.csv" --png "$OUT/table.png" --html "$OUT/table.html" "${TSVS[@]}"
fi
if wants jemalloc; then
  b=$(grep '^RESULT bench=jemalloc-bindings ' "$RESULTS" || true)
  c=$(grep '^RESULT bench=jemalloc-control ' "$RESULTS" || true)
  [[ -z "$b" ]] || echo "jemalloc: libjemalloc.so.2 imports bound to liblockswap.so: $(kv bound "$b") ($(kv symbols "$b")) $(kv status "$b")" | tee -a "$OUT/table.txt"
  [[ -z "$c" ]] || echo "jemalloc: control, the same stress on glibc malloc under rwsem: $(kv lock_events "$c") lock events $(kv status "$c")" | tee -a "$OUT/table.txt"
fi
grep '^SKIP ' "$RESULTS" | tee -a "$OUT/table.txt" || true
# Low reach (docs/reach.md): the rows whose variants swap under half of the lock waiting, said
# again at the end, where the verdicts are read.
[[ ! -f "$OUT/table.txt" ]] || grep '^WARNING .*this comparison can move at most' "$OUT/table.txt" \
  | sed 's/^WARNING /reach warning: /' || true
if grep -q 'status=FAIL' "$RESULTS" || ((FAILED)); then
  echo "FAILED: see the RESULT lines with status=FAIL in $RESULTS and the logs under $OUT" | tee -a "$OUT/table.txt"
  FAILED=1
else
  echo "all runs completed; every server shut down cleanly." | tee -a "$OUT/table.txt"
fi
srv_audit_end "$OUT/audit.json"
echo "table: $OUT/table.txt (.csv, .png, .html); audit: $OUT/audit.json; every run: $RESULTS; logs and LOCKSWAP_STATS per run: $OUT/<part>/"
exit "$FAILED"
