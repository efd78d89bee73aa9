#!/usr/bin/env bash
# examples/servers/jemalloc.sh — jemalloc's own locks through lockswap.
#
# Builds jemalloc_stress.c (no locks of its own) and runs it with
#   LD_PRELOAD="<libjemalloc.so.2> <liblockswap.so>"
# under each variant. jemalloc's pthread mutexes and condition variables then
# resolve to lockswap; the script proves it two ways, without ltrace:
#   1. the dynamic linker's own report (LD_DEBUG=bindings, LD_BIND_NOW=1):
#      libjemalloc.so.2's pthread_mutex_lock & co. bind to liblockswap.so;
#   2. LOCKSWAP_STATS: a native variant counts lock events although the
#      program itself never takes a lock (slow-path events only: a run with
#      no contended acquisition would legitimately count none).
#
#   jemalloc.sh [--dir D] [--threads N] [--ops N] [--repeat N] [--profile] [VARIANT...]
#     default variants: none, then the columns tagged control and bench in
#     preload/config/variant_columns.def (names of the test matrix, see
#     server_lib.sh; `none`: jemalloc without lockswap);
#     threads 16; ops 200000 per thread; 1 round. A round runs every variant
#     once (rotated order), between two core-to-core probes (D/rounds.tsv).
#     Timed runs count lock events only (LOCKSWAP_STATS=counts); --profile
#     adds one run per preloaded variant with LOCKSWAP_STATS=profile (rep=profile).
# RESULT line per run:
#   RESULT bench=jemalloc variant=V rep=R round=N mops=.. seconds=.. lock_events=.. status=ok|FAIL stats=FILE
# plus  RESULT bench=jemalloc-bindings bound=N symbols=... status=..
# and   RESULT bench=jemalloc-control allocator=glibc-malloc lock_events=N ..
# (the same stress without jemalloc: the program alone takes no lock).
# Exit status 0 when every run completed, verified its memory and used jemalloc.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRV_NAME=jemalloc
# shellcheck source=server_lib.sh
source "$HERE/server_lib.sh"   # for srv_variant_envs: the test matrix's variants

DIR=$BUILD_DIR/servers/jemalloc
THREADS=16 OPS=200000 REPEAT=1 PROFILE=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --profile) PROFILE=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
VARIANTS=("$@")
# Default: none, the control column and the columns tagged bench
# (preload/config/variant_columns.def).
((${#VARIANTS[@]})) || mapfile -t VARIANTS < <(echo none; matrix_columns_tagged control; matrix_columns_tagged bench)
srv_need_number --repeat "$REPEAT" 1
require_library
mkdir -p "$DIR"
SRV_DIR=$DIR   # rounds.tsv
rm -f "$DIR/rounds.tsv"

# libjemalloc2's shared object, from the package's own file list.
JEMALLOC=$(dpkg -L libjemalloc2 2>/dev/null | grep -E '/libjemalloc\.so\.2$' | head -1 || true)
[[ -n "$JEMALLOC" && -f "$JEMALLOC" ]] || die "libjemalloc.so.2 not found (apt-get install libjemalloc2)"

BIN=$DIR/jemalloc_stress
if [[ ! -x "$BIN" || "$HERE/jemalloc_stress.c" -nt "$BIN" ]]; then
  log "jemalloc: building $BIN"
  cc -O2 -g -Wall -Wextra -pthread -o "$BIN" "$HERE/jemalloc_stress.c" -ldl
fi

rc=0
# 1. Symbol bindings, from the dynamic linker (a tiny run).
bind_log=$DIR/bindings.log
# (Under the futex variant: the bindings do not depend on the variant.)
timeout 60 env LD_DEBUG=bindings LD_BIND_NOW=1 LD_PRELOAD="$JEMALLOC $LIBLOCKSWAP" \
  LOCKSWAP_MUTEX=futex LOCKSWAP_RWLOCK=futex "$BIN" 2 100 >/dev/null 2>"$bind_log" \
  || { log "jemalloc: binding run failed (see $bind_log)"; rc=1; }
lib_base=$(basename "$LIBLOCKSWAP")
bound=$(grep -E "binding file [^ ]*libjemalloc\.so\.2 .* to [^ ]*/$lib_base " "$bind_log" \
          | sed -n "s/.*symbol \`\([a-z_0-9]*\)'.*/\1/p" | sort -u | tr '\n' ',' | sed 's/,$//')
nbound=$(tr ',' '\n' <<<"$bound" | grep -c . || true)
bind_status=ok
if ! grep -q 'pthread_mutex_lock' <<<"$bound"; then
  log "jemalloc: libjemalloc's pthread_mutex_lock does not bind to $lib_base (see $bind_log)"
  bind_status=FAIL rc=1
fi
echo "RESULT bench=jemalloc-bindings bound=$nbound symbols=${bound:-none} status=$bind_status"

# 1b. Control: the same stress on glibc's malloc (whose locks are internal,
# not interposable) under the rwsem mutex must count no lock event at all:
# so the events of the jemalloc runs below are jemalloc's.
ctl_stats=$DIR/stats-control-glibc-malloc.log
: >"$ctl_stats"
ctl_line=$(timeout 120 env LD_PRELOAD="$LIBLOCKSWAP" LOCKSWAP_MUTEX=rwsem LOCKSWAP_RWLOCK=rwsem \
  LOCKSWAP_STATS_FILE="$ctl_stats" "$BIN" "$THREADS" $((OPS / 10 + 1)) 2>&1 | grep '^jemalloc_stress ' || true)
ctl_events=$(awk '$1 == "lockswap:" && $2 != "pid" && $3 ~ /^[0-9]+$/ {s += $3} END {print s + 0}' "$ctl_stats")
ctl_status=ok
[[ "$ctl_line" == "jemalloc_stress ok "*allocator=glibc-malloc* ]] || ctl_status=FAIL
echo "RESULT bench=jemalloc-control allocator=glibc-malloc variant=rwsem lock_events=$ctl_events status=$ctl_status"

# 2. The stress: rounds of every variant, then (--profile) the profiled runs.
for variant in "${VARIANTS[@]}"; do
  [[ "$variant" == none ]] && continue
  envs_text=$(srv_variant_envs "$variant") || exit 2
  mapfile -t envs <<<"$envs_text"
  env "${envs[@]}" LD_PRELOAD="$LIBLOCKSWAP" /bin/true || die "variant '$variant' rejected by $LIBLOCKSWAP"
done
stress() {  # stress VARIANT REP
  local variant=$1 rep=$2 tag stats='' out run_rc=0 line events status=ok preload=$JEMALLOC
  tag=$(srv_tag "$variant-r$rep")
  out=$DIR/stress-$tag.log
  if [[ "$variant" != none ]]; then stats=$DIR/stats-$tag.log preload="$JEMALLOC $LIBLOCKSWAP"; : >"$stats"; fi
  srv_env_words "$variant" "$preload" "$stats"
  [[ "$variant" != none ]] || SRV_ENV=(LD_PRELOAD="$JEMALLOC")
  log "jemalloc: $variant ($rep): $THREADS threads x $OPS malloc/free"
  timeout 300 env -i PATH="$PATH" "${SRV_ENV[@]}" "$BIN" "$THREADS" "$OPS" >"$out" 2>&1 || run_rc=$?
  line=$(grep '^jemalloc_stress ' "$out" || true)
  events=0
  [[ -z "$stats" ]] || events=$(awk '$1 == "lockswap:" && $2 != "pid" && $3 ~ /^[0-9]+$/ {s += $3} END {print s + 0}' "$stats")
  if ((run_rc != 0)) || [[ "$line" != "jemalloc_stress ok "* ]]; then
    log "jemalloc: $variant: stress failed (status $run_rc):"; tail -5 "$out" >&2; status=FAIL
  elif [[ "$line" != *allocator=jemalloc* ]]; then
    log "jemalloc: $variant: jemalloc was not the allocator: $line"; status=FAIL
  fi
  [[ "$status" == ok ]] || rc=1
  echo "RESULT bench=jemalloc variant=$variant rep=$rep round=${SRV_ROUND:--} mops=$(kv mops_per_s "$line")" \
       "seconds=$(kv seconds "$line") cross_frees=$(kv cross_frees "$line") lock_events=$events status=$status" \
       "stats=${stats:--}"
}
stress_run() { stress "$2" "$3"; }  # KEY VARIANT REP (srv_rounds)
SRV_ALL=("${VARIANTS[@]}") SRV_REPEAT=$REPEAT
srv_rounds stress_run stress
if ((PROFILE)); then
  srv_profile_begin
  for variant in "${VARIANTS[@]}"; do [[ "$variant" == none ]] || stress "$variant" profile; done
  srv_profile_end
fi
exit $rc
