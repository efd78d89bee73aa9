#!/usr/bin/env bash
# tests/oncpu/oncpu_bpf_test.sh LOADER LIB CORE_TESTS — the eBPF owner-on-CPU
# path end to end (design: core/oncpu.h): start the loader (unless it already
# runs), read the map through the library as root and as an unprivileged
# user, run the core tests that need the map, stop what we started.
# Exit 77 (skipped) with the reason where loading is impossible here.
set -euo pipefail
LOADER=${1:?usage: oncpu_bpf_test.sh LOADER LIB CORE_TESTS}
LIB=${2:?}
CORE_TESTS=${3:?}

# shellcheck source=oncpu_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/oncpu_lib.sh"

fails=0
check() {  # check NAME PATTERN -- cmd...
  local name=$1 pat=$2 out
  shift 3
  if out=$("$@" 2>&1) && grep -qE -- "$pat" <<<"$out"; then echo "ok   $name"; else echo "FAIL $name: $out"; fails=$((fails + 1)); fi
}
check status 'header live, this process reads on CPU' -- "$LOADER" status
check library-bpf 'oncpu=bpf' -- "$LOADER" exec -- env LD_PRELOAD="$LIB" LOCKSWAP_ONCPU=bpf LOCKSWAP_STATS=1 /bin/true
check library-auto 'oncpu=bpf' -- "$LOADER" exec -- env LD_PRELOAD="$LIB" LOCKSWAP_STATS=1 /bin/true
# The wrapper's --oncpu (bin/lockswap next to the loader in the build tree).
WRAPPER=$(dirname "$LOADER")/lockswap
if [[ -x "$WRAPPER" ]]; then
  check wrapper-oncpu 'oncpu=bpf' -- "$WRAPPER" --oncpu --mutex rwsem --stats -- /bin/true
fi
if command -v setpriv >/dev/null; then
  check unprivileged-reader 'oncpu=bpf' -- "$LOADER" exec -- setpriv --reuid=nobody --regid=nogroup --clear-groups \
    env LD_PRELOAD="$LIB" LOCKSWAP_ONCPU=bpf LOCKSWAP_STATS=1 /bin/true
fi
if "$LOADER" exec -- "$CORE_TESTS" --gtest_filter='OncpuTest.*'; then echo "ok   core OncpuTest"; else echo "FAIL core OncpuTest"; fails=$((fails + 1)); fi
if ((started)); then
  "$LOADER" stop >/dev/null
  started=0
  check stopped 'stopped' -- bash -c "'$LOADER' status; true"
fi
exit $((fails > 0))
