# tests/common/options.sh — the option loop of the test scripts (sourced).
#
#   lstest_options WHO NAME=VAR... -- "$@"
#
# Every option --NAME takes one value, stored in the shell variable VAR
# (`core-lib=core_lib`: --core-lib X sets core_lib=X). An option not in the
# list, or one without its value, ends the script: "WHO: unknown argument" on
# stderr, exit status 2.
lstest_options() {
  local who=$1
  shift
  local -A var_of=()
  while [[ $1 != -- ]]; do
    var_of[${1%%=*}]=${1#*=}
    shift
  done
  shift
  while (($#)); do
    local name=${1#--}
    if [[ $1 != --* || -z ${var_of[$name]:-} || $# -lt 2 ]]; then
      echo "$who: unknown argument $1" >&2
      exit 2
    fi
    printf -v "${var_of[$name]}" '%s' "$2"
    shift 2
  done
}
