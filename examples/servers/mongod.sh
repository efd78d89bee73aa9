#!/usr/bin/env bash
# examples/servers/mongod.sh — mongod under each variant, driven by a
# YCSB-style workload A client (mongo_ycsb.py: 50% reads, 50% one-field
# updates, scrambled zipfian keys). Runs only when a `mongod` binary is on
# PATH and python3 has pymongo (Debian: python3-pymongo); otherwise it says
# why and exits 0 (mongod has no Debian package; wiredtiger.sh drives its
# storage engine directly).
#
#   mongod.sh [options]
# options (and the common ones below):
#   --records N      documents of 10 x 100-byte fields [100000]
# defaults: --variants: the columns tagged bench (preload/config/variant_columns.def), --repeat 6 --time 10
#           --warmup 2 --threads 8 --user lockswap-srv --port 27117
#
# How: mongod runs as the unprivileged user on 127.0.0.1 with its dbpath and
# socket in a private temporary directory (WiredTiger cache 0.25 GB); the
# collection is loaded once WITHOUT the preload, every run starts from a copy
# of the stopped dbpath with LD_PRELOAD and the variant's settings; SIGTERM to
# the PID is mongod's clean shutdown and must end with exit status 0.
set -euo pipefail
SRV_NAME=mongod
SRV_TIME=10 SRV_WARMUP=2 SRV_THREADS=8 SRV_PORT_BASE=27117
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/server_lib.sh"

RECORDS=100000
while [[ $# -gt 0 ]]; do
  srv_parse_common "$@" && { shift "$SRV_SHIFT"; continue; }
  case "$1" in
    --records) RECORDS=${2:?}; shift 2 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
srv_need_number --records "$RECORDS" 1
srv_need_number --threads "$SRV_THREADS" 1
if ! command -v mongod >/dev/null; then
  log "mongod: skipped: no mongod binary on PATH (no Debian package; examples/servers/wiredtiger.sh drives WiredTiger directly)"
  echo "SKIP bench=mongod reason=no-mongod-on-PATH"
  exit 0
fi
if ! python3 -c 'import pymongo' 2>/dev/null; then
  log "mongod: skipped: python3 has no pymongo (apt-get install python3-pymongo)"
  echo "SKIP bench=mongod reason=no-pymongo"
  exit 0
fi

srv_setup
srv_note "mongod:    $(mongod --version 2>/dev/null | head -1); YCSB-A, $SRV_THREADS threads, $RECORDS documents"
PORT=''
srv_log_ok() { ! grep -q '"s":"F"' "$1" || { log "mongod: fatal messages in $1"; return 1; }; }
mongo_start() {  # mongo_start LOG
  PORT=$(free_port "$SRV_PORT_BASE")
  : >"$1"
  srv_start mongod "$1" srv_port_ready 120 -- mongod --dbpath "$SRV_TMP/data" --bind_ip 127.0.0.1 --port "$PORT" \
    --wiredTigerCacheSizeGB 0.25 --nounixsocket
}

SRV_ENV=()
srv_as mkdir "$SRV_TMP/data"
mongo_start "$SRV_DIR/prepare.log" || die "mongod did not start for the load"
log "mongod: loading $RECORDS documents (no preload)"
timeout 900 python3 "$SRV_HERE/mongo_ycsb.py" load --port "$PORT" --records "$RECORDS" >"$SRV_DIR/load.log" 2>&1 ||
  { tail -20 "$SRV_DIR/load.log" >&2; die "load failed"; }
srv_stop TERM "$SRV_DIR/prepare.log" 120
[[ "$SRV_VERDICT" == clean ]] || die "mongod did not shut down cleanly after the load ($SRV_VERDICT)"
srv_data_snapshot

run_one() {  # run_one LOAD VARIANT REP
  local v=$2 rep=$3 tag label="mongod YCSB-A $SRV_THREADS thr" bench="mongod-ycsb_a-t$SRV_THREADS"
  tag=$(srv_tag "$v-r$rep")
  local errlog=$SRV_DIR/server-$tag.log out=$SRV_DIR/ycsb-$tag.log rc=0
  srv_data_reset
  srv_env "$v" "$tag"
  if ! mongo_start "$errlog"; then
    srv_record bench="$bench" label="$label" variant="$v" rep="$rep" unit=ops/s lat_kind=p95_us \
      shutdown=start-failed status=FAIL stats="$(srv_stats "$tag" "$errlog")"
    return 0
  fi
  srv_client_bg timeout $((SRV_TIME + SRV_WARMUP + 120)) python3 "$SRV_HERE/mongo_ycsb.py" run --port "$PORT" \
    --records "$RECORDS" --threads "$SRV_THREADS" --time "$SRV_TIME" --warmup "$SRV_WARMUP" >"$out" 2>&1
  srv_client_wait || rc=$?
  srv_stop TERM "$errlog" 120
  local line status=ok stats
  stats=$(srv_stats "$tag" "$errlog")
  line=$(grep '^mongo_ycsb ' "$out" | tail -1 || true)
  if ((rc != 0)) || [[ "$line" != "mongo_ycsb ok "* ]]; then
    log "mongod: $v: client failed (status $rc):"; tail -10 "$out" >&2; status=FAIL
  fi
  [[ "$SRV_VERDICT" == clean ]] || status=FAIL
  srv_record bench="$bench" label="$label" variant="$v" rep="$rep" value="$(kv ops_per_s "$line")" unit=ops/s \
    lat="$(kv p95_us "$line")" lat_kind=p95_us errors="$(kv errors "$line")" shutdown="$SRV_VERDICT" \
    status="$status" stats="$stats"
}

srv_matrix ycsb_a
srv_finish "mongod + YCSB workload A"
