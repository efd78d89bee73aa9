# scripts/lib.sh — helpers shared by scripts/*.sh and examples/servers/*.sh.
# Source it; it defines functions and variables only.
# shellcheck shell=bash

LOCKSWAP_ROOT=${LOCKSWAP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BUILD_DIR=${BUILD_DIR:-$LOCKSWAP_ROOT/build}
# The library under test; override with LIBLOCKSWAP=/path/liblockswap.so.
LIBLOCKSWAP=${LIBLOCKSWAP:-$BUILD_DIR/preload/liblockswap.so}
# Python: the directory holding the lockswap_cli package (statistics, tables,
# doctor) on the import path of every driver and runner under examples/ and
# of the `python3 -m lockswap_cli ...` calls; once, however often sourced.
case ":${PYTHONPATH:-}:" in
  *":$LOCKSWAP_ROOT/tools:"*) ;;
  *) export PYTHONPATH="$LOCKSWAP_ROOT/tools${PYTHONPATH:+:$PYTHONPATH}" ;;
esac

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

require_library() {
  [[ -f "$LIBLOCKSWAP" ]] || die "$LIBLOCKSWAP not found: run scripts/build.sh first"
}

# matrix_columns: "name:K=V,K=V" per line, the columns of the test matrix as
# the library lists them (LOCKSWAP_LIST=columns: `NAME SETTINGS TAGS`); for a
# library without that list, read from preload/config/variant_columns.def, the one
# list they come from.
matrix_columns() {
  matrix_column_lines | cut -d' ' -f1,2 | tr ' ' ':'
}

# matrix_columns_tagged TAG: the names of the columns carrying TAG (the
# .def's tags: bench, microbench, speed, ...), one per line, in .def order.
matrix_columns_tagged() {
  matrix_column_lines | awk -v t="$1" '{ n = split($3, tags, ","); for (i = 1; i <= n; i++) if (tags[i] == t) { print $1; break } }'
}

# matrix_column_lines: `NAME SETTINGS TAGS` per line (TAGS comma-separated,
# `-` for none), from the library or else the .def.
matrix_column_lines() {
  local out='' def=$LOCKSWAP_ROOT/preload/config/variant_columns.def
  [[ -f "$LIBLOCKSWAP" ]] && out=$(env -i PATH=/usr/bin:/bin LD_PRELOAD="$LIBLOCKSWAP" LOCKSWAP_LIST=columns /bin/true 2>&1)
  if grep -qE '^[^ ]+ LOCKSWAP_[A-Z_]+=[^ ]* [^ ]+$' <<<"$out"; then
    printf '%s\n' "$out"
  elif [[ -f "$def" ]]; then
    sed -n 's/^LOCKSWAP_COLUMN("\([^"]*\)", "\([^"]*\)", "[^"]*", "\([^"]*\)").*/\1 \2 \3/p' "$def" | sed 's/ $/ -/'
  fi
}

# port_in_use PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port BASE: the first port >= BASE (bounded search) nobody listens on.
free_port() {
  local p
  for ((p = $1; p < $1 + 200; p++)); do
    if ! port_in_use "$p"; then echo "$p"; return 0; fi
  done
  die "no free TCP port in $1..$(($1 + 199))"
}

# wait_until TIMEOUT_S CMD...: poll CMD every 0.1 s, fail after TIMEOUT_S.
wait_until() {
  local limit=$(( $1 * 10 )) i
  shift
  for ((i = 0; i < limit; i++)); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  return 1
}

# pid_alive PID [COMM]: process exists and is not a zombie (and, if given,
# its name is COMM: never signal a recycled pid).
pid_alive() {
  [[ -n "${1:-}" ]] || return 1
  kill -0 "$1" 2>/dev/null || return 1
  # An exited child not yet reaped is a zombie: count it as gone.
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  state=${state%% *}
  [[ "$state" != Z ]] || return 1
  if [[ -n "${2:-}" ]]; then
    [[ "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]] || return 1
  fi
}

# kill_pid PID COMM [GRACE_S]: TERM, wait up to GRACE_S, then KILL.
kill_pid() {
  local pid=$1 comm=$2 grace=${3:-10}
  pid_alive "$pid" "$comm" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  wait_until "$grace" eval "! pid_alive $pid $comm" && return 0
  kill -KILL "$pid" 2>/dev/null || true
}

# kv KEY LINE: the value of KEY=value in a RESULT line.
kv() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<"$2"; }
