#!/usr/bin/env bash
# examples/servers/postgres.sh — a private PostgreSQL 15 server under each
# LOCKSWAP_SEM variant, driven by sysbench (pgsql driver), variants
# interleaved across repetitions, compared against glibc from the same run.
#
#   postgres.sh [options]
# options:
#   --variants LIST  comma list of LOCKSWAP_SEM variants [glibc,futex,lockref];
#                    a variant may carry settings: lockref:LOCKSWAP_LOCKREF_RETRIES=0;
#                    `none` runs without the preload. glibc is the baseline and
#                    always runs.
#   --repeat N       repetitions (each runs every variant, order rotated) [3]
#   --time S         measured seconds per run [20]    --warmup S  [3]
#   --threads N      sysbench threads [8 x CPUs, at least 8, at most 128]
#   --tables N       sysbench tables [16]             --rows N    rows per table [10000]
#   --workload W     read_write | read_only | both [read_write]
#   --env K=V        an extra LOCKSWAP_* setting for every preloaded run
#                    (repeatable; e.g. a future LOCKSWAP_CID=...)
#   --no-fsync       fsync, synchronous_commit and full_page_writes off (default:
#                    PostgreSQL's own settings, under which commits wait for the
#                    WAL flush and backends sleep on their semaphores far more often)
#   --dir D          results directory [build/servers/postgres/<time>]
#   --port P         first port to try on 127.0.0.1 [25432]
#   --user U         unprivileged user the server runs as when started by root [postgres]
#   --keep           keep the temporary data directory
#   --report D       print the tables of an earlier run from D/runs.tsv, run nothing
#
# How: initdb into a temporary directory owned by the unprivileged user; the
# server listens on 127.0.0.1 (a free port) and a socket in that directory
# only, with shared_buffers=80MB and max_connections=250. The sysbench tables
# are prepared once WITHOUT the preload and the stopped data directory is
# kept as a pristine copy that every run starts from (no drift from table
# bloat or a growing WAL across runs); then, for every run, the postmaster
# is started with LD_PRELOAD=liblockswap.so and LOCKSWAP_SEM=<variant>, so
# the postmaster and every backend it forks use that variant (all processes
# sharing PostgreSQL's semaphores must run the same variant). The server is
# stopped by its PID (SIGINT = fast shutdown) and must exit with status 0.
# Every preloaded run writes LOCKSWAP_STATS_FILE: one block per process
# ("lockswap: pid N ..." then its events); a pg_stat_activity snapshot taken
# mid-run names each pid's backend type.
#
# Output: progress on stderr; one RESULT line per run and the comparison
# tables on stdout; in --dir: logs, sysbench output, stats-*.txt,
# results.csv, results.md.
# Exit status 0 when every run completed (sysbench finished, no reconnects,
# clean shutdown); 1 otherwise.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib.sh
source "$HERE/../../scripts/lib.sh"

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
VARIANTS=glibc,futex,lockref REPEAT=3 TIME=20 WARMUP=3 THREADS='' TABLES=16 ROWS=10000
WORKLOAD=read_write DURABLE=1 DIR='' PORT_BASE=25432 PGUSER_OS=postgres KEEP=0
EXTRA_ENV=()

# report DIR: the tables from DIR/runs.tsv and the stats files it names.
report() {
  python3 - "$1/runs.tsv" "$1" <<'PY' | tee "$1/results.md"
import csv, os, re, statistics, sys
runs_file, out = sys.argv[1], sys.argv[2]
runs = list(csv.DictReader(open(runs_file), delimiter="\t"))
variants, workloads = [], []
for r in runs:
    if r["variant"] not in variants: variants.append(r["variant"])
    if r["workload"] not in workloads: workloads.append(r["workload"])
base = "glibc"

def num(x):
    try: return float(x)
    except (TypeError, ValueError): return None

merged = set()  # pids whose block has lines of another process mixed in (written line by line to one fd)


def parse_stats(path):
    """[(pid, header, {event: count}, [raw lines])] — one block per process."""
    blocks = []
    try: lines = open(path).read().splitlines()
    except OSError: return blocks
    for l in lines:
        m = re.match(r"lockswap: pid (\d+)\s*(.*)", l)
        if m:
            blocks.append((int(m.group(1)), m.group(2), {}, [l])); continue
        m = re.match(r"lockswap: (\S+)\s+(\d+)", l)
        if m and blocks:
            if m.group(1) in blocks[-1][2]:
                merged.add((path, blocks[-1][0]))  # another process's lines interleaved with this block
            blocks[-1][2][m.group(1)] = blocks[-1][2].get(m.group(1), 0) + int(m.group(2))
            blocks[-1][3].append(l)
    return blocks

def activity(path):
    d = {}
    try:
        for l in open(path):
            p = l.rstrip("\n").split("\t")
            if len(p) == 2 and p[0].isdigit(): d[int(p[0])] = p[1]
    except OSError: pass
    return d

def table(header, rows):
    s = "| " + " | ".join(header) + " |\n|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|\n"
    return s + "".join("| " + " | ".join(r) + " |\n" for r in rows)

s = []
for w in workloads:
    rs = [r for r in runs if r["workload"] == w]
    med = {}
    for v in variants:
        tps = [num(r["tps"]) for r in rs if r["variant"] == v and num(r["tps"])]
        med[v] = statistics.median(tps) if tps else None
    s.append(f"\n## sysbench {w}: median of {max(int(r['rep']) for r in rs)} interleaved runs\n\n")
    rows = []
    for v in variants:
        vr = [r for r in rs if r["variant"] == v]
        tps = [num(r["tps"]) for r in vr if num(r["tps"])]
        p95 = [num(r["p95_ms"]) for r in vr if num(r["p95_ms"]) is not None]
        errs = sum(int(r["errors"]) for r in vr if r["errors"].isdigit())
        bad = [r["status"] for r in vr if r["status"] != "ok"]
        t = med[v]
        ratio = f"{t / med[base]:.3f}" if t and med.get(base) else "-"
        spread = f"{max(tps) / min(tps):.2f}" if len(tps) > 1 else "-"
        rows.append([v, f"{t:.1f}" if t else "-", ratio, spread,
                     f"{statistics.median(p95):.2f}" if p95 else "-",
                     " ".join(f"{x:.0f}" for x in tps), str(errs), "ok" if not bad else f"{len(bad)} FAIL"])
    s.append(table(["variant", "tps", f"ratio to {base}", "max/min tps", "p95 ms", "tps of each run",
                    "ignored errors", "status"], rows))
    # events summed over all processes of a run, median over runs
    ev_by_v, nproc_by_v = {}, {}
    for v in variants:
        per_run = []
        for r in rs:
            if r["variant"] != v: continue
            blocks = parse_stats(r["stats"])
            tot = {}
            for _, _, ev, _ in blocks:
                for k, c in ev.items(): tot[k] = tot.get(k, 0) + c
            per_run.append((len(blocks), tot, num(r["tps"]) or 0, r))
        ev_by_v[v] = per_run
    names = sorted({k for v in variants for _, tot, _, _ in ev_by_v[v] for k in tot})
    if names:
        s.append("\nLock events summed over every process of a run (server lifetime: warm-up and measured "
                 "run), median over runs:\n\n")
        rows = [["processes with a stats block"] + [
            str(int(statistics.median([n for n, _, _, _ in ev_by_v[v]]))) if ev_by_v[v] else "-" for v in variants]]
        for k in names:
            rows.append([k] + [f"{statistics.median([tot.get(k, 0) for _, tot, _, _ in ev_by_v[v]]):.0f}"
                               if ev_by_v[v] else "-" for v in variants])
        s.append(table(["event"] + variants, rows))
    # one client backend's block: the busiest backend of the last run of a non-glibc variant
    pick = None
    for v in reversed(variants):
        for r in reversed([r for r in rs if r["variant"] == v]):
            blocks = parse_stats(r["stats"])
            if not blocks: continue
            act = activity(r["activity"])
            backends = ([b for b in blocks if act.get(b[0]) == "client backend" and (r["stats"], b[0]) not in merged]
                        or [b for b in blocks if act.get(b[0]) == "client backend"] or blocks)
            # the median backend by semaphore events: typical, not the extreme
            backends.sort(key=lambda b: sum(c for k, c in b[2].items() if "sem" in k or "lockref" in k))
            b = backends[len(backends) // 2]
            pick = (v, r, b, act)
            break
        if pick: break
    if pick:
        v, r, b, act = pick
        s.append(f"\nStats block of one backend (pid {b[0]}, {act.get(b[0], 'type unknown')}; variant {v}, "
                 f"run {r['rep']}; file {os.path.basename(r['stats'])}):\n\n```\n" + "\n".join(b[3]) + "\n```\n")
        kinds = {}
        for blk in parse_stats(r["stats"]):
            kinds.setdefault(act.get(blk[0], "exited before the snapshot"), []).append(blk)
        rows = []
        for kind, bl in sorted(kinds.items()):
            ev = {}
            for blk in bl:
                for k, c in blk[2].items(): ev[k] = ev.get(k, 0) + c
            top = ", ".join(f"{k} {c}" for k, c in sorted(ev.items(), key=lambda kv: -kv[1])[:6])
            rows.append([kind, str(len(bl)), top or "(no events)"])
        s.append(f"\nThat run's processes by kind (from pg_stat_activity mid-run):\n\n"
                 + table(["process kind", "blocks", "events (top 6, summed)"], rows))
if merged:
    s.append(f"\nNote: {len(merged)} stats block(s) had lines of another process mixed in (processes exiting at "
             f"the same moment write their blocks line by line to one file or log); per-process numbers of those "
             f"are approximate, totals are exact.\n")
print("".join(s))
PY
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --variants) VARIANTS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --time) TIME=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --tables) TABLES=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --workload) WORKLOAD=$2; shift 2 ;;
    --env) [[ "$2" == LOCKSWAP_*=* ]] || die "--env $2: expected LOCKSWAP_NAME=VALUE"
           EXTRA_ENV+=("$2"); shift 2 ;;
    --no-fsync) DURABLE=0; shift ;;
    --dir) DIR=$2; shift 2 ;;
    --port) PORT_BASE=$2; shift 2 ;;
    --user) PGUSER_OS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --report) [[ -f "$2/runs.tsv" ]] || die "--report $2: no runs.tsv there"; report "$2"; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for n in REPEAT TIME WARMUP TABLES ROWS; do
  [[ "${!n}" =~ ^[0-9]+$ ]] || die "--${n,,} must be a number"
done
((REPEAT >= 1 && TIME >= 1)) || die "--repeat and --time must be >= 1"
if [[ -z "$THREADS" ]]; then
  THREADS=$(( $(nproc) * 8 )); ((THREADS >= 8)) || THREADS=8; ((THREADS <= 128)) || THREADS=128
fi
if ! [[ "$THREADS" =~ ^[0-9]+$ ]] || ((THREADS < 1 || THREADS > 240)); then die "--threads must be 1..240"; fi
case "$WORKLOAD" in
  read_write|read_only) WORKLOADS=("oltp_$WORKLOAD") ;;
  both) WORKLOADS=(oltp_read_write oltp_read_only) ;;
  *) die "--workload must be read_write, read_only or both" ;;
esac

for tool in "$PGBIN/postgres" "$PGBIN/initdb" "$PGBIN/psql" "$PGBIN/pg_isready"; do
  [[ -x "$tool" ]] || die "$tool not found: run scripts/setup.sh (Debian package postgresql-15)"
done
command -v sysbench >/dev/null || die "sysbench not found: run scripts/setup.sh"
[[ "$(sysbench --help 2>&1)" == *'pgsql - PostgreSQL'* ]] || die "this sysbench has no pgsql driver"
command -v python3 >/dev/null || die "python3 not found (used for the tables)"

# --- variants: glibc first; each is BASE[:K=V...] ---
IFS=', ' read -r -a VLIST <<<"$VARIANTS"
ALL=(glibc)
for v in "${VLIST[@]}"; do [[ -z "$v" || "$v" == glibc ]] || ALL+=("$v"); done
# variant_envs SPEC: prints the LOCKSWAP_* settings of a variant, one a line.
variant_envs() {
  local spec=$1 base kv
  base=${spec%%:*}
  [[ "$base" == none ]] && return 0
  echo "LOCKSWAP_SEM=$base"
  if [[ "$spec" == *:* ]]; then
    IFS=':' read -r -a kv <<<"${spec#*:}"
    for x in "${kv[@]}"; do
      [[ "$x" == LOCKSWAP_*=* ]] || die "variant $spec: '$x' is not LOCKSWAP_NAME=VALUE"
      echo "$x"
    done
  fi
  for x in ${EXTRA_ENV[@]+"${EXTRA_ENV[@]}"}; do echo "$x"; done
}
require_library
for v in "${ALL[@]}"; do
  [[ "${v%%:*}" == none ]] && continue
  mapfile -t envs < <(variant_envs "$v")
  if ! out=$(env -i PATH="$PATH" "${envs[@]}" LD_PRELOAD="$LIBLOCKSWAP" /bin/true 2>&1); then
    printf '%s\n' "$out" >&2
    die "variant '$v' rejected by $LIBLOCKSWAP (does it offer LOCKSWAP_SEM yet?)"
  fi
done
if ! nm -D "$LIBLOCKSWAP" 2>/dev/null | grep -qE ' T sem_wait(@|$)'; then
  log "postgres: note: $LIBLOCKSWAP does not export sem_wait: every variant runs glibc's semaphores"
fi

# --- directories; the server never runs as root ---
STAMP=$(date +%Y%m%d-%H%M%S)
DIR=${DIR:-$BUILD_DIR/servers/postgres/$STAMP}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
AS=()   # prefix that runs a command as the server's user
if [[ $(id -u) -eq 0 ]]; then
  id "$PGUSER_OS" >/dev/null 2>&1 || die "user $PGUSER_OS does not exist (--user)"
  # setpriv execs (no fork): $! is the server itself.
  AS=(setpriv --reuid="$PGUSER_OS" --regid="$(id -g "$PGUSER_OS")" --init-groups --)
fi
TMPD=$(mktemp -d /tmp/lockswap-pg.XXXXXX)
[[ ${#AS[@]} -eq 0 ]] || chown "$PGUSER_OS:" "$TMPD"
chmod 700 "$TMPD"
DATA=$TMPD/data
# The server's user must be able to read the library (the build tree may
# not be reachable for it): use a copy inside the private directory if not.
LIB=$LIBLOCKSWAP
if ! "${AS[@]}" test -r "$LIB"; then
  cp "$LIB" "$TMPD/liblockswap.so"; chmod 644 "$TMPD/liblockswap.so"; LIB=$TMPD/liblockswap.so
fi

SERVER_PID='' PORT=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if pid_alive "$SERVER_PID" postgres; then
    log "postgres: stopping leftover server $SERVER_PID"
    kill -INT "$SERVER_PID" 2>/dev/null || true
    wait_until 30 eval "! pid_alive $SERVER_PID postgres" || kill_pid "$SERVER_PID" postgres 10
  fi
  if ((KEEP)); then log "postgres: kept $TMPD"; else rm -rf "$TMPD"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

as_pg() { "${AS[@]}" env -i PATH="$PATH" LANG=C.UTF-8 "$@"; }
psql_q() { timeout 30 "$PGBIN/psql" -X -q -At -h "$TMPD" -p "$PORT" -U postgres -d "${PGDB:-postgres}" "$@"; }

PGOPTS=(-c listen_addresses=127.0.0.1 -c "unix_socket_directories=$TMPD" -c shared_buffers=80MB
        -c max_connections=250 -c huge_pages=off -c logging_collector=off)
if ((!DURABLE)); then
  PGOPTS+=(-c fsync=off -c synchronous_commit=off -c full_page_writes=off)
fi

# start_server LOGFILE STATSFILE ENV...: sets SERVER_PID and PORT. ENV empty: no preload.
start_server() {
  local errlog=$1 stats=$2; shift 2
  local pre=()
  if [[ $# -gt 0 ]]; then
    pre=(LD_PRELOAD="$LIB" "$@" LOCKSWAP_STATS_FILE="$stats")
  fi
  PORT=$(free_port "$PORT_BASE")
  # env -i: nothing of the caller's environment (no stray LOCKSWAP_*) reaches the server.
  "${AS[@]}" env -i PATH="$PATH" LANG=C.UTF-8 ${pre[@]+"${pre[@]}"} \
    "$PGBIN/postgres" -D "$DATA" -c port="$PORT" "${PGOPTS[@]}" </dev/null >"$errlog" 2>&1 &
  SERVER_PID=$!
  local i
  for ((i = 0; i < 600; i++)); do
    if ! pid_alive "$SERVER_PID"; then
      wait "$SERVER_PID" || true
      tail -20 "$errlog" >&2
      die "postgres exited during start-up; log: $errlog"
    fi
    if "$PGBIN/pg_isready" -q -h "$TMPD" -p "$PORT" -U postgres -d postgres 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  tail -20 "$errlog" >&2
  die "postgres did not accept connections within 60 s; log: $errlog"
}

# stop_server LOGFILE: fast shutdown by PID; sets VERDICT clean|unclean|timeout.
VERDICT=''
stop_server() {
  local errlog=$1 rc=0 verdict=clean
  kill -INT "$SERVER_PID" 2>/dev/null || verdict=unclean
  if ! wait_until 60 eval "! pid_alive $SERVER_PID"; then
    log "postgres: still running 60 s after SIGINT; killing it"
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    verdict=timeout
  fi
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=''
  if ((rc != 0)) && [[ "$verdict" == clean ]]; then
    log "postgres: postmaster exited with status $rc"; verdict=unclean
  fi
  if ! grep -q 'database system is shut down' "$errlog"; then
    log "postgres: no 'database system is shut down' in $errlog"; [[ "$verdict" != clean ]] || verdict=unclean
  fi
  if grep -qE '(PANIC|FATAL):' "$errlog" && grep -E '(PANIC|FATAL):' "$errlog" |
      grep -vqE 'terminating connection due to administrator command|the database system is (starting up|shutting down)'; then
    log "postgres: errors in $errlog:"; grep -E '(PANIC|FATAL):' "$errlog" | head -5 >&2
    verdict=unclean
  fi
  VERDICT=$verdict
}

SB_ARGS=()
sb_args() {  # sb_args WORKLOAD: sysbench's arguments for the running server
  SB_ARGS=("$1" --db-driver=pgsql --pgsql-host=127.0.0.1 --pgsql-port="$PORT" --pgsql-user=sbtest
           --pgsql-password=sbtest --pgsql-db=sbtest --tables="$TABLES" --table-size="$ROWS")
}

# --- prepare once, without the preload ---
{
  echo "date:      $(date -Is)"
  echo "host:      $(uname -sr), $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
  echo "server:    $("$PGBIN/postgres" --version), $(sysbench --version)"
  echo "library:   $LIBLOCKSWAP"
  echo "variants:  ${ALL[*]}   extra env: ${EXTRA_ENV[*]:-none}"
  echo "run:       ${WORKLOADS[*]}, $THREADS threads, ${TIME}s (+${WARMUP}s warm-up), $TABLES tables x $ROWS rows," \
       "repeat $REPEAT, durable=$DURABLE, shared_buffers=80MB max_connections=250"
} | tee "$DIR/header.txt" >&2

log "postgres: initdb in $DATA (server user: $( ((${#AS[@]})) && echo "$PGUSER_OS" || id -un))"
as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-instructions \
  >"$DIR/initdb.log" 2>&1 || { tail -20 "$DIR/initdb.log" >&2; die "initdb failed"; }
start_server "$DIR/prepare.log"  ""
psql_q -c "CREATE ROLE sbtest LOGIN PASSWORD 'sbtest'" -c "CREATE DATABASE sbtest OWNER sbtest" >/dev/null
log "postgres: sysbench prepare ($TABLES tables x $ROWS rows, no preload)"
sb_args oltp_read_write
timeout 900 sysbench "${SB_ARGS[@]}" --threads=$(( TABLES < 8 ? TABLES : 8 )) prepare >"$DIR/sysbench-prepare.log" 2>&1 || { tail -20 "$DIR/sysbench-prepare.log" >&2; die "sysbench prepare failed"; }
PGDB=sbtest psql_q -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
stop_server "$DIR/prepare.log"
[[ "$VERDICT" == clean ]] || die "the server did not shut down cleanly after prepare ($VERDICT)"
# Every run starts from this copy (cp -a keeps the owner and the modes).
cp -a "$DATA" "$TMPD/pristine"
reset_data() { rm -rf "$DATA" && cp -a "$TMPD/pristine" "$DATA"; }

# --- measured runs, interleaved ---
RUNS=$DIR/runs.tsv
printf 'workload\tvariant\trep\ttps\tqps\tp95_ms\terrors\treconnects\tshutdown\tstatus\tstats\tactivity\n' >"$RUNS"
FAILED=0
run_one() {  # run_one WORKLOAD VARIANT REP
  local w=$1 v=$2 rep=$3 tag envs=()
  tag="${w#oltp_}-${v//[^A-Za-z0-9_.=-]/_}-r$rep"
  local errlog=$DIR/server-$tag.log out=$DIR/sysbench-$tag.log act=$DIR/activity-$tag.txt
  local stats_tmp=$TMPD/stats-$tag.txt stats=$DIR/stats-$tag.txt
  mapfile -t envs < <(variant_envs "$v")
  reset_data || die "could not restore the data directory from $TMPD/pristine"
  log "postgres: [$w rep $rep] $v: start (${envs[*]:-no preload})"
  start_server "$errlog" "$stats_tmp" ${envs[@]+"${envs[@]}"}
  sb_args "$w"
  local sb_rc=0
  if ((WARMUP > 0)); then
    timeout $((WARMUP + 120)) sysbench "${SB_ARGS[@]}" --threads="$THREADS" --time="$WARMUP" run >"$out.warmup" 2>&1 || sb_rc=$?
  fi
  if ((sb_rc == 0)); then
    timeout $((TIME + 120)) sysbench "${SB_ARGS[@]}" --threads="$THREADS" --time="$TIME" --percentile=95 run \
      >"$out" 2>&1 &
    local sbp=$!
    # mid-run: which pid is which kind of process (for the per-process stats)
    sleep "$(( TIME / 2 > 0 ? TIME / 2 : 1 ))"
    psql_q -F $'\t' -c "SELECT pid, backend_type FROM pg_stat_activity ORDER BY pid" >"$act" 2>/dev/null || true
    echo "$SERVER_PID	postmaster" >>"$act"
    wait "$sbp" || sb_rc=$?
  else
    cp "$out.warmup" "$out"
  fi
  stop_server "$errlog"
  local verdict=$VERDICT
  if [[ -f "$stats_tmp" ]]; then mv "$stats_tmp" "$stats"; else : >"$stats"; fi
  # A process that could not open LOCKSWAP_STATS_FILE writes its block to
  # stderr, i.e. the server log (seen with a library that kept a pointer into
  # the environment block, which PostgreSQL's ps-display code overwrites in
  # every child): collect those blocks too.
  local from_log
  from_log=$(grep -c '^lockswap: pid ' "$errlog" || true)
  if ((from_log > 0)); then
    log "postgres: $v: $from_log stats block(s) went to the server log instead of the stats file; collected"
    grep '^lockswap: ' "$errlog" >>"$stats" || true
  fi
  local tps qps p95 errors reconnects status=ok
  tps=$(sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$out")
  qps=$(sed -n 's/.*queries: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$out")
  p95=$(sed -n 's/.*95th percentile: *\([0-9.]*\).*/\1/p' "$out")
  errors=$(sed -n 's/.*ignored errors: *\([0-9]*\).*/\1/p' "$out")
  reconnects=$(sed -n 's/.*reconnects: *\([0-9]*\).*/\1/p' "$out")
  if ((sb_rc != 0)) || [[ -z "$tps" ]]; then
    log "postgres: $v: sysbench failed (status $sb_rc):"; tail -15 "$out" >&2; status=FAIL
  fi
  [[ "${reconnects:-0}" == 0 ]] || status=FAIL
  [[ "$verdict" == clean ]] || status=FAIL
  [[ "$status" == ok ]] || FAILED=1
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$v" "$rep" "${tps:-}" "${qps:-}" "${p95:-}" \
    "${errors:-}" "${reconnects:-}" "$verdict" "$status" "$stats" "$act" >>"$RUNS"
  echo "RESULT bench=postgres workload=$w variant=$v rep=$rep tps=${tps:-0} qps=${qps:-0} p95_ms=${p95:-0}" \
       "errors=${errors:-?} reconnects=${reconnects:-?} shutdown=$verdict status=$status stats=$stats"
  log "postgres: [$w rep $rep] $v: tps=${tps:-?} p95=${p95:-?} ms errors=${errors:-?} shutdown=$verdict"
}

n=${#ALL[@]}
for ((rep = 1; rep <= REPEAT; rep++)); do
  for w in "${WORKLOADS[@]}"; do
    for ((i = 0; i < n; i++)); do
      run_one "$w" "${ALL[$(( (i + rep - 1) % n ))]}" "$rep"
    done
  done
done

# --- tables ---
report "$DIR"
log "postgres: results in $DIR (runs.tsv, results.md, stats-*.txt, server-*.log, sysbench-*.log)"
exit "$FAILED"
