#!/usr/bin/env bash
# scripts/demo.sh — unmodified programs under glibc's locks and under each
# lockswap variant, compared in one run.
#
#   scripts/demo.sh [--quick] [--variants "futex rwsem rwsem-rspin"]
#                   [--only "sysbench mariadb memcached jemalloc"]
#                   [--repeat N] [--oversub N] [--no-setup]
#
#   (a) sysbench's built-in `mutex` (one hot mutex) and `threads` (lock +
#       sched_yield) tests, at 2 threads and oversubscribed (16), each
#       repeated and the median kept, variants interleaved;
#   (b) a private MariaDB server (own datadir, socket and 127.0.0.1 port)
#       with liblockswap.so preloaded: sysbench oltp_read_write, 8 threads,
#       10 s per variant, clean shutdown checked;
#   (c) memcached under memcaslap (memaslap), 5 s per variant;
#   (d) jemalloc preloaded with lockswap (its mutexes go through lockswap):
#       a 16-thread cross-thread malloc/free stress must complete.
# glibc (the control) always runs first; ratios are variant / glibc from this
# run. Everything listens on 127.0.0.1 only; every server is stopped on exit.
# Logs, LOCKSWAP_STATS output of every run and the table: build/demo/<time>/.
# Exit status: 0 when every run completed cleanly, 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/scripts/lib.sh"

QUICK=0 SETUP=1 REPEAT='' OVERSUB=16
VARIANTS="futex rwsem rwsem-rspin"
ONLY="sysbench mariadb memcached jemalloc"
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --variants) [[ $# -ge 2 ]] || die "--variants needs a value"; VARIANTS=$2; shift 2 ;;
    --variants=*) VARIANTS=${1#*=}; shift ;;
    --only) [[ $# -ge 2 ]] || die "--only needs a value"; ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#*=}; shift ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --oversub) OVERSUB=$2; shift 2 ;;
    --no-setup) SETUP=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for part in $ONLY; do
  case "$part" in sysbench|mariadb|memcached|jemalloc) ;; *) die "--only: unknown part '$part'" ;; esac
done
wants() { [[ " $ONLY " == *" $1 "* ]]; }

if ((QUICK)); then
  SB_MUTEX_TOTAL=8000000 SB_THREADS_TIME=1 REPEAT=${REPEAT:-1}
  DB_TIME=3 DB_WARMUP=1 MC_TIME=2 JE_OPS=20000
else
  SB_MUTEX_TOTAL=24000000 SB_THREADS_TIME=3 REPEAT=${REPEAT:-3}
  DB_TIME=10 DB_WARMUP=2 MC_TIME=5 JE_OPS=200000
fi

if ((SETUP)); then
  bash "$ROOT/scripts/setup.sh"
  bash "$ROOT/scripts/build.sh" >/dev/null
fi
require_library

# The control first, then each variant; the library validates every name.
ALL=(glibc)
for v in $VARIANTS; do [[ "$v" == glibc ]] || ALL+=("$v"); done
for v in "${ALL[@]}"; do check_variant "$v"; done

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
    kill -TERM "$HELPER_PID" 2>/dev/null || true
    wait_until 30 eval "! kill -0 $HELPER_PID 2>/dev/null" || kill -KILL "$HELPER_PID" 2>/dev/null || true
  fi
  # Belt and braces: any server a helper left behind.
  local f
  for f in "$OUT"/mariadb/mysqld.pid "$OUT"/memcached/memcached.pid; do
    [[ -f "$f" ]] || continue
    kill_pid "$(cat "$f")" "$( [[ $f == *mysqld.pid ]] && echo mariadbd || echo memcached)" 20
  done
  # The database files are big and only needed during the run.
  rm -rf "$OUT/mariadb/data"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run_helper CMD...: run a helper in the background (so a signal interrupts
# the wait), append its RESULT lines to the results file.
FAILED=0
run_helper() {
  local tmp=$OUT/.helper.out rc=0
  "$@" >"$tmp" &
  HELPER_PID=$!
  wait "$HELPER_PID" || rc=$?
  HELPER_PID=''
  grep '^RESULT ' "$tmp" | tee -a "$RESULTS" || true
  rm -f "$tmp"
  ((rc == 0)) || FAILED=1
  return 0
}

log "demo: output in $OUT"
{
  echo "date:      $(date -Is)"
  echo "host:      $(uname -sr), $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
  echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (at start)"
  echo "library:   $LIBLOCKSWAP"
  echo "variants:  ${ALL[*]}  (repeat $REPEAT, quick=$QUICK)"
  echo "programs:  $(sysbench --version 2>/dev/null), $(mariadbd --version 2>/dev/null | awk '{print $1, $3}'), $(memcached -V 2>/dev/null)"
} | tee "$OUT/header.txt"

# ---------------------------------------------------------------- (a) sysbench
# One RESULT line per run; the table takes the median over repeats.
sysbench_run() {  # sysbench_run TEST THREADS VARIANT REP
  local test=$1 t=$2 variant=$3 rep=$4 envs out stats rc=0 args
  read -r -a envs <<<"$(variant_env "$variant")"
  local tag=${variant//\//_}
  out=$OUT/sysbench/$test-t$t-$tag-r$rep.log
  stats=$OUT/sysbench/stats-$test-t$t-$tag-r$rep.log
  if [[ $test == mutex ]]; then
    args=(mutex --threads="$t" --mutex-num=1 --mutex-locks=$((SB_MUTEX_TOTAL / t)) --mutex-loops=100)
  else
    args=(threads --threads="$t" --thread-yields=100 --thread-locks=4 --time="$SB_THREADS_TIME")
  fi
  timeout 300 env "${envs[@]}" LD_PRELOAD="$LIBLOCKSWAP" LOCKSWAP_STATS_FILE="$stats" \
    sysbench "${args[@]}" run >"$out" 2>&1 || rc=$?
  local secs events value status=ok
  secs=$(sed -n 's/^ *total time: *\([0-9.]*\)s.*/\1/p' "$out")
  events=$(sed -n 's/^ *total number of events: *\([0-9]*\).*/\1/p' "$out")
  if ((rc != 0)) || [[ -z "$secs" ]]; then
    log "sysbench $test $t threads $variant: failed (status $rc), see $out"
    tail -5 "$out" >&2
    status=FAIL; FAILED=1; secs=0; events=0
  fi
  if [[ $test == mutex ]]; then
    value=$secs
    echo "RESULT bench=sb-mutex-t$t variant=$variant time_s=$value rep=$rep status=$status stats=$stats"
  else
    value=$(awk -v e="$events" -v s="$secs" 'BEGIN { printf "%.1f", (s > 0 ? e / s : 0) }')
    echo "RESULT bench=sb-threads-t$t variant=$variant events_per_s=$value rep=$rep status=$status stats=$stats"
  fi | tee -a "$RESULTS"
}

if wants sysbench; then
  mkdir -p "$OUT/sysbench"
  log "demo: (a) sysbench mutex + threads, 2 and $OVERSUB threads, $REPEAT repeat(s)"
  for ((rep = 1; rep <= REPEAT; rep++)); do
    for t in 2 "$OVERSUB"; do
      for v in "${ALL[@]}"; do sysbench_run mutex "$t" "$v" "$rep"; done
      for v in "${ALL[@]}"; do sysbench_run threads "$t" "$v" "$rep"; done
    done
  done
fi

# ----------------------------------------------------------------- (b) MariaDB
if wants mariadb; then
  log "demo: (b) MariaDB + sysbench oltp_read_write, ${DB_TIME}s per variant"
  run_helper bash "$ROOT/examples/servers/mariadb.sh" --dir "$OUT/mariadb" --time "$DB_TIME" \
    --warmup "$DB_WARMUP" --threads 8 --tables 4 --table-size 10000 all "${ALL[@]}"
fi

# --------------------------------------------------------------- (c) memcached
if wants memcached; then
  log "demo: (c) memcached + memcaslap, ${MC_TIME}s per variant"
  run_helper bash "$ROOT/examples/servers/memcached.sh" --dir "$OUT/memcached" --time "$MC_TIME" \
    --client-threads 4 --concurrency 32 --server-threads 4 all "${ALL[@]}"
fi

# ---------------------------------------------------------------- (d) jemalloc
if wants jemalloc; then
  log "demo: (d) jemalloc + lockswap: 16-thread malloc/free stress"
  run_helper bash "$ROOT/examples/servers/jemalloc.sh" --dir "$OUT/jemalloc" --threads 16 \
    --ops "$JE_OPS" "${ALL[@]}"
fi

# ------------------------------------------------------------------ the table
# ROW spec: bench|metric|direction|label
ROWS=()
if wants sysbench; then
  ROWS+=("sb-mutex-t2|time_s|lower|sysbench mutex, 2 thr: time s"
         "sb-mutex-t$OVERSUB|time_s|lower|sysbench mutex, $OVERSUB thr: time s"
         "sb-threads-t2|events_per_s|higher|sysbench threads, 2 thr: events/s"
         "sb-threads-t$OVERSUB|events_per_s|higher|sysbench threads, $OVERSUB thr: events/s")
fi
if wants mariadb; then
  ROWS+=("mariadb|tps|higher|MariaDB oltp_read_write: tps"
         "mariadb|qps|higher|MariaDB oltp_read_write: qps"
         "mariadb|p95_ms|lower|MariaDB oltp_read_write: p95 ms"
         "mariadb|errors|info|MariaDB: sysbench ignored errors"
         "mariadb|shutdown|info|MariaDB: shutdown")
fi
if wants memcached; then
  ROWS+=("memcached|tps|higher|memcached/memcaslap: TPS"
         "memcached|shutdown|info|memcached: shutdown")
fi
if wants jemalloc; then
  ROWS+=("jemalloc|mops|higher|jemalloc stress: M malloc+free/s"
         "jemalloc|lock_events|info|jemalloc: lockswap lock events")
fi

report() {
  awk -v rows="$(printf '%s\n' "${ROWS[@]}")" -v variants="${ALL[*]}" '
    function median(list,   n, a, i, j, t) {
      n = split(list, a, " ")
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
      if (n == 0) return ""
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    /^RESULT / {
      delete kv
      for (i = 2; i <= NF; i++) { p = index($i, "="); kv[substr($i, 1, p - 1)] = substr($i, p + 1) }
      b = kv["bench"]; v = kv["variant"]
      for (k in kv) vals[b, v, k] = (vals[b, v, k] == "" ? "" : vals[b, v, k] " ") kv[k]
      if (b == "jemalloc-control") { control = kv["lock_events"]; if (kv["status"] != "ok") bindings_bad = 1; next }
      if (b == "jemalloc-bindings") { bindings = kv["bound"] " symbols: " kv["symbols"]; if (kv["status"] != "ok") bindings_bad = 1; next }
      if (kv["status"] != "ok") bad[b, v] = 1
      seen[b, v] = 1
    }
    END {
      nv = split(variants, V, " ")
      nr = split(rows, R, "\n")
      w = 40
      printf "%-" w "s", "benchmark (median of repeats)"
      for (i = 1; i <= nv; i++) printf "  %-18s", V[i]
      printf "\n"
      line = sprintf("%" (w + nv * 20) "s", ""); gsub(/ /, "-", line); print line
      for (r = 1; r <= nr; r++) {
        if (R[r] == "") continue
        split(R[r], f, "|")
        b = f[1]; m = f[2]; dir = f[3]; label = f[4]
        printf "%-" w "s", label (dir == "lower" ? " (v)" : dir == "higher" ? " (^)" : "")
        base = median(vals[b, "glibc", m])
        for (i = 1; i <= nv; i++) {
          v = V[i]
          if (!((b, v) in seen)) { cell = "-" }
          else if (dir == "info") { cell = vals[b, v, m]; if (cell == "") cell = "-" }
          else {
            x = median(vals[b, v, m])
            cell = x
            if (v != "glibc" && base + 0 > 0 && x + 0 > 0) cell = sprintf("%s (%.2fx)", x, x / base)
          }
          if (((b, v) in bad) && dir != "info") cell = (cell == "" ? "FAIL" : cell " FAIL")
          printf "  %-18s", cell
        }
        printf "\n"
      }
      print line
      print "(^) higher is better, (v) lower is better; (N.NNx) = variant / glibc, same run."
      if (bindings != "") print "jemalloc: libjemalloc.so.2 imports bound to liblockswap.so (LD_DEBUG=bindings): " bindings (bindings_bad ? " FAIL" : "")
      if (control != "") print "jemalloc: control run, same stress on glibc malloc (no jemalloc) under rwsem: " control " lock events"
      nbad = bindings_bad + 0
      for (k in bad) nbad++
      if (nbad) print "FAILED runs: " nbad " (see RESULT lines with status=FAIL and the logs)"
      else print "all runs completed; servers shut down cleanly."
    }' "$RESULTS"
}

echo
report | tee "$OUT/table.txt"
echo
echo "results: $RESULTS"
echo "logs and LOCKSWAP_STATS per run: $OUT/{sysbench,mariadb,memcached,jemalloc}/stats-*.log"
if wants mariadb || wants memcached; then
  echo
  echo "lock events of the server runs (LOCKSWAP_STATS_FILE):"
  for f in "$OUT"/mariadb/stats-*.log "$OUT"/memcached/stats-*.log; do
    [[ -s "$f" ]] || continue
    echo "--- ${f#"$OUT"/}"
    sed 's/^lockswap: //' "$f"
  done | tee "$OUT/server-stats.txt"
fi
exit "$FAILED"
