# tests/tools/expect.sh — the check the shell tests of the command and
# of the eBPF loader share: run a command, compare its exit status, grep its
# output. Source it; it counts failures in `fails`.
# shellcheck shell=bash
fails=0
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fails=$((fails + 1)); }
expect() {  # expect NAME WANT_RC GREP_PATTERN -- cmd...
  local name=$1 want=$2 pat=$3 out rc
  shift 4
  set +e
  out=$("$@" 2>&1)
  rc=$?
  set -e
  if [[ $rc -ne $want ]]; then bad "$name: exit $rc, want $want: $out"; return; fi
  if [[ -n "$pat" ]] && ! grep -qE -- "$pat" <<<"$out"; then bad "$name: no /$pat/ in: $out"; return; fi
  ok "$name"
}
