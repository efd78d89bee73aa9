#!/usr/bin/env bash
# examples/servers/memcached.sh — memcached under each variant, loaded by
# memcaslap (Debian's name for libmemcached's memaslap).
#
#   memcached.sh [options]
# options (and the common ones below):
#   --client-threads N  memcaslap -T [4]     --concurrency N  memcaslap -c [32]
#   --server-threads N  memcached -t [4]
# defaults: --variants: the columns tagged bench (preload/config/variant_columns.def), --repeat 6 --time 5
#           --warmup 0 --user lockswap-srv --port 21211 (--threads sets --client-threads)
#
# memcached runs as the unprivileged user, listens on 127.0.0.1 only (TCP, UDP
# off), is stopped by SIGTERM to its PID and must exit with status 0.
# memcaslap's default mix (9 gets : 1 set). The p95 latency is estimated from
# memcaslap's log2 latency histogram of all commands (interpolated inside the
# power-of-two bucket, so coarse); get misses are reported in runs.tsv.
# --check: after the load, a set and a get of a fresh key must round-trip.
set -euo pipefail
SRV_NAME=memcached
SRV_TIME=5 SRV_WARMUP=0 SRV_PORT_BASE=21211
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/server_lib.sh"

CLIENT_THREADS=4 CONC=32 SERVER_THREADS=4
while [[ $# -gt 0 ]]; do
  srv_parse_common "$@" && { shift "$SRV_SHIFT"; continue; }
  case "$1" in
    --client-threads) CLIENT_THREADS=${2:?}; shift 2 ;;
    --concurrency) CONC=${2:?}; shift 2 ;;
    --server-threads) SERVER_THREADS=${2:?}; shift 2 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -z "$SRV_THREADS" ]] || CLIENT_THREADS=$SRV_THREADS
for n in CLIENT_THREADS CONC SERVER_THREADS; do srv_need_number "--${n,,}" "${!n}" 1; done
(( CONC % CLIENT_THREADS == 0 )) || { echo "error: --concurrency must be a multiple of --client-threads" >&2; exit 2; }
for tool in memcached memcaslap; do
  command -v "$tool" >/dev/null || die "$tool not found: run scripts/setup.sh"
done

srv_setup
srv_note "memcached: $(memcached -V), memcaslap -T $CLIENT_THREADS -c $CONC, memcached -t $SERVER_THREADS"
PORT=''

# mc_roundtrip: set a fresh key, get it back (bash's /dev/tcp, no client needed).
mc_roundtrip() {
  local key="lockswap-check-$$-$RANDOM" val="v$RANDOM$RANDOM" reply
  reply=$(timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"
    printf "set %s 0 0 %d\r\n%s\r\nget %s\r\nquit\r\n" "$2" "${#3}" "$3" "$2" >&3; cat <&3' _ "$PORT" "$key" "$val" \
    2>/dev/null | tr -d '\r') || true
  if [[ "$reply" == *STORED*"VALUE $key 0 ${#val}"*"$val"*END* ]]; then echo "roundtrip-ok"
  else log "memcached: set/get round trip failed: ${reply:0:200}"; echo "roundtrip-FAIL"; fi
}

# p95 (us) from the "Total Statistics" log2 histogram: row "K:" holds the
# counts of [2^K, 2^(K+1)), [2^(K+1), ...), four buckets a row.
mc_p95() {
  awk '/^Total Statistics/ {t = 1; next}
       t && /^[[:space:]]*[0-9]+:/ { k = $1 + 0; for (i = 2; i <= NF; i++) { c[k + i - 2] = $i; n += $i; if (k + i - 2 > top) top = k + i - 2 } }
       t && /^[[:space:]]*$/ { if (n) t = 0 }
       END {
         if (!n) exit
         want = 0.95 * n; s = 0
         for (b = 0; b <= top; b++) {
           if (s + c[b] >= want) { f = (want - s) / c[b]; printf "%.0f\n", 2 ^ (b + f); exit }
           s += c[b]
         }
       }' "$1"
}

run_one() {  # run_one LOAD VARIANT REP
  local v=$2 rep=$3 tag label="memcached memcaslap $CLIENT_THREADS thr x $CONC conn" bench=memcached
  tag=$(srv_tag "$v-r$rep")
  local errlog=$SRV_DIR/server-$tag.log out=$SRV_DIR/memcaslap-$tag.log
  srv_env "$v" "$tag"
  PORT=$(free_port "$SRV_PORT_BASE")
  : >"$errlog"
  ((SRV_QUIET)) || log "memcached: ${SRV_PROGRESS:-} $v: start on 127.0.0.1:$PORT"
  if ! srv_start memcached "$errlog" srv_port_ready 30 -- memcached -l 127.0.0.1 -p "$PORT" -U 0 \
       -t "$SERVER_THREADS" -m 128 -c 1024; then
    srv_record bench="$bench" label="$label" variant="$v" rep="$rep" unit=ops/s lat_kind=p95_us \
      shutdown=start-failed status=FAIL stats="$(srv_stats "$tag" "$errlog")"
    return 0
  fi
  local rc=0
  if ((SRV_WARMUP > 0)); then
    timeout $((SRV_WARMUP + 60)) memcaslap -s "127.0.0.1:$PORT" -t "${SRV_WARMUP}s" -T "$CLIENT_THREADS" \
      -c "$CONC" </dev/null >"$out.warmup" 2>&1 || rc=$?
  fi
  if ((rc == 0)); then
    srv_client_bg timeout $((SRV_TIME + 60)) memcaslap -s "127.0.0.1:$PORT" -t "${SRV_TIME}s" \
      -T "$CLIENT_THREADS" -c "$CONC" -S "$((SRV_TIME + 1))s" </dev/null >"$out" 2>&1
    srv_client_wait || rc=$?
  fi
  local check=-
  ((SRV_CHECK)) && check=$(mc_roundtrip)
  srv_stop TERM "$errlog" 30
  local tps misses p95 status=ok stats
  stats=$(srv_stats "$tag" "$errlog")
  tps=$(sed -n 's/^Run time: .* TPS: *\([0-9]*\).*/\1/p' "$out" | tail -1)
  misses=$(sed -n 's/^get_misses: *\([0-9]*\).*/\1/p' "$out" | tail -1)
  p95=$(mc_p95 "$out")
  if ((rc != 0)) || [[ -z "$tps" ]]; then
    log "memcached: $v: memcaslap failed (status $rc):"; tail -15 "$out" >&2; status=FAIL
  fi
  [[ "$SRV_VERDICT" == clean && "$check" != *FAIL* ]] || status=FAIL
  srv_record bench="$bench" label="$label" variant="$v" rep="$rep" value="$tps" unit=ops/s \
    lat="$p95" lat_kind=p95_us shutdown="$SRV_VERDICT" status="$status" stats="$stats" \
    extra="get_misses=${misses:-};check=$check"
}

srv_matrix memcaslap
srv_finish "memcached + memcaslap"
