#!/usr/bin/env bash
# examples/bench/fastpath_callgrind.sh — instructions per idle (uncontended)
# lock+unlock pair, counted by valgrind --tool=callgrind (repeatable counts,
# not times), for pthread_mutex, rdlock/unlock, wrlock/unlock and
# sem_wait/sem_post (--ops ...,sem), under raw
# glibc, the glibc-forwarding control and each lockswap variant.
#
# Method: fastpath MODE K runs one warm-up pair, then K pairs inside
# lockswap_fastpath_loop(); callgrind collects only inside that function
# (--toggle-collect). Two runs, K1 and K2 pairs: (Ir(K2) - Ir(K1)) / (K2 - K1)
# is the cost of one pair including the minimal loop (~3 instructions: see
# the `empty` row) and the two calls through the PLT. glibc 2.36 for
# reference: ~64 (mutex), ~70 (rdlock), ~86 (wrlock) per pair.
#
# Variants:
#   none            no LD_PRELOAD: glibc 2.36 itself (the reference for ratios)
#   glibc           LD_PRELOAD=liblockswap.so, LOCKSWAP_*=glibc (the forwarding control)
#   futex, rwsem, rwsem-rspin, rwsem+dropbias   (rwsem-rspin has no mutex: n/a)
#   percid, percid+percpu, percid+global, percid+thread (rwlock only; percid
#                   alone uses the default LOCKSWAP_CID, rseq)
#   lockref         (rwlock and sem)
#   any of these with "+counts" appended: the same with LOCKSWAP_STATS=counts
#                   (lock event counters only: what a measured run may carry);
#                   "+profile": LOCKSWAP_STATS=profile (the per-lock/per-site
#                   profiler: never on in a timed run); "+stats": LOCKSWAP_STATS=1
#                   (= counts). docs/measuring.md keeps the table of these costs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/build"
lib="" bin="" out=""
# Default: none, the control column and the columns tagged microbench in
# preload/config/variant_columns.def (as run_matrix.py's rwlock default).
variants=$(LOCKSWAP_ROOT="$root" bash -c 'source "$LOCKSWAP_ROOT/scripts/lib.sh" &&
  { echo none; matrix_columns_tagged control; matrix_columns_tagged microbench; }' | paste -sd, -)
ops="mutex,rdlock,wrlock"
k1=1000
k2=11000

usage() {
  cat <<EOF
usage: $0 [--build DIR] [--lib PATH] [--bin PATH] [--variants LIST] [--ops LIST]
          [--k1 N] [--k2 N] [--out DIR]
  --build DIR     build tree (default $root/build); sets the two defaults below
  --lib PATH      liblockswap.so (default BUILD/preload/liblockswap.so)
  --bin PATH      the fastpath program (default BUILD/examples/bench/fastpath)
  --variants L    comma list (default $variants; also rwsem+dropbias, percid[+CID])
  --ops L         comma list of mutex,rdlock,wrlock,sem (default mutex,rdlock,wrlock)
  --k1/--k2 N     pairs in the two runs (default $k1 / $k2)
  --out DIR       also write fastpath.csv and fastpath.md there (default BUILD/bench-results)
EOF
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --lib) lib="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --variants) variants="$2"; shift 2 ;;
    --ops) ops="$2"; shift 2 ;;
    --k1) k1="$2"; shift 2 ;;
    --k2) k2="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "fastpath_callgrind.sh: unknown option $1" >&2; usage ;;
  esac
done
lib="${lib:-$build/preload/liblockswap.so}"
bin="${bin:-$build/examples/bench/fastpath}"
out="${out:-$build/bench-results}"
lib="$(realpath "$lib")"

command -v valgrind >/dev/null || { echo "fastpath_callgrind.sh: valgrind not found" >&2; exit 1; }
[[ -x "$bin" ]] || { echo "fastpath_callgrind.sh: $bin not built (cmake --build BUILD --target fastpath)" >&2; exit 1; }
[[ -f "$lib" ]] || { echo "fastpath_callgrind.sh: $lib not built (cmake --build BUILD --target lockswap)" >&2; exit 1; }
(( k2 > k1 )) || { echo "fastpath_callgrind.sh: --k2 must exceed --k1" >&2; exit 2; }
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# variant_env VARIANT OP -> env assignments on stdout; exit 1 when n/a.
variant_env() {
  local v="$1" op="$2" var stats=""
  case "$v" in
    none+*) return 1 ;;
    *+stats) v="${v%+stats}" stats=" LOCKSWAP_STATS=1" ;;
    *+counts) v="${v%+counts}" stats=" LOCKSWAP_STATS=counts" ;;
    *+profile) v="${v%+profile}" stats=" LOCKSWAP_STATS=profile" ;;
  esac
  variant_env_plain "$v" "$op" | sed "s/\$/$stats/" | grep . || return 1
}

variant_env_plain() {
  local v="$1" op="$2" var
  case "$op" in
    mutex) var=LOCKSWAP_MUTEX ;;
    sem) var=LOCKSWAP_SEM
         case "$v" in none|glibc|futex|lockref) ;; *) return 1 ;; esac ;;
    *) var=LOCKSWAP_RWLOCK
       [[ "$v" == lockref || "$v" == percid* || "$v" == rwsem* || "$v" == none || "$v" == glibc || "$v" == futex ]] || return 1 ;;
  esac
  [[ "$op" == mutex && "$v" == lockref ]] && return 1
  case "$v" in
    none) echo "LD_PRELOAD=" ;;
    rwsem+dropbias) echo "LD_PRELOAD=$lib $var=rwsem LOCKSWAP_RWSEM_DROP_BIAS=1" ;;
    rwsem-rspin) [[ "$op" == mutex ]] && return 1; echo "LD_PRELOAD=$lib $var=rwsem-rspin" ;;
    percid | percid+*)  # percid+ALLOCATOR sets LOCKSWAP_CID
      [[ "$op" == mutex ]] && return 1
      local cid=${v#percid}
      echo "LD_PRELOAD=$lib $var=percid${cid:+ LOCKSWAP_CID=${cid#+}}" ;;
    *) echo "LD_PRELOAD=$lib $var=$v" ;;
  esac
}

# ir ENV... -- MODE K -> instructions collected inside lockswap_fastpath_loop
ir() {
  local envs=() mode k f
  while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
  shift
  mode="$1" k="$2"
  f="$tmp/cg.$mode.$k.$RANDOM"
  if ! env -u LD_PRELOAD "${envs[@]}" valgrind --tool=callgrind --toggle-collect=lockswap_fastpath_loop \
        --callgrind-out-file="$f" "$bin" "$mode" "$k" >"$tmp/vg.out" 2>&1; then
    echo "fastpath_callgrind.sh: run failed: ${envs[*]} $mode $k" >&2
    sed -n '1,12p' "$tmp/vg.out" | grep -v '^==' >&2 || true
    return 1
  fi
  awk '/^totals:/ {print $2; found=1} END {if (!found) exit 1}' "$f"
}

per_pair() {  # ENV... -- MODE -> instructions per pair (two decimals)
  local a b
  a="$(ir "$@" "$k1")" || return 1
  b="$(ir "$@" "$k2")" || return 1
  awk -v a="$a" -v b="$b" -v k1="$k1" -v k2="$k2" 'BEGIN {printf "%.2f", (b - a) / (k2 - k1)}'
}

IFS=, read -r -a vlist <<<"$variants"
IFS=, read -r -a olist <<<"$ops"
declare -A res

loop_cost="$(per_pair LD_PRELOAD= -- empty)"
echo "fastpath_callgrind: $(valgrind --version), K1=$k1 K2=$k2, lib=$lib" >&2
for op in "${olist[@]}"; do
  for v in "${vlist[@]}"; do
    if venv="$(variant_env "$v" "$op")"; then
      # shellcheck disable=SC2086
      res["$op,$v"]="$(per_pair $venv -- "$op")" || res["$op,$v"]="fail"
    else
      res["$op,$v"]="n/a"
    fi
    echo "  $op $v: ${res[$op,$v]}" >&2
  done
done

ratio() {  # value reference -> ratio or -
  awk -v x="$1" -v r="$2" 'BEGIN { if (x ~ /^[0-9.]+$/ && r ~ /^[0-9.]+$/ && r > 0) printf "%.2f", x / r; else printf "-" }'
}

csv="$out/fastpath.csv" md="$out/fastpath.md"
echo "op,variant,instr_per_pair,ratio_vs_none,ratio_vs_glibc" >"$csv"
{
  echo "Instructions per idle lock+unlock pair (callgrind Ir, includes the loop: empty loop = $loop_cost/iteration, and the PLT calls)"
  echo
  printf '| %-14s |' variant
  for op in "${olist[@]}"; do printf ' %-7s | x none | x glibc |' "$op"; done
  echo
  printf '|%s|' "----------------"
  for op in "${olist[@]}"; do printf '%s|%s|%s|' "--------:" "-------:" "--------:"; done
  echo
  for v in "${vlist[@]}"; do
    printf '| %-14s |' "$v"
    for op in "${olist[@]}"; do
      x="${res[$op,$v]}"
      rn="$(ratio "$x" "${res[$op,none]:-}")"
      rg="$(ratio "$x" "${res[$op,glibc]:-}")"
      printf ' %7s | %6s | %7s |' "$x" "$rn" "$rg"
      echo "$op,$v,$x,$rn,$rg" >>"$csv"
    done
    echo
  done
  echo
  echo "none = no LD_PRELOAD (glibc 2.36 itself; reference ~64 mutex, ~70 rdlock, ~86 wrlock);"
  echo "glibc = LD_PRELOAD=liblockswap.so forwarding to glibc (the control of the throughput matrix)."
} | tee "$md"
echo "wrote $csv $md" >&2
