# tests/behaviour/guest_lib.sh — sourced by the scripts that run
# behaviour_guest under LD_PRELOAD (good_guest.sh, and
# tests/glibc_tier/refuse_unchecked.sh). They set $prog (the guest) and
# $preload (what run preloads); this gives them $work (a private directory),
# $status and $failures, and fail, run and check_clean_run.
expected='lockswap good guest: main ran'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  echo "  --- stdout ---"; sed 's/^/  | /' "$work/out"
  echo "  --- stderr ---"; sed 's/^/  | /' "$work/err"
  failures=$((failures + 1))
}

# run VAR=value... : the guest under $preload with extra settings.
run() {
  timeout 60 env "$@" LD_PRELOAD="$preload" "$prog" >"$work/out" 2>"$work/err"
  status=$?
}

check_clean_run() {
  local label=$1
  [ "$status" -eq 0 ] || fail "$label: exit status $status, expected 0"
  [ "$(cat "$work/out")" = "$expected" ] && [ "$(wc -l <"$work/out")" -eq 1 ] ||
    fail "$label: stdout is not exactly the program's own line"
}

