#!/usr/bin/env bash
# examples/servers/rocksdb.sh — RocksDB's db_bench (Debian's rocksdb-tools)
# under each variant: readrandom and readwhilewriting against one database.
# RocksDB's block cache shards, DB mutex and write queue are pthread mutexes
# and condition variables (std::mutex and friends), so they go through lockswap.
#
#   rocksdb.sh [options]
# options (and the common ones below):
#   --workload W     readrandom | readwhilewriting | both [both]
#   --num N          keys [500000]              --value-size N  [100]
#   --cache-mb N     block cache [128]
# defaults: --variants: the columns tagged bench (preload/config/variant_columns.def), --repeat 6 --time 10
#           --warmup 0 --threads 4 x CPUs (4..64) --user lockswap-srv
#
# How: the database is filled once (fillseq + flush, every key present)
# WITHOUT the preload into a private temporary directory owned by the
# unprivileged user; every run starts from a copy of it and runs db_bench
# --use_existing_db with LD_PRELOAD and the variant's settings. Throughput is
# db_bench's ops/sec (for readwhilewriting: the readers'; one more thread
# writes as fast as it can); p95 is read from its read-latency histogram
# (interpolated inside the bucket). db_bench has no warm-up phase: --warmup S
# runs the same benchmark for S seconds in a separate process first (it warms
# the page cache, not the block cache). --check: every key must be found by
# the readrandom run, and ldb checkconsistency must pass after the run.
set -euo pipefail
SRV_NAME=rocksdb
SRV_TIME=10 SRV_WARMUP=0
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/server_lib.sh"

NUM=500000 VALUE_SIZE=100 CACHE_MB=128 WORKLOAD=both
while [[ $# -gt 0 ]]; do
  srv_parse_common "$@" && { shift "$SRV_SHIFT"; continue; }
  case "$1" in
    --workload) WORKLOAD=${2:?}; shift 2 ;;
    --num) NUM=${2:?}; shift 2 ;;
    --value-size) VALUE_SIZE=${2:?}; shift 2 ;;
    --cache-mb) CACHE_MB=${2:?}; shift 2 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in NUM VALUE_SIZE CACHE_MB; do srv_need_number "--${n,,}" "${!n}" 1; done
if [[ -z "$SRV_THREADS" ]]; then
  SRV_THREADS=$(( $(nproc) * 4 )); ((SRV_THREADS >= 4)) || SRV_THREADS=4; ((SRV_THREADS <= 64)) || SRV_THREADS=64
fi
srv_need_number --threads "$SRV_THREADS" 1
case "$WORKLOAD" in
  readrandom|readwhilewriting) LOADS=("$WORKLOAD") ;;
  both) LOADS=(readrandom readwhilewriting) ;;
  *) echo "error: --workload must be readrandom, readwhilewriting or both" >&2; exit 2 ;;
esac
command -v db_bench >/dev/null || die "db_bench not found: run scripts/setup.sh (Debian package rocksdb-tools)"

srv_setup
srv_note "rocksdb:   $(dpkg-query -W -f='rocksdb-tools ${Version}' rocksdb-tools 2>/dev/null || echo db_bench);" \
     "${LOADS[*]}, $SRV_THREADS threads, $NUM keys x $VALUE_SIZE bytes, block cache ${CACHE_MB}MB"
DB_ARGS=(--db="$SRV_TMP/data" --num="$NUM" --value_size="$VALUE_SIZE" --compression_type=none)

# p95 (us) from the first latency histogram ("Microseconds per read:").
rdb_p95() {
  awk '/^Microseconds per read:/ {h = 1; next}
       h && /^[[(]/ { gsub(/[][(),%]/, " "); lo[n] = $1; hi[n] = $2; cum[n] = $5; n++; next }
       h && n && /^$/ { exit }
       END { prev = 0
             for (i = 0; i < n; i++) {
               if (cum[i] >= 95) { w = cum[i] - prev; f = w > 0 ? (95 - prev) / w : 1
                                   printf "%.2f\n", lo[i] + f * (hi[i] - lo[i]); exit }
               prev = cum[i] } }' "$1"
}

# --- fill once, without the preload ---
SRV_ENV=()
log "rocksdb: fillseq $NUM keys (no preload)"
srv_as timeout 600 db_bench --benchmarks=fillseq,flush "${DB_ARGS[@]}" >"$SRV_DIR/fill.log" 2>&1 ||
  { tail -20 "$SRV_DIR/fill.log" >&2; die "db_bench fillseq failed"; }
srv_data_snapshot

run_one() {  # run_one BENCHMARK VARIANT REP
  local b=$1 v=$2 rep=$3 tag label="RocksDB $1 $SRV_THREADS thr" bench="rocksdb-$1-t$SRV_THREADS"
  tag=$(srv_tag "$b-$v-r$rep")
  local out=$SRV_DIR/db_bench-$tag.log rc=0
  local args=(--benchmarks="$b" --use_existing_db=1 "${DB_ARGS[@]}" --threads="$SRV_THREADS"
              --cache_size=$((CACHE_MB << 20)) --histogram=1 --statistics=0)
  srv_data_reset
  srv_env "$v" "$tag"
  srv_prefix
  if ((SRV_WARMUP > 0)); then
    srv_client_bg timeout $((SRV_WARMUP + 300)) "${SRV_PREFIX[@]}" db_bench "${args[@]}" --duration="$SRV_WARMUP" \
      </dev/null >"$out.warmup" 2>&1
    srv_client_wait || rc=$?
    srv_discard_stats
  fi
  if ((rc == 0)); then
    srv_client_bg timeout $((SRV_TIME + 300)) "${SRV_PREFIX[@]}" db_bench "${args[@]}" --duration="$SRV_TIME" \
      </dev/null >"$out" 2>&1
    srv_client_wait || rc=$?
  else
    cp "$out.warmup" "$out"
  fi
  local line ops found total p95 status=ok stats check=-
  stats=$(srv_stats "$tag" "$out")
  line=$(grep -E "^$b +:" "$out" | tail -1 || true)
  ops=$(sed -n 's/.* \([0-9][0-9.]*\) ops\/sec.*/\1/p' <<<"$line")
  read -r found total < <(sed -n 's/.*(\([0-9]*\) of \([0-9]*\) found).*/\1 \2/p' <<<"$line") || true
  p95=$(rdb_p95 "$out")
  if ((rc != 0)) || [[ -z "$ops" ]]; then
    log "rocksdb: $v: db_bench $b failed (status $rc):"; tail -10 "$out" >&2; status=FAIL
  fi
  if ((SRV_CHECK)); then
    check=ok
    # readrandom over a database holding every key must find each one it looks up.
    if [[ "$b" == readrandom && "${found:-x}" != "${total:-y}" ]]; then
      log "rocksdb: $v: readrandom found $found of $total keys"; check=FAIL
    fi
    if command -v ldb >/dev/null; then
      SRV_ENV=()
      srv_as timeout 120 ldb --db="$SRV_TMP/data" checkconsistency >"$out.check" 2>&1 ||
        { log "rocksdb: $v: ldb checkconsistency failed:"; tail -5 "$out.check" >&2; check=FAIL; }
    fi
  fi
  [[ "$check" != FAIL ]] || status=FAIL
  srv_record bench="$bench" label="$label" variant="$v" rep="$rep" value="$ops" unit=ops/s \
    lat="$p95" lat_kind=p95_us shutdown="$( ((rc == 0)) && echo clean || echo "exit-$rc")" status="$status" \
    stats="$stats" extra="found=${found:-};looked_up=${total:-};check=$check"
}

srv_matrix "${LOADS[@]}"
srv_finish "RocksDB db_bench"
