#!/usr/bin/env bash
# examples/servers/memcached.sh — memcached under one lockswap variant,
# loaded by memcaslap (Debian's name for libmemcached's memaslap).
#
#   memcached.sh [options] run VARIANT      one run, prints a RESULT line
#   memcached.sh [options] all [VARIANT...] each variant (default: glibc
#                                           futex rwsem rwsem-rspin)
# options:
#   --dir D            logs and statistics [build/servers/memcached]
#   --time S           memcaslap seconds [5]
#   --client-threads N memcaslap -T [4]     --concurrency N memcaslap -c [32]
#   --server-threads N memcached -t [4]     --port P first port to try [21211]
#
# VARIANT: glibc | futex | rwsem | rwsem-rspin | MUTEX/RWLOCK.
# memcached listens on 127.0.0.1 (TCP only, UDP off).
#
# RESULT line: RESULT bench=memcached variant=V tps=.. ops=.. get_misses=..
#              shutdown=clean|unclean status=ok|FAIL stats=FILE
# Exit status 0 when memcaslap completed and memcached exited with status 0
# on SIGTERM.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib.sh
source "$HERE/../../scripts/lib.sh"

DIR=$BUILD_DIR/servers/memcached
TIME=5 CLIENT_THREADS=4 CONC=32 SERVER_THREADS=4 PORT_BASE=21211

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --time) TIME=$2; shift 2 ;;
    --client-threads) CLIENT_THREADS=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --server-threads) SERVER_THREADS=$2; shift 2 ;;
    --port) PORT_BASE=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
CMD=$1; shift
for tool in memcached memcaslap; do
  command -v "$tool" >/dev/null || die "$tool not found: run scripts/setup.sh"
done
(( CONC % CLIENT_THREADS == 0 )) || die "--concurrency must be a multiple of --client-threads"

PIDFILE=$DIR/memcached.pid
SERVER_PID=''
cleanup() {
  if pid_alive "$SERVER_PID" memcached; then
    log "memcached: stopping leftover server $SERVER_PID"
    kill_pid "$SERVER_PID" memcached 10
  fi
  rm -f "$PIDFILE"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

do_run() {
  local variant=$1
  require_library
  check_variant "$variant"
  local tag=${variant//\//_} envs=() user=()
  local log=$DIR/memcached-$tag.log stats=$DIR/stats-$tag.log out=$DIR/memcaslap-$tag.log
  read -r -a envs <<<"$(variant_env "$variant")"
  envs+=("LD_PRELOAD=$LIBLOCKSWAP" "LOCKSWAP_STATS_FILE=$stats")
  : >"$stats"
  [[ $(id -u) -ne 0 ]] || user=(-u root)   # memcached refuses root without -u
  local port
  port=$(free_port "$PORT_BASE")
  log "memcached: $variant: start on 127.0.0.1:$port"
  env "${envs[@]}" memcached "${user[@]+"${user[@]}"}" -l 127.0.0.1 -p "$port" -U 0 \
    -t "$SERVER_THREADS" -m 128 -c 1024 </dev/null >"$log" 2>&1 &
  SERVER_PID=$!
  echo "$SERVER_PID" >"$PIDFILE"
  if ! wait_until 30 port_in_use "$port"; then
    cat "$log" >&2
    die "memcached ($variant) did not listen on 127.0.0.1:$port within 30 s"
  fi
  log "memcached: $variant: memcaslap -T $CLIENT_THREADS -c $CONC -t ${TIME}s"
  local rc=0
  timeout $((TIME + 60)) memcaslap -s "127.0.0.1:$port" -t "${TIME}s" -T "$CLIENT_THREADS" \
    -c "$CONC" </dev/null >"$out" 2>&1 || rc=$?

  # SIGTERM is memcached's clean shutdown; it must exit with status 0.
  local srv_rc=0 shutdown=clean status=ok
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  if ! wait_until 30 eval "! pid_alive $SERVER_PID"; then
    log "memcached: still running 30 s after SIGTERM; killing it"
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  wait "$SERVER_PID" || srv_rc=$?
  SERVER_PID=''
  rm -f "$PIDFILE"
  if ((srv_rc != 0)); then
    log "memcached: exited with status $srv_rc"; shutdown=unclean
  fi

  local tps ops misses
  tps=$(sed -n 's/^Run time: .* TPS: *\([0-9]*\).*/\1/p' "$out" | tail -1)
  ops=$(sed -n 's/^Run time: .* Ops: *\([0-9]*\).*/\1/p' "$out" | tail -1)
  misses=$(sed -n 's/^get_misses: *\([0-9]*\).*/\1/p' "$out" | tail -1)
  if ((rc != 0)) || [[ -z "$tps" ]]; then
    log "memcached: $variant: memcaslap failed (status $rc):"
    tail -15 "$out" >&2
    status=FAIL
  fi
  [[ "$shutdown" == clean ]] || status=FAIL
  echo "RESULT bench=memcached variant=$variant tps=${tps:-0} ops=${ops:-0}" \
       "get_misses=${misses:-?} shutdown=$shutdown status=$status stats=$stats"
  [[ "$status" == ok ]]
}

mkdir -p "$DIR"
case "$CMD" in
  run) [[ $# -eq 1 ]] || die "run takes one VARIANT"; do_run "$1" ;;
  all)
    rc=0
    for v in "${@:-glibc futex rwsem rwsem-rspin}"; do
      for w in $v; do do_run "$w" || rc=1; done
    done
    exit $rc ;;
  *) die "unknown command $CMD (see --help)" ;;
esac
