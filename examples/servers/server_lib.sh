# examples/servers/server_lib.sh — what every runner in examples/servers/
# shares: the common options, variants, an unprivileged user and a private
# temporary directory, start / ready / stop by PID, clean-up on any exit,
# rounds of interleaved variants guarded by the core-to-core probe, the
# results file and the comparison table.
# A runner sets SRV_NAME and its defaults, sources this file, parses its
# arguments with srv_parse_common, calls srv_setup, then srv_matrix.
# Defines functions and variables only.
# shellcheck shell=bash
#
# COMMON OPTIONS (every runner)
#   --variants LIST  comma or space list; `none` (no preload at all: the
#                    reference of the ratios) and glibc (the preload with
#                    glibc's locks) always run.
#                    A variant is a column of the test matrix (`lockswap --list`,
#                    preload/config/variant_columns.def, with that column's LOCKSWAP_*
#                    settings; default: its columns tagged bench), a MUTEX/RWLOCK pair
#                    (glibc/rwsem), or settings alone (LOCKSWAP_SEM=lockref:LOCKSWAP_CID=1);
#                    NAME:K=V:... adds settings to a name.
#   --select LABEL=RULES  one more variant, LABEL: glibc's locks but for those
#                    RULES name (LOCKSWAP_SELECT=RULES, docs/select.md), e.g.
#                    --select 'tc-rwsem=mutex=rwsem@site:mariadbd+0x9fd828';
#                    repeatable. LABEL: letters, digits, _ . - (no other variant's
#                    name); the header (results.md) gives each LABEL's rules.
#   --repeat N       steady rounds; each runs every variant once, the order
#                    rotated (6 give a verdict at 95%); a round the core-to-core
#                    probe drops is run again, up to 2N rounds in all. When
#                    fewer than N (and fewer than a verdict needs) are steady,
#                    the table's figures are over every completed round, the
#                    verdict `host unsteady (k of n rounds steady)`
#   --strict-steady  figures from steady rounds only (a row may be blank)
#   --time S         measured seconds per run     --warmup S   warm-up seconds
#   --threads N      client threads
#   --env K=V        a LOCKSWAP_* setting for every preloaded run (repeatable;
#                    LOCKSWAP_STATS is the runner's: counts when measured)
#   --profile        after the rounds, one more run per variant with the
#                    per-lock profiler (LOCKSWAP_STATS=profile), in profile.tsv
#                    and its stats-*-rprofile.txt: never in the comparison
#   --check          check the data after each load (CHECK TABLE, amcheck, ...)
#   --dir D          results directory [build/servers/<runner>/<date-time>]
#   --port P         first TCP port to try on 127.0.0.1
#   --user U         unprivileged user the server runs as when started by root
#                    [lockswap-srv, a system account created when missing]
#   --keep           keep the temporary data directory
#   --no-plot        no PNG                     --quiet   no per-run progress
#   --report D       print the tables of an earlier run (D/runs.tsv); run nothing
# OUTPUT: progress on stderr; a RESULT line per run and the comparison table
# on stdout; in --dir: runs.tsv (every measured run), rounds.tsv (each
# round's probes), profile.tsv (--profile), results.md, results.csv,
# results.png (a forest plot), results.html (header, plot and table on one
# page), audit.json (lockswap doctor's record: the host before and after, the
# exact command, lockswap's version, commit and settings), the server and
# client logs, stats-*.txt (LOCKSWAP_STATS_FILE).
# Measured runs are profiler-free: LOCKSWAP_STATS=counts (event counters).
# Their wait records give the table a reach column (report.py: the share of
# the lock waiting each variant swaps; a warning under the table below 50%;
# docs/reach.md).
# EXIT STATUS: 0 when every run completed (load finished without errors,
# checks clean, clean shutdown), 1 otherwise, 2 for bad arguments.

SRV_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib.sh
source "$SRV_HERE/../../scripts/lib.sh"

: "${SRV_NAME:?set SRV_NAME before sourcing server_lib.sh}"
# The default variants: the columns tagged `bench` in preload/config/variant_columns.def
# (futex,rwsem,rwsem-rspin,lockref when this was written).
if [[ -z "${SRV_VARIANTS:-}" ]]; then
  SRV_VARIANTS=$(matrix_columns_tagged bench | paste -sd, -)
  [[ -n "$SRV_VARIANTS" ]] || die "no column tagged bench in preload/config/variant_columns.def"
fi
SRV_REPEAT=${SRV_REPEAT:-6} SRV_TIME=${SRV_TIME:-10} SRV_WARMUP=${SRV_WARMUP:-2}
SRV_THREADS=${SRV_THREADS:-} SRV_PORT_BASE=${SRV_PORT_BASE:-20000}
# The server's own account: `nobody` is shared with other daemons, and a
# package's account (mysql, postgres) with that package's real server.
SRV_DEFAULT_USER=lockswap-srv SRV_USER=${SRV_USER:-lockswap-srv}
SRV_DIR='' SRV_KEEP=0 SRV_CHECK=0 SRV_PLOT=1 SRV_QUIET=0 SRV_EXTRA_ENV=()
# --select: LABEL=RULES, in the order given (a variant each, after --variants).
SRV_SELECTS=()
# The runner's command line as given (this file is sourced before the runner
# parses its arguments): the audit record's command.
SRV_ARGV=("$0" "$@")
# The report and the doctor run under Debian's python3 first, where setup.sh
# installs matplotlib (as the lockswap command does).
SRV_PYTHON=/usr/bin/python3
[[ -x $SRV_PYTHON ]] || SRV_PYTHON=python3
SRV_STRICT=0
SRV_PID='' SRV_COMM='' SRV_CLIENT_PID='' SRV_BASE='' SRV_TMP='' SRV_AS=() SRV_ENV=() SRV_STATS_TMP=''
# A statistics file the server wrote is read back up to this size.
SRV_STATS_MAX_BYTES=$((64 << 20))
SRV_STOP_SIGNAL=TERM SRV_VERDICT='' SRV_FAILED=0 SRV_ALL=()
# Measured runs count lock events only; --profile adds separate runs.
SRV_PROFILE=0 SRV_STATS_MODE=counts SRV_TSV=runs.tsv SRV_ROUND='' SRV_ROUND_C2C='' SRV_ROUNDS=0
# The environment probe (lockswap-probe c2c / summary), when built.
SRV_PROBE=${SRV_PROBE:-$BUILD_DIR/bin/lockswap-probe}

# srv_usage: the runner's header comment, then the common options above.
srv_usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  echo
  sed -n '/^# COMMON OPTIONS/,/^$/p' "$SRV_HERE/server_lib.sh" | sed '$d; s/^# \{0,1\}//'
}

# srv_parse_common ARGS...: consumes one common option; sets SRV_SHIFT to the
# number of words used. Returns 1 when $1 is not a common option.
srv_parse_common() {
  SRV_SHIFT=1
  local need2=(--variants --select --repeat --time --warmup --threads --env --dir --port --user --report)
  if [[ " ${need2[*]} " == *" $1 "* ]]; then
    [[ $# -ge 2 ]] || { echo "error: $1 needs a value" >&2; exit 2; }
    SRV_SHIFT=2
  fi
  case "$1" in
    --variants) SRV_VARIANTS=$2 ;;
    --select) srv_add_select "$2" ;;
    --repeat) SRV_REPEAT=$2 ;;
    --time) SRV_TIME=$2 ;;
    --warmup) SRV_WARMUP=$2 ;;
    --threads) SRV_THREADS=$2 ;;
    --env) [[ "$2" == LOCKSWAP_*=* ]] || { echo "error: --env $2: expected LOCKSWAP_NAME=VALUE" >&2; exit 2; }
           SRV_EXTRA_ENV+=("$2") ;;
    --check) SRV_CHECK=1 ;;
    --dir) SRV_DIR=$2 ;;
    --port) SRV_PORT_BASE=$2 ;;
    --user) SRV_USER=$2 ;;
    --keep) SRV_KEEP=1 ;;
    --profile) SRV_PROFILE=1 ;;
    --no-plot) SRV_PLOT=0 ;;
    --strict-steady) SRV_STRICT=1 ;;
    --quiet) SRV_QUIET=1 ;;
    --report) [[ -f "$2/runs.tsv" ]] || { echo "error: --report $2: no runs.tsv there" >&2; exit 2; }
              [[ " $* " == *" --repeat "* || ! -f "$2/header.txt" ]] ||  # the rounds that run asked for
                SRV_REPEAT=$(sed -n 's/^runs: *rounds \([0-9]*\),.*/\1/p' "$2/header.txt" | grep . || echo "$SRV_REPEAT")
              SRV_DIR=$2; [[ " $* " != *" --no-plot "* ]] || SRV_PLOT=0; srv_report; exit 0 ;;
    -h|--help) srv_usage; exit 0 ;;
    *) return 1 ;;
  esac
}

# srv_add_family_values OPTION VAR VALUES: one more variant per value V of a
# family only some servers have (--lwlock, --wtlock): glibc's locks with
# VAR=V, the --variants spec glibc:VAR=V. The library refuses a bad V itself,
# before main, with the valid values.
srv_add_family_values() {
  local option=$1 var=$2 v values
  IFS=', ' read -r -a values <<<"$3"
  for v in "${values[@]}"; do
    [[ "$v" =~ ^[a-z][a-z-]*$ ]] || { echo "error: $option: '$v' is not a $var value" >&2; exit 2; }
    SRV_VARIANTS+=",glibc:$var=$v"
  done
}

srv_need_number() {  # srv_need_number NAME VALUE MIN
  [[ "$2" =~ ^[0-9]+$ ]] && (($2 >= $3)) || { echo "error: $1 must be a number >= $3 (got '$2')" >&2; exit 2; }
}

# --- variants -----------------------------------------------------------

# srv_add_select LABEL=RULES: a --select variant. LABEL names files, rows and
# RESULT words: a plain name. The rules are the library's to check (srv_setup).
srv_add_select() {
  local label=${1%%=*} rules=${1#*=} why=''
  if [[ "$1" != *=* || ! "$label" =~ ^[A-Za-z0-9_.-]+$ ]]; then why="expected LABEL=RULES, LABEL of letters, digits, _ . -"
  elif [[ -z "${rules//[[:space:]]/}" ]]; then why="no rules after $label="
  elif [[ "$rules" == *$'\n'* ]]; then why="a newline in the rules"
  elif [[ "$label" == none || "$label" == glibc ]] || srv_select_rules "$label" >/dev/null; then
    why="$label is already the name of a variant"
  fi
  [[ -z "$why" ]] || { echo "error: --select $1: $why" >&2; exit 2; }
  SRV_SELECTS+=("$label=$rules")
}

# srv_select_rules LABEL: the rules of the --select variant LABEL; status 1
# when LABEL is none.
srv_select_rules() {
  local s
  for s in ${SRV_SELECTS[@]+"${SRV_SELECTS[@]}"}; do
    if [[ "${s%%=*}" == "$1" ]]; then echo "${s#*=}"; return 0; fi
  done
  return 1
}

# srv_matrix_entries: "name:K=V,K=V" per line, the test matrix's columns.
srv_matrix_entries() { matrix_columns; }
srv_matrix_names() { srv_matrix_entries | cut -d: -f1 | tr '\n' ' '; }

# srv_variant_envs SPEC: the LOCKSWAP_* settings of a variant, one a line
# (nothing for `none`). Later settings override earlier ones. A --select
# label is glibc with its rules, last: they win over an --env LOCKSWAP_SELECT.
srv_variant_envs() {
  local spec=$1 rules='' x
  [[ "$spec" == none ]] && return 0
  if rules=$(srv_select_rules "$spec"); then spec=glibc; fi
  srv_spec_envs "$spec" || return 1
  for x in ${SRV_EXTRA_ENV[@]+"${SRV_EXTRA_ENV[@]}"}; do echo "$x"; done
  if [[ -n "$rules" ]]; then echo "LOCKSWAP_SELECT=$rules"; fi
  # The owner-on-CPU map handed down by `lockswap-oncpu exec` (an inherited
  # descriptor): every variant run from here may use it.
  if [[ -n "${LOCKSWAP_ONCPU_FD:-}" ]]; then echo "LOCKSWAP_ONCPU_FD=$LOCKSWAP_ONCPU_FD"; fi
}

# srv_spec_envs SPEC: the settings SPEC names (a matrix column, MUTEX/RWLOCK,
# K=V:...; NAME:K=V:...), one a line.
srv_spec_envs() {
  local spec=$1 parts entry x skip=1
  IFS=':' read -r -a parts <<<"$spec"
  if [[ "${parts[0]}" == *=* ]]; then
    skip=0
  elif [[ "${parts[0]}" == */* ]]; then
    echo "LOCKSWAP_MUTEX=${parts[0]%%/*}"; echo "LOCKSWAP_RWLOCK=${parts[0]#*/}"
  else
    entry=$(srv_matrix_entries | grep -m1 "^${parts[0]}:" || true)
    [[ -n "$entry" ]] || { echo "error: variant '${parts[0]}' is not in the test matrix ($(srv_matrix_names))" >&2; return 1; }
    tr ',' '\n' <<<"${entry#*:}"
  fi
  for x in "${parts[@]:skip}"; do
    [[ "$x" == LOCKSWAP_*=* ]] || { echo "error: variant $spec: '$x' is not LOCKSWAP_NAME=VALUE" >&2; return 1; }
    echo "$x"
  done
}

# srv_env VARIANT TAG: sets SRV_ENV (the preload, the variant's settings and
# a statistics file in the private directory) and SRV_STATS_TMP; for `none`
# both are empty: no preload, no LOCKSWAP_* setting at all.
srv_env() {
  SRV_STATS_TMP=''
  [[ -z "$1" || "$1" == none ]] || SRV_STATS_TMP=$SRV_TMP/stats-$2.txt
  srv_env_words "$1" "$SRV_LIB" "$SRV_STATS_TMP"
}

# srv_env_words VARIANT LIBRARY STATS_FILE: SRV_ENV, the words of `env` for
# one run: LD_PRELOAD, the variant's settings, LOCKSWAP_STATS (SRV_STATS_MODE:
# counts for a measured run, whatever --env said; profile for a --profile
# run) and the statistics file. Empty for `none`.
srv_env_words() {
  local settings stats
  SRV_ENV=()
  [[ -z "$1" || "$1" == none ]] && return 0
  settings=$(srv_variant_envs "$1") || exit 2
  mapfile -t SRV_ENV <<<"$settings"
  [[ -n "${SRV_ENV[0]:-}" ]] || SRV_ENV=()
  stats=(LOCKSWAP_STATS="$SRV_STATS_MODE" LOCKSWAP_STATS_FILE="$3")
  if ! srv_stats_modes_known; then  # an older library: any statistics file meant the profiler
    stats=()
    [[ "$SRV_STATS_MODE" != profile ]] || stats=(LOCKSWAP_STATS=1 LOCKSWAP_STATS_FILE="$3")
  fi
  SRV_ENV=(LD_PRELOAD="$2" ${SRV_ENV[@]+"${SRV_ENV[@]}"} ${stats[@]+"${stats[@]}"})
}

# srv_stats_modes_known: the library takes LOCKSWAP_STATS=counts. An older
# one knows only 0/1 and profiles whenever it writes statistics: its measured
# runs then go without statistics (they stay profiler-free).
SRV_STATS_MODES=''
srv_stats_modes_known() {
  if [[ -z "$SRV_STATS_MODES" ]]; then
    SRV_STATS_MODES=no
    env -i LOCKSWAP_STATS=counts LD_PRELOAD="$LIBLOCKSWAP" /bin/true >/dev/null 2>&1 && SRV_STATS_MODES=yes
  fi
  [[ "$SRV_STATS_MODES" == yes ]]
}

# srv_tag TEXT: TEXT made safe for a file name.
srv_tag() { local t=${1//[^A-Za-z0-9_.=-]/_}; echo "${t:0:120}"; }

# --- set-up, clean-up ---------------------------------------------------

# srv_setup [NEEDS_USER=1]: checks the variants against the library, makes
# --dir and the private temporary directory (owned by the server's user),
# installs the clean-up trap.
srv_setup() {
  require_library
  local v out envs s
  IFS=', ' read -r -a envs <<<"$SRV_VARIANTS"
  SRV_ALL=(none glibc)
  for v in ${envs[@]+"${envs[@]}"}; do
    ! srv_select_rules "$v" >/dev/null || { echo "error: --select $v: also a variant of --variants" >&2; exit 2; }
    [[ -z "$v" || " ${SRV_ALL[*]} " == *" $v "* ]] || SRV_ALL+=("$v")
  done
  for s in ${SRV_SELECTS[@]+"${SRV_SELECTS[@]}"}; do SRV_ALL+=("${s%%=*}"); done
  for v in "${SRV_ALL[@]}"; do
    [[ "$v" == none ]] && continue
    out=$(srv_variant_envs "$v") || exit 2
    mapfile -t envs <<<"$out"
    if ! out=$(env -i PATH="$PATH" "${envs[@]}" LD_PRELOAD="$LIBLOCKSWAP" /bin/true 2>&1); then
      printf '%s\n' "$out" >&2
      echo "error: variant '$v' rejected by $LIBLOCKSWAP" >&2; exit 2
    fi
  done
  srv_need_number --repeat "$SRV_REPEAT" 1
  srv_need_number --time "$SRV_TIME" 1
  srv_need_number --warmup "$SRV_WARMUP" 0

  srv_setup_dirs
  rm -f "$SRV_DIR/rounds.tsv" "$SRV_DIR/profile.tsv"
  srv_write_header
  srv_audit_begin "$SRV_DIR/audit.json" "${SRV_ARGV[@]}"
}

# srv_setup_dirs: --dir (made; absolute from here on), the server's user, the
# private temporary directory, the clean-up trap, SRV_LIB (the library as
# the server's user can read it). srv_setup's second half; a runner outside
# the rounds (pg_lwlock_check.sh) calls it alone.
srv_setup_dirs() {
  SRV_DIR=${SRV_DIR:-$BUILD_DIR/servers/$SRV_NAME/$(date +%Y%m%d-%H%M%S)}
  mkdir -p "$SRV_DIR"
  SRV_DIR=$(cd "$SRV_DIR" && pwd)
  srv_become_user
  srv_make_tmp
  trap srv_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # The server's user must read the library; the build tree may be closed to it.
  SRV_LIB=$(srv_user_path "$LIBLOCKSWAP")
}

# srv_audit_begin FILE CMD... / srv_audit_end FILE: lockswap doctor's audit
# record of a result set (the host before and after, CMD, lockswap's version,
# commit and settings). A failure is noted, never fatal.
SRV_DOCTOR=(-m lockswap_cli doctor)   # tools/lockswap_cli/doctor.py; PYTHONPATH from scripts/lib.sh
srv_audit_begin() {
  local f=$1 s settings=()
  shift
  settings=(--setting "variants=${SRV_ALL[*]:-$SRV_VARIANTS}" --setting "repeat=$SRV_REPEAT"
            --setting "time_s=$SRV_TIME" --setting "warmup_s=$SRV_WARMUP" --setting "strict_steady=$SRV_STRICT")
  for s in ${SRV_EXTRA_ENV[@]+"${SRV_EXTRA_ENV[@]}"}; do settings+=(--setting "env:$s"); done
  for s in ${SRV_SELECTS[@]+"${SRV_SELECTS[@]}"}; do settings+=(--setting "select:$s"); done
  "$SRV_PYTHON" "${SRV_DOCTOR[@]}" --audit-begin "$f" --lib "${LIBLOCKSWAP:-}" --source "$SRV_HERE/../.." \
    "${settings[@]}" -- "$@" 2>/dev/null || log "$SRV_NAME: no audit record ($f): lockswap doctor failed"
}
srv_audit_end() {
  [[ -f "$1" ]] || return 0
  "$SRV_PYTHON" "${SRV_DOCTOR[@]}" --audit-end "$1" 2>/dev/null || log "$SRV_NAME: could not complete the audit record $1"
}

# srv_host_summary: the header line of `lockswap doctor --summary` (the host
# checks: governor, turbo, clock, isolated CPUs, SMT, virtualisation, ...).
srv_host_summary() {
  timeout 30 "$SRV_PYTHON" "${SRV_DOCTOR[@]}" --summary 2>/dev/null || echo "host checks: unavailable (lockswap doctor failed)"
}

# srv_become_user: when run as root, SRV_AS (the words that run a command as
# the server's user); the default account is created when missing.
srv_become_user() {
  SRV_AS=()
  [[ $(id -u) -eq 0 ]] || return 0
  if [[ "$SRV_USER" == "$SRV_DEFAULT_USER" ]]; then srv_ensure_account "$SRV_USER"; fi
  id "$SRV_USER" >/dev/null 2>&1 || die "user $SRV_USER does not exist (--user)"
  [[ $(id -u "$SRV_USER") -ne 0 ]] || die "--user $SRV_USER: the server must not run as root"
  # setpriv execs (no fork): the pid of a background job is the program's.
  SRV_AS=(setpriv --reuid="$SRV_USER" --regid="$(id -g "$SRV_USER")" --init-groups --)
}

# srv_ensure_account NAME: a system account with no login shell and no home,
# created once (idempotent; scripts/setup.sh makes it too).
srv_ensure_account() {
  id "$1" >/dev/null 2>&1 && return 0
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$1" ||
    id "$1" >/dev/null 2>&1 || die "could not create the system account $1"
}

# srv_make_tmp: the private directories. SRV_BASE is root's (0755): only root
# writes there (copies of files the server's user must read). SRV_TMP, inside
# it, is the server's (0700): its data, sockets, statistics files. Everything
# in SRV_TMP is the server user's to change at any moment, so the runner
# touches it only as that user (srv_user), never as root; and since SRV_BASE
# is not the user's, SRV_TMP itself cannot be renamed or replaced.
srv_make_tmp() {
  SRV_BASE=$(mktemp -d "/tmp/lockswap-$SRV_NAME.XXXXXX")
  chmod 755 "$SRV_BASE"
  SRV_TMP=$SRV_BASE/tmp
  mkdir -m 700 "$SRV_TMP"
  [[ ${#SRV_AS[@]} -eq 0 ]] || chown "$SRV_USER:" "$SRV_TMP"
}

# srv_user CMD...: CMD as the server's user (as is when not root), in a clean
# environment without the preload: file work inside SRV_TMP.
srv_user() { ${SRV_AS[@]+"${SRV_AS[@]}"} env -i PATH="$PATH" LANG=C.UTF-8 "$@"; }

# srv_user_path FILE: FILE, or a copy of it in root's SRV_BASE when the
# server's user cannot read (and execute) it there.
srv_user_path() {
  local copy
  copy=$SRV_BASE/$(basename "$1")
  if ${SRV_AS[@]+"${SRV_AS[@]}"} test -r "$1" && { [[ ! -x "$1" ]] || ${SRV_AS[@]+"${SRV_AS[@]}"} test -x "$1"; }; then
    echo "$1"
  else
    rm -f "$copy" && cp "$1" "$copy" && chmod a+rX "$copy" && echo "$copy"
  fi
}

SRV_TSV_COLUMNS='bench\tlabel\tvariant\trep\tvalue\tunit\tlat\tlat_kind\terrors\tshutdown\tstatus\tstats\textra\n'
srv_write_header() {
  local s
  # shellcheck disable=SC2059
  printf "$SRV_TSV_COLUMNS" >"$SRV_DIR/runs.tsv"
  # shellcheck disable=SC2059
  ((SRV_PROFILE)) && printf "$SRV_TSV_COLUMNS" >"$SRV_DIR/profile.tsv"
  {
    echo "date:      $(date -Is)"
    echo "host:      $(uname -sr), $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
    echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (at start)"
    srv_probe_summary
    srv_host_summary
    echo "library:   $LIBLOCKSWAP"
    [[ -z "$SRV_TMP" ]] || echo "tmpdir:    $SRV_TMP (the server user's; removed at exit unless --keep)"
    echo "variants:  ${SRV_ALL[*]}   extra env: ${SRV_EXTRA_ENV[*]:-none}"
    for s in ${SRV_SELECTS[@]+"${SRV_SELECTS[@]}"}; do
      echo "select:    ${s%%=*} = LOCKSWAP_SELECT=${s#*=} (glibc for every other lock)"
    done
    echo "runs:      rounds $SRV_REPEAT, ${SRV_TIME}s + ${SRV_WARMUP}s warm-up, server user $( ((${#SRV_AS[@]})) && echo "$SRV_USER" || id -un)"
    srv_stats_header
  } >"$SRV_DIR/header.txt"
  ((SRV_QUIET)) || cat "$SRV_DIR/header.txt" >&2
}

# srv_stats_header: the header line on the statistics of the runs.
srv_stats_header() {
  local extra=''
  ((SRV_PROFILE)) && extra="; plus one LOCKSWAP_STATS=profile run per variant, outside the comparison"
  if srv_stats_modes_known; then echo "stats:     measured runs LOCKSWAP_STATS=counts (no profiler)$extra"
  else echo "stats:     measured runs without statistics (this library predates LOCKSWAP_STATS=counts)$extra"; fi
}

# srv_probe_summary: the header line of `lockswap-probe summary` (contract:
# one line starting `env:`), or why there is none.
srv_probe_summary() {
  local line=''
  [[ -x "$SRV_PROBE" ]] && line=$(timeout 20 "$SRV_PROBE" summary 2>/dev/null | grep -m1 '^env:' || true)
  if [[ -n "$line" ]]; then echo "$line"
  else echo "env:       probe unavailable ($SRV_PROBE not built or failed): every round counts as steady"; fi
}

# srv_probe_c2c: the core-to-core round trip (ns) of `lockswap-probe c2c`, or
# nothing when the probe is not there (the round then counts as steady).
srv_probe_c2c() {
  [[ -x "$SRV_PROBE" ]] || return 0
  timeout 10 "$SRV_PROBE" c2c 2>/dev/null | sed -n 's/.*c2c_ns=\([0-9.]*\).*/\1/p' | head -1 || true
}

# srv_round_begin / srv_round_end NAME: one round (every variant once) with
# the probe before and after; rounds.tsv keeps both readings, the report
# drops the rounds whose readings disagree (lockswap_stats.steady_round).
# srv_round_end's status says whether the round was steady.
srv_round_begin() {
  SRV_ROUNDS=$((SRV_ROUNDS + 1)) SRV_ROUND=$((SRV_ROUNDS)) SRV_ROUND_C2C=$(srv_probe_c2c)
}
srv_round_end() {
  local f=$SRV_DIR/rounds.tsv after
  after=$(srv_probe_c2c)
  [[ -f "$f" ]] || printf 'round\tload\tc2c_before_ns\tc2c_after_ns\n' >"$f"
  printf '%s\t%s\t%s\t%s\n' "$SRV_ROUND" "$1" "$SRV_ROUND_C2C" "$after" >>"$f"
  SRV_ROUND=''
  srv_steady "$SRV_ROUND_C2C" "$after"
}

# srv_steady BEFORE AFTER: lockswap_cli.stats.steady_round of two probe readings
# (an empty one counts as steady), the rule the report applies.
srv_steady() {
  python3 -c 'import sys; from lockswap_cli import stats as s
ns = [float(x) if x else None for x in sys.argv[1:3]]; sys.exit(0 if s.steady_round(*ns) else 1)' \
    "${1:-}" "${2:-}"
}

# srv_rounds FN KEY...: rounds until every KEY has SRV_REPEAT steady ones or
# has run twice that many, as the benchmark drivers do (bench_common.Rounds),
# so a round the probe drops is run again instead of costing the verdict.
# A round of KEY runs `FN KEY VARIANT REP` for every variant of SRV_ALL, in
# an order rotated by one per round REP (1, 2, ...) so no variant always
# runs first, between srv_round_begin and srv_round_end KEY.
srv_rounds() {
  local fn=$1 key rep more i n=${#SRV_ALL[@]}
  shift
  local -A kept=()
  for ((rep = 1; rep <= 2 * SRV_REPEAT; rep++)); do
    more=0
    for key in "$@"; do
      ((${kept[$key]:-0} < SRV_REPEAT)) || continue
      more=1
      srv_round_begin
      for ((i = 0; i < n; i++)); do "$fn" "$key" "${SRV_ALL[$(( (i + rep - 1) % n ))]}" "$rep"; done
      if srv_round_end "$key"; then kept[$key]=$((${kept[$key]:-0} + 1)); fi
    done
    ((more)) || break
  done
}

# Runs as the EXIT trap: stops a client and a server left running (by PID),
# removes the private directory.
srv_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if pid_alive "$SRV_CLIENT_PID"; then kill -TERM "$SRV_CLIENT_PID" 2>/dev/null || true; fi
  if pid_alive "$SRV_PID" "$SRV_COMM"; then
    log "$SRV_NAME: stopping leftover $SRV_COMM $SRV_PID"
    kill -"$SRV_STOP_SIGNAL" "$SRV_PID" 2>/dev/null || true
    wait_until 30 eval "! pid_alive $SRV_PID" || kill -KILL "$SRV_PID" 2>/dev/null || true
    wait "$SRV_PID" 2>/dev/null || true
  fi
  [[ -z "$SRV_DIR" ]] || rm -f "$SRV_DIR/server.pid"
  if declare -F srv_on_exit >/dev/null; then srv_on_exit || true; fi
  if [[ -n "$SRV_BASE" && -d "$SRV_BASE" ]]; then
    if ((SRV_KEEP)); then
      log "$SRV_NAME: kept $SRV_TMP"
    else  # the user's files as the user; then root's directory (rm never follows a link)
      srv_user rm -rf "$SRV_TMP" 2>/dev/null || true
      rm -rf "$SRV_BASE"
    fi
  fi
  exit "$rc"
}

# srv_data_snapshot / srv_data_reset: the prepared data directory
# ($SRV_TMP/data) is copied once; every run starts from that copy. As the
# server's user: a link it plants there redirects only its own writes.
srv_data_snapshot() {
  srv_user rm -rf "$SRV_TMP/pristine" && srv_user cp -a "$SRV_TMP/data" "$SRV_TMP/pristine" ||
    die "could not copy $SRV_TMP/data"
}
srv_data_reset() {
  srv_user rm -rf "$SRV_TMP/data" && srv_user cp -a "$SRV_TMP/pristine" "$SRV_TMP/data" ||
    die "could not restore $SRV_TMP/data from its prepared copy"
}

# srv_as CMD...: CMD as the server's user, in a clean environment with SRV_ENV.
srv_as() { srv_prefix; "${SRV_PREFIX[@]}" "$@"; }
# srv_prefix: SRV_PREFIX, the words srv_as puts before a command.
srv_prefix() {
  SRV_PREFIX=(${SRV_AS[@]+"${SRV_AS[@]}"} env -i PATH="$PATH" LANG=C.UTF-8 HOME="$SRV_TMP" TMPDIR="$SRV_TMP"
              ${SRV_ENV[@]+"${SRV_ENV[@]}"})
}

# --- start / stop ---------------------------------------------------------

# srv_start COMM LOG READY_FN TIMEOUT_S -- CMD...: starts CMD (as the
# server's user, with SRV_ENV) in the background and polls READY_FN until it
# succeeds. COMM is the process name, checked before any signal. Sets
# SRV_PID. Returns 1 (log tail on stderr) when the server exits or does not
# become ready in time; the server is then stopped.
srv_start() {
  local comm=$1 errlog=$2 ready=$3 limit=$(( $4 * 10 )) i
  shift 5
  srv_prefix
  # A simple command (not a function) in the background: bash forks once and
  # execs, setpriv and env exec in turn, so $! is the server itself.
  "${SRV_PREFIX[@]}" "$@" </dev/null >>"$errlog" 2>&1 &
  SRV_PID=$! SRV_COMM=${comm:0:15}
  echo "$SRV_PID $SRV_COMM" >"$SRV_DIR/server.pid"   # for a caller's last-resort clean-up
  for ((i = 0; i < limit; i++)); do
    if ! pid_alive "$SRV_PID"; then
      wait "$SRV_PID" || true
      log "$SRV_NAME: $comm exited during start-up; log: $errlog"
      tail -15 "$errlog" >&2
      SRV_PID=''; rm -f "$SRV_DIR/server.pid"
      return 1
    fi
    if "$ready"; then return 0; fi
    sleep 0.1
  done
  log "$SRV_NAME: $comm not ready within $(( limit / 10 )) s; log: $errlog"
  tail -15 "$errlog" >&2
  srv_stop "$SRV_STOP_SIGNAL" "$errlog"
  return 1
}

# srv_stop HOW LOG [TIMEOUT_S]: HOW is a signal name (INT, TERM) or the name
# of a function that asks the server to shut down. Waits (bounded) for the
# process, reaps it. Sets SRV_VERDICT: clean (exit status 0 and the runner's
# srv_log_ok LOG, if defined, is content), unclean, or timeout (killed).
# Must run in the shell that started the server (only it can reap it).
srv_stop() {
  local how=$1 errlog=$2 limit=${3:-60} rc=0 verdict=clean
  if [[ -z "$SRV_PID" ]]; then SRV_VERDICT=unclean; return 0; fi
  if declare -F "$how" >/dev/null; then
    "$how" || { log "$SRV_NAME: $how failed; sending $SRV_STOP_SIGNAL"; kill -"$SRV_STOP_SIGNAL" "$SRV_PID" 2>/dev/null || true
                verdict=unclean; }
  else
    kill -"$how" "$SRV_PID" 2>/dev/null || verdict=unclean
  fi
  if ! wait_until "$limit" eval "! pid_alive $SRV_PID"; then
    log "$SRV_NAME: $SRV_COMM still running $limit s after the shutdown request; killing it"
    kill -KILL "$SRV_PID" 2>/dev/null || true
    verdict=timeout
  fi
  wait "$SRV_PID" || rc=$?
  SRV_PID=''
  rm -f "$SRV_DIR/server.pid"
  if ((rc != 0)) && [[ "$verdict" == clean ]]; then
    log "$SRV_NAME: server exited with status $rc"; verdict=unclean
  fi
  if declare -F srv_log_ok >/dev/null && ! srv_log_ok "$errlog"; then
    [[ "$verdict" != clean ]] || verdict=unclean
  fi
  SRV_VERDICT=$verdict
}

# srv_stats TAG LOG: the run's statistics file, copied into a new file in
# --dir (blocks a process wrote to stderr instead, i.e. into LOG, are
# collected too); prints the new path. The file lies in the server user's
# directory, so it is read as that user (a link it planted there reaches
# only what the user may read), only when it is a regular file, with a time
# and size bound; root writes only the new file in its own --dir.
srv_stats() {
  local dst=$SRV_DIR/stats-$1.txt
  rm -f "$dst"
  : >"$dst"
  if [[ -n "$SRV_STATS_TMP" ]]; then
    srv_user timeout 20 sh -c '[ -f "$1" ] && [ ! -h "$1" ] || exit 0; head -c "$2" -- "$1"' sh \
      "$SRV_STATS_TMP" "$SRV_STATS_MAX_BYTES" >>"$dst" 2>/dev/null || log "$SRV_NAME: could not read $SRV_STATS_TMP"
    srv_user rm -f "$SRV_STATS_TMP" || true
  fi
  if [[ -n "${2:-}" && -f "$2" ]] && grep -q '^lockswap: pid ' "$2"; then
    grep '^lockswap: ' "$2" >>"$dst" || true
  fi
  echo "$dst"
}

# srv_discard_stats: removes the statistics file of a run not recorded (a warm-up).
srv_discard_stats() { [[ -z "$SRV_STATS_TMP" ]] || srv_user rm -f "$SRV_STATS_TMP" || true; }

# srv_client_bg CMD...: runs a load generator in the background (so a signal
# interrupts the wait); SRV_CLIENT_PID is killed on exit. srv_client_wait
# returns its exit status.
srv_client_bg() { "$@" & SRV_CLIENT_PID=$!; }
srv_client_wait() { local rc=0; wait "$SRV_CLIENT_PID" || rc=$?; SRV_CLIENT_PID=''; return "$rc"; }

# --- sysbench -------------------------------------------------------------

# srv_sysbench_parse OUT: sets SB_TPS SB_QPS SB_P95 SB_ERRORS SB_RECONNECTS
# from a sysbench run's output.
srv_sysbench_parse() {
  SB_TPS=$(sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$1")
  SB_QPS=$(sed -n 's/.*queries: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$1")
  SB_P95=$(sed -n 's/.*95th percentile: *\([0-9.]*\).*/\1/p' "$1")
  SB_ERRORS=$(sed -n 's/.*ignored errors: *\([0-9]*\).*/\1/p' "$1")
  SB_RECONNECTS=$(sed -n 's/.*reconnects: *\([0-9]*\).*/\1/p' "$1")
}

# srv_sysbench_one BENCH LABEL WORKLOAD THREADS VARIANT REP TAG: one sysbench
# run against a database server, from a fresh copy of the prepared data. The
# runner defines db_start LOG (start with SRV_ENV; returns 1 on failure),
# sb_args WORKLOAD (sets SB_ARGS for the running server), db_check (prints a
# verdict; a word with FAIL fails the run), SRV_DB_STOP (srv_stop's HOW) and
# may define db_midrun TAG (called halfway through the measured run; may set
# SRV_RUN_EXTRA=k=v;...). Warm-up, measured run, --check, shutdown, RESULT.
SRV_DB_STOP=TERM SRV_RUN_EXTRA=''
srv_sysbench_one() {
  local bench=$1 label=$2 w=$3 t=$4 v=$5 rep=$6 tag=$7
  local errlog=$SRV_DIR/server-$tag.log out=$SRV_DIR/sysbench-$tag.log sb_rc=0 check=- status=ok stats
  SRV_RUN_EXTRA=''
  srv_data_reset
  srv_env "$v" "$tag"
  ((SRV_QUIET)) || log "$SRV_NAME: ${SRV_PROGRESS:-} $w $t threads $v: start"
  if ! db_start "$errlog"; then
    srv_record bench="$bench" label="$label" variant="$v" rep="$rep" unit=tps lat_kind=p95_ms \
      shutdown=start-failed status=FAIL stats="$(srv_stats "$tag" "$errlog")"
    return 0
  fi
  sb_args "$w"
  if ((SRV_WARMUP > 0)); then
    timeout $((SRV_WARMUP + 120)) sysbench "${SB_ARGS[@]}" --threads="$t" --time="$SRV_WARMUP" run \
      >"$out.warmup" 2>&1 || sb_rc=$?
  fi
  if ((sb_rc == 0)); then
    srv_client_bg timeout $((SRV_TIME + 120)) sysbench "${SB_ARGS[@]}" --threads="$t" --time="$SRV_TIME" \
      --percentile=95 run >"$out" 2>&1
    if declare -F db_midrun >/dev/null; then
      sleep "$(( SRV_TIME / 2 > 0 ? SRV_TIME / 2 : 1 ))"
      db_midrun "$tag"
    fi
    srv_client_wait || sb_rc=$?
  else
    cp "$out.warmup" "$out"
  fi
  ((SRV_CHECK)) && check=$(db_check)
  srv_stop "$SRV_DB_STOP" "$errlog" 90
  stats=$(srv_stats "$tag" "$errlog")
  srv_sysbench_parse "$out"
  if ((sb_rc != 0)) || [[ -z "$SB_TPS" ]]; then
    log "$SRV_NAME: $v: sysbench failed (status $sb_rc):"; tail -15 "$out" >&2; status=FAIL
  fi
  # "ignored errors" are SQL errors sysbench retries by design (deadlocks,
  # lock-wait timeouts): reported, not failures. A reconnect is a failure.
  [[ "${SB_RECONNECTS:-0}" == 0 && "$SRV_VERDICT" == clean && "$check" != *FAIL* ]] || status=FAIL
  srv_record bench="$bench" label="$label" variant="$v" rep="$rep" value="$SB_TPS" unit=tps \
    lat="$SB_P95" lat_kind=p95_ms errors="$SB_ERRORS" shutdown="$SRV_VERDICT" status="$status" stats="$stats" \
    extra="qps=$SB_QPS;reconnects=$SB_RECONNECTS;check=$check${SRV_RUN_EXTRA:+;$SRV_RUN_EXTRA}"
}

# srv_port_ready: something listens on 127.0.0.1:$PORT (a readiness test).
srv_port_ready() { port_in_use "$PORT"; }

# srv_note TEXT: a line for the run's header (header.txt and stderr).
srv_note() { echo "$*" | tee -a "$SRV_DIR/header.txt" >&2; }

# --- the run matrix and the results --------------------------------------

# srv_matrix LOAD...: rounds for each LOAD (srv_rounds) of run_one LOAD
# VARIANT REP (defined by the runner). With --profile, then one profiled run
# per LOAD and preloaded variant. The run count and time left assume no round
# is dropped.
srv_matrix() {
  local n=${#SRV_ALL[@]} i load total done=0 t0
  total=$(( SRV_REPEAT * $# * n + SRV_PROFILE * $# * (n - 1) ))
  t0=$(date +%s)
  srv_rounds srv_matrix_run "$@"
  ((SRV_PROFILE)) || return 0
  srv_profile_begin
  for load in "$@"; do
    for ((i = 1; i < n; i++)); do
      SRV_PROGRESS="[$((done + 1))/$total profile]"
      run_one "$load" "${SRV_ALL[$i]}" profile
      done=$((done + 1))
    done
  done
  srv_profile_end
}

# srv_matrix_run LOAD VARIANT REP: one run of srv_matrix, with its progress
# (srv_matrix's locals done, total and t0 are this function's too: bash scopes
# them dynamically).
srv_matrix_run() {
  local eta
  SRV_PROGRESS="[$((done + 1))/$total round $3]"
  run_one "$@"
  done=$((done + 1))
  if ((!SRV_QUIET && done < total)); then
    eta=$(( ($(date +%s) - t0) * (total - done) / done ))
    log "$SRV_NAME: $done/$total runs done, about ${eta}s left"
  fi
}

# srv_profile_begin / srv_profile_end: the runs between them are profiled
# (LOCKSWAP_STATS=profile) and go to profile.tsv, never to runs.tsv.
srv_profile_begin() { SRV_STATS_MODE=profile SRV_TSV=profile.tsv SRV_ROUND=''; }
srv_profile_end() { SRV_STATS_MODE=counts SRV_TSV=runs.tsv; }

# srv_record key=value...: one run's outcome. Keys: bench (an id), label (for
# the table), variant, rep, value (throughput), unit, lat, lat_kind (e.g.
# p95_ms), errors, shutdown, status (ok|FAIL), stats (file), extra (k=v;...).
# Appends to runs.tsv, prints the RESULT line, logs progress.
srv_record() {
  local -A r=([bench]='' [label]='' [variant]='' [rep]='' [value]='' [unit]='' [lat]='' [lat_kind]=''
              [errors]='' [shutdown]='' [status]=FAIL [stats]='' [extra]='')
  local kv k
  for kv in "$@"; do r[${kv%%=*}]=${kv#*=}; done
  [[ "${r[status]}" == ok ]] || SRV_FAILED=1
  # the 1-minute load average as the run ends: other work on the machine is noise
  r[extra]="${r[extra]:+${r[extra]};}loadavg=$(cut -d' ' -f1 /proc/loadavg)${SRV_ROUND:+;round=$SRV_ROUND}"
  [[ "${r[variant]}" != none ]] || r[stats]=''
  local cols=()
  for k in bench label variant rep value unit lat lat_kind errors shutdown status stats extra; do
    cols+=("${r[$k]//$'\t'/ }")
  done
  (IFS=$'\t'; echo "${cols[*]}") >>"$SRV_DIR/$SRV_TSV"
  echo "RESULT bench=${r[bench]} variant=${r[variant]} rep=${r[rep]} ${r[unit]:-value}=${r[value]:-0}" \
       "${r[lat_kind]:-lat}=${r[lat]:--} errors=${r[errors]:--} shutdown=${r[shutdown]:--}" \
       "status=${r[status]} stats_mode=$([[ "${r[variant]}" == none ]] && echo off || echo "$SRV_STATS_MODE")" \
       "stats=${r[stats]:--}"
  ((SRV_QUIET)) || log "$SRV_NAME: ${SRV_PROGRESS:-} ${r[label]:-${r[bench]}} ${r[variant]}:" \
    "${r[value]:-?} ${r[unit]} ${r[lat_kind]:-lat} ${r[lat]:--} errors ${r[errors]:--}" \
    "shutdown ${r[shutdown]:--} ${r[status]}"
}

# srv_report [TITLE]: the comparison table of --dir/runs.tsv on stdout;
# results.md, results.csv and (unless --no-plot) results.png in --dir.
srv_report() {
  local args=(--md "$SRV_DIR/results.md" --csv "$SRV_DIR/results.csv" --events --event-detail
              --repeat "$SRV_REPEAT")
  ((SRV_PLOT)) && args+=(--png "$SRV_DIR/results.png" --html "$SRV_DIR/results.html")
  ((SRV_STRICT)) && args+=(--strict-steady)
  [[ -f "$SRV_DIR/header.txt" ]] && args+=(--header "$SRV_DIR/header.txt")
  "$SRV_PYTHON" "$SRV_HERE/report.py" "${args[@]}" --title "${1:-$SRV_NAME}" "$SRV_DIR/runs.tsv"
}

# srv_finish: the table, the audit record completed, the exit status.
srv_finish() {
  srv_report "$@"
  srv_audit_end "$SRV_DIR/audit.json"
  ((SRV_QUIET)) || log "$SRV_NAME: results in $SRV_DIR (runs.tsv, results.md/.csv/.png/.html, audit.json, logs, stats-*.txt)"
  return "$SRV_FAILED"
}
