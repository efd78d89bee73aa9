#!/usr/bin/env bash
# examples/servers/wiredtiger.sh — WiredTiger (mongod's storage engine)
# under each variant: YCSB workload A (50% reads, 50% updates, zipfian keys)
# by ycsb_wt.c, a multi-threaded driver written against the WiredTiger C API
# (Debian's libwiredtiger-dev 3.2.1). mongod itself has no package for this
# machine; mongod.sh drives one when a mongod binary is on PATH.
#
#   wiredtiger.sh [options]
# options (and the common ones below):
#   --records N      records [100000]            --value-bytes N  [1000]
#   --cache-mb N     WiredTiger cache [128]      --read-pct N     reads in the mix [50]
#   --wtlock V[,V..] one more variant per LOCKSWAP_WTLOCK value V (off, wt, rwsem,
#                    rwsem-rspin, percid; docs/wtlock.md): glibc's locks with WiredTiger's
#                    own rwlocks swapped, the --variants spec glibc:LOCKSWAP_WTLOCK=V
# defaults: --variants: the columns tagged bench (preload/config/variant_columns.def), --repeat 6 --time 10
#           --warmup 2 --threads 4 x CPUs (4..64) --user lockswap-srv
#
# How: ycsb_wt is built (cc, -lwiredtiger) into build/servers/bin/. The table
# is loaded once WITHOUT the preload into a private temporary directory owned
# by the unprivileged user; every run starts from a copy of it and runs
# ycsb_wt with LD_PRELOAD and the variant's settings. Logging is on (not
# synced at commit, as mongod's journal), checkpoints every 60 s, 4 eviction
# threads. --check: WT_SESSION::verify and a full scan after the run.
set -euo pipefail
SRV_NAME=wiredtiger
SRV_TIME=10 SRV_WARMUP=2
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/server_lib.sh"

RECORDS=100000 VALUE_BYTES=1000 CACHE_MB=128 READ_PCT=50 WTLOCKS=''
while [[ $# -gt 0 ]]; do
  srv_parse_common "$@" && { shift "$SRV_SHIFT"; continue; }
  case "$1" in
    --records) RECORDS=${2:?}; shift 2 ;;
    --value-bytes) VALUE_BYTES=${2:?}; shift 2 ;;
    --cache-mb) CACHE_MB=${2:?}; shift 2 ;;
    --read-pct) READ_PCT=${2:?}; shift 2 ;;
    --wtlock) WTLOCKS=${2:?}; shift 2 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in RECORDS VALUE_BYTES CACHE_MB; do srv_need_number "--${n,,}" "${!n}" 1; done
srv_need_number --read-pct "$READ_PCT" 0
[[ -z "$WTLOCKS" ]] || srv_add_family_values --wtlock LOCKSWAP_WTLOCK "$WTLOCKS"
if [[ -z "$SRV_THREADS" ]]; then
  SRV_THREADS=$(( $(nproc) * 4 )); ((SRV_THREADS >= 4)) || SRV_THREADS=4; ((SRV_THREADS <= 64)) || SRV_THREADS=64
fi
srv_need_number --threads "$SRV_THREADS" 1
[[ -f /usr/include/wiredtiger.h ]] || die "wiredtiger.h not found: run scripts/setup.sh (Debian package libwiredtiger-dev)"

BIN=$BUILD_DIR/servers/bin/ycsb_wt
if [[ ! -x "$BIN" || "$SRV_HERE/ycsb_wt.c" -nt "$BIN" ]]; then
  mkdir -p "$(dirname "$BIN")"
  log "wiredtiger: building $BIN"
  cc -O2 -g -Wall -Wextra -pthread -o "$BIN" "$SRV_HERE/ycsb_wt.c" -lwiredtiger -lm
fi

srv_setup
BIN=$(srv_user_path "$BIN")
WT_VERSION=$(dpkg-query -W -f='${Version}' libwiredtiger0 2>/dev/null || echo '?')
srv_note "wiredtiger: libwiredtiger $WT_VERSION; YCSB-A ($READ_PCT% reads), zipfian 0.99, $SRV_THREADS threads," \
     "$RECORDS records x $VALUE_BYTES bytes, cache ${CACHE_MB}MB"
WT_ARGS=(-h "$SRV_TMP/data" -n "$RECORDS" -v "$VALUE_BYTES")

# --- load once, without the preload ---
SRV_ENV=()
srv_as mkdir "$SRV_TMP/data"
log "wiredtiger: loading $RECORDS records (no preload)"
srv_as "$BIN" "${WT_ARGS[@]}" -l >"$SRV_DIR/load.log" 2>&1 || { cat "$SRV_DIR/load.log" >&2; die "ycsb_wt load failed"; }
srv_data_snapshot

run_one() {  # run_one LOAD VARIANT REP
  local v=$2 rep=$3 tag label="WiredTiger YCSB-A $SRV_THREADS thr" bench="wiredtiger-ycsb_a-t$SRV_THREADS"
  tag=$(srv_tag "$v-r$rep")
  local out=$SRV_DIR/ycsb-$tag.log rc=0 check=()
  ((SRV_CHECK)) && check=(-V)
  srv_data_reset
  srv_env "$v" "$tag"
  srv_prefix
  srv_client_bg timeout $((SRV_TIME + SRV_WARMUP + 300)) "${SRV_PREFIX[@]}" "$BIN" "${WT_ARGS[@]}" \
    -t "$SRV_THREADS" -d "$SRV_TIME" -w "$SRV_WARMUP" -r "$READ_PCT" -c "$CACHE_MB" ${check[@]+"${check[@]}"} \
    </dev/null >"$out" 2>&1
  srv_client_wait || rc=$?
  local line status=ok stats
  stats=$(srv_stats "$tag" "$out")
  line=$(grep '^ycsb_wt ' "$out" | tail -1 || true)
  if ((rc != 0)) || [[ "$line" != "ycsb_wt ok "* ]]; then
    log "wiredtiger: $v: ycsb_wt failed (status $rc):"; tail -10 "$out" >&2; status=FAIL
  fi
  srv_record bench="$bench" label="$label" variant="$v" rep="$rep" value="$(kv ops_per_s "$line")" unit=ops/s \
    lat="$(kv p95_us "$line")" lat_kind=p95_us errors="$(kv errors "$line")" \
    shutdown="$( ((rc == 0)) && echo clean || echo "exit-$rc")" status="$status" stats="$stats" \
    extra="read_p95_us=$(kv read_p95_us "$line");update_p95_us=$(kv update_p95_us "$line");rollbacks=$(kv rollbacks "$line");verify=$(kv verify "$line")"
}

srv_matrix ycsb_a
srv_finish "WiredTiger YCSB workload A"
