#!/usr/bin/env bash
# examples/bench/oversub.sh — the oversubscription tables: the rwsem variant
# under each owner-on-CPU source (LOCKSWAP_ONCPU=off, rseq, bpf) beside
# glibc, against `none` (no LD_PRELOAD), in one run. Method (docs/measuring.md):
# interleaved rounds in rotated order, each guarded by lockswap-probe c2c
# (unsteady rounds dropped, the tables say how many were kept), every ratio
# with its sign-test 95% interval and verdict; no LOCKSWAP_STATS in timed runs.
#
#   examples/bench/oversub.sh [--repeat N] [--parts "sysbench memcached matrix"]
#                             [--oncpu "off rseq bpf"] [--threads "2 16 64"]
#                             [--quick] [--build DIR]
#
#   sysbench   `sysbench mutex` (one mutex, 16M lock pairs in all, 2M with
#              --quick) at each of --threads (sysbench_mutex.py);
#   memcached  memcached under memaslap (scripts/demo.sh, examples/servers/
#              memcached.sh: its runs carry LOCKSWAP_STATS_FILE, i.e. the
#              counts statistics mode, and it has no none row);
#   matrix     examples/bench/run_matrix.py: rwlock 50% and 90% reads x
#              threads 2..64 x CS 1/20/100, and the mutex matrix, with the
#              geometric mean of the ratios and the 64-thread fairness.
#
# --repeat N: steady rounds to keep per cell (default 6, the fewest for a 95%
# interval; --quick 2, too few for verdicts).
# bpf needs root (CAP_BPF, CAP_PERFMON), kernel BTF and bpffs: the script
# starts `lockswap-oncpu` if it is not running (and stops it at the end) and
# re-runs itself under `lockswap-oncpu exec`, so every benchmark process
# inherits the map. Where that is impossible, the bpf column is left out with
# the reason printed. Nothing here is a pass/fail on time: the exit status is
# 1 only when a run failed or a lock broke.
# Output: BUILD/oversub/<date-time>/ (BUILD/oversub/latest): summary.txt (all
# tables), demo/ (sysbench, memcached: table.txt, logs, statistics per run),
# matrix/ (run_matrix.py's results.md, results.csv, raw.csv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../../scripts/lib.sh
source "$ROOT/scripts/lib.sh"

REPEAT='' PARTS="sysbench memcached matrix" ONCPU="off rseq bpf" THREADS="2 16 64" QUICK=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repeat) REPEAT=${2:?}; shift 2 ;;
    --parts) PARTS=${2:?}; shift 2 ;;
    --oncpu) ONCPU=${2:?}; shift 2 ;;
    --threads) THREADS=${2:?}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --build) BUILD_DIR=${2:?}; LIBLOCKSWAP=$BUILD_DIR/preload/liblockswap.so; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -z "$REPEAT" ]] && { REPEAT=6; ((QUICK)) && REPEAT=2; }
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "--repeat must be a number >= 1 (got '$REPEAT')"
for p in $PARTS; do [[ " sysbench memcached matrix " == *" $p "* ]] || die "--parts: unknown part '$p' (sysbench memcached matrix)"; done
for o in $ONCPU; do [[ " off rseq bpf " == *" $o "* ]] || die "--oncpu: unknown source '$o' (off rseq bpf)"; done
require_library
export BUILD_DIR LIBLOCKSWAP
LOADER=$BUILD_DIR/bin/lockswap-oncpu
wants() { [[ " $PARTS " == *" $1 "* ]]; }

# --- the bpf column: a live map inherited by everything below -------------
if [[ " $ONCPU " == *" bpf "* && -z "${LOCKSWAP_ONCPU_FD:-}" ]]; then
  why=''
  if [[ $(id -u) -ne 0 ]]; then why="not root"
  elif [[ ! -x "$LOADER" ]]; then why="$LOADER not built (needs libbpf-dev, clang, bpftool)"
  elif ! "$LOADER" status >/dev/null 2>&1; then
    if out=$("$LOADER" start 2>&1); then
      export LOCKSWAP_OVERSUB_STARTED_LOADER=1
    else why="the loader could not start: $out"; fi
  fi
  if [[ -z "$why" ]]; then
    rc=0
    "$LOADER" exec -- bash "$0" --repeat "$REPEAT" --parts "$PARTS" --oncpu "$ONCPU" --threads "$THREADS" \
      $( ((QUICK)) && echo --quick) --build "$BUILD_DIR" || rc=$?
    [[ -z "${LOCKSWAP_OVERSUB_STARTED_LOADER:-}" ]] || "$LOADER" stop >/dev/null || true
    exit "$rc"
  fi
  log "oversub: no bpf column: $why"
  ONCPU=${ONCPU//bpf/}
fi

OUT=$BUILD_DIR/oversub/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
ln -sfn "$(basename "$OUT")" "$BUILD_DIR/oversub/latest"
SUMMARY=$OUT/summary.txt
{
  echo "lockswap oversubscription tables — $(date -Is)"
  echo "host: $(uname -sr), $(nproc) CPUs; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BUILD_DIR/bin/lockswap-probe" summary 2>/dev/null || echo "env: unknown (lockswap-probe not built)"
  echo "rwsem under LOCKSWAP_ONCPU = ${ONCPU}; reference none (no LD_PRELOAD), glibc its own row;"
  echo "$REPEAT steady interleaved rounds per cell, guarded by lockswap-probe c2c"
  echo
} | tee "$SUMMARY"

SPECS=() DEFS=() NAMES=()
for o in $ONCPU; do
  SPECS+=("rwsem:LOCKSWAP_ONCPU=$o")
  DEFS+=(--define "oncpu-$o=rwsem:LOCKSWAP_ONCPU=$o")
  NAMES+=("oncpu-$o")
done
status=0

if wants sysbench; then
  total=16000000
  ((QUICK)) && total=2000000
  variants=$(IFS=,; echo "none,glibc,${NAMES[*]}")
  python3 "$ROOT/examples/bench/sysbench_mutex.py" --build "$BUILD_DIR" --threads "${THREADS// /,}" \
    --variants "$variants" "${DEFS[@]}" --total "$total" --repeat "$REPEAT" --json "$OUT/sysbench.json" \
    >"$OUT/sysbench.txt" 2>"$OUT/sysbench.err" || status=1
  { echo "== sysbench mutex (examples/bench/sysbench_mutex.py, variants $variants)"; cat "$OUT/sysbench.txt"; echo; } |
    tee -a "$SUMMARY"
fi

if wants memcached; then
  demo_args=(--no-setup --only memcached --variants "${SPECS[*]}" --repeat "$REPEAT")
  ((QUICK)) && demo_args+=(--quick)
  bash "$ROOT/scripts/demo.sh" "${demo_args[@]}" >"$OUT/demo.out" 2>"$OUT/demo.err" || status=1
  rm -rf "$OUT/demo"
  cp -r "$(readlink -f "$BUILD_DIR/demo/latest")" "$OUT/demo"
  { echo "== memcached (scripts/demo.sh ${demo_args[*]}; counts statistics on, no none row)"
    cat "$OUT/demo/table.txt"; echo; } | tee -a "$SUMMARY"
fi

if wants matrix; then
  threads=2,4,8,16,32,64 mx=()
  ((QUICK)) && mx=(--quick)
  variants=$(IFS=,; echo "none,glibc,${NAMES[*]}")
  python3 "$ROOT/examples/bench/run_matrix.py" --build "$BUILD_DIR" --out "$OUT/matrix" --no-plot \
    --threads "$threads" --reads 50,90 --loads 1,20,100 --repeat "$REPEAT" \
    --variants "$variants" --mutex-variants "$variants" "${DEFS[@]}" ${mx[@]+"${mx[@]}"} \
    >"$OUT/matrix.out" 2>"$OUT/matrix.err" || status=1
  { echo "== rwlock and mutex matrix (examples/bench/run_matrix.py, variants $variants)"; cat "$OUT/matrix/results.md"; } |
    tee -a "$SUMMARY"
fi
echo "summary: $SUMMARY" >&2
exit "$status"
