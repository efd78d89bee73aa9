# examples/servers/attribute_lib.sh — the attribution runs of the server
# runners (--attribute, --attribute-only): where the server waits, measured in
# runs of their own that never enter the comparison (runs.tsv) or its rounds.
# Sourced by a runner after server_lib.sh; uses its db_start, sb_args,
# SRV_DB_STOP and, when the runner defines it, attr_app_run LABEL WORKLOAD
# THREADS: one more run of its own per load with the application's own wait
# accounting (MariaDB: performance_schema), separate from the eBPF run.
# Method and record formats: docs/attribution.md.
#
#   --attribute       after the measured rounds, one attribution run per load
#   --attribute-only  the attribution runs alone (no measured rounds)
#   --attribute-variant V  the attribution runs preload variant V with
#                     LOCKSWAP_STATS=counts (default: none, no preload): the
#                     library's own wait accounting (its dump, in
#                     attribute-LABEL.stats.txt) and the eBPF view of the same
#                     run, so one can check the other (docs/reach.md)
#
# An attribution run starts the server WITHOUT the preload from the prepared
# data, runs `lockswap attribute --pid SERVER` (root, bpftrace; ATTR_ARGS are
# added, e.g. --pg-probes) around SRV_TIME seconds of sysbench, and keeps the
# lockswap-v1 records in $SRV_DIR/attribute-LABEL.txt and the summary in
# attribute-LABEL.summary.txt. Where eBPF cannot be used (lockswap attribute
# exits 77) it says so and goes on. Each run is labelled "attribute" in
# attribute.tsv.
# shellcheck shell=bash

ATTR_MODE=0          # 0: none, 1: --attribute, 2: --attribute-only
ATTR_ARGS=()
ATTR_VARIANT=none    # --attribute-variant
ATTR_SHIFT=1

# attr_parse_common ARGS...: consumes --attribute / --attribute-only
# (returns 1 for anything else).
attr_parse_common() {
  ATTR_SHIFT=1
  case "$1" in
    --attribute) ATTR_MODE=1 ;;
    --attribute-only) ATTR_MODE=2 ;;
    --attribute-variant) ATTR_VARIANT=${2:?--attribute-variant needs a variant}; ATTR_SHIFT=2 ;;
    *) return 1 ;;
  esac
}

# attr_load LABEL WORKLOAD THREADS: the load of an attribution run (sysbench,
# SRV_TIME s), run while the tracer is attached.
attr_load() {
  sb_args "$2"
  timeout $((SRV_TIME + 120)) sysbench "${SB_ARGS[@]}" --threads="$3" --time="$SRV_TIME" --report-interval=0 run \
    >"$SRV_DIR/attribute-$1.sysbench.txt" 2>&1
}

# attr_run LABEL WORKLOAD THREADS: one attribution run.
attr_run() {
  local label=$1 w=$2 t=$3 ready apid rc=0 out summary tps
  out=$SRV_DIR/attribute-$label.txt summary=$SRV_DIR/attribute-$label.summary.txt
  srv_env "$ATTR_VARIANT" "attribute-$label"
  srv_data_reset
  db_start "$SRV_DIR/attribute-$label.log" || die "the server did not start for the attribution run"
  ready=$SRV_DIR/attribute-$label.ready
  rm -f "$ready"
  log "$SRV_NAME: attribution run $label: lockswap attribute --pid $SRV_PID ${ATTR_ARGS[*]} ($w, $t threads, ${SRV_TIME}s)"
  python3 -m lockswap_cli attribute --pid "$SRV_PID" --out "$out" --ready-file "$ready" \
    ${ATTR_ARGS[@]+"${ATTR_ARGS[@]}"} 2>"$summary" &
  apid=$!
  wait_until 180 eval "[[ -f '$ready' ]] || ! kill -0 $apid 2>/dev/null" || true
  if [[ ! -f "$ready" ]]; then
    wait "$apid" || rc=$?
    log "$SRV_NAME: lockswap attribute did not attach (status $rc):"; cat "$summary" >&2
  fi
  attr_load "$label" "$w" "$t" || log "$SRV_NAME: sysbench failed in the attribution run (see attribute-$label.sysbench.txt)"
  if [[ -f "$ready" ]]; then
    kill -INT "$apid" 2>/dev/null || true
    wait "$apid" || rc=$?
    rm -f "$ready"
  fi
  srv_stop "$SRV_DB_STOP" "$SRV_DIR/attribute-$label.log" 90
  [[ "$ATTR_VARIANT" == none ]] || log "$SRV_NAME: attribution run $label under $ATTR_VARIANT: the library's dump in $(srv_stats "attribute-$label" "$SRV_DIR/attribute-$label.log")"
  tps=$(awk '/transactions:/ { gsub(/[(]/, "", $3); print $3 }' "$SRV_DIR/attribute-$label.sysbench.txt")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" attribute "$w" "$t" "${tps:--}" "$rc" "$out" >>"$SRV_DIR/attribute.tsv"
  log "$SRV_NAME: attribution run $label: $(grep -c '^lockswap-v1 ' "$out" 2>/dev/null || echo 0) records in $out (tps ${tps:--}, not a measurement)"
  cat "$summary" >&2
}

# attr_matrix LOAD...: one attribution run per LOAD (WORKLOAD or WORKLOAD:THREADS).
attr_matrix() {
  local load w t
  ((ATTR_MODE)) || return 0
  printf 'label\trun\tworkload\tthreads\ttps\tattribute_status\trecords\n' >"$SRV_DIR/attribute.tsv"
  for load in "$@"; do
    w=${load%%:*} t=$SRV_THREADS
    [[ "$load" != *:* ]] || t=${load#*:}
    attr_run "${w#oltp_}-t$t" "$w" "$t"
    if declare -F attr_app_run >/dev/null; then attr_app_run "${w#oltp_}-t$t" "$w" "$t"; fi
  done
}
