#!/usr/bin/env bash
# scripts/speedcheck.sh — the speed regression check, one command (about 3-5
# minutes on 2 CPUs): sysbench mutex at 2/16/64 threads, a small rwlock matrix
# (50% and 90% reads), semaphore ping-pong and instructions per idle lock
# pair, for none (no LD_PRELOAD), glibc, futex, rwsem (+ percid for rwlocks),
# in interleaved rounds guarded by lockswap-probe c2c; each ratio against
# none with its 95% interval and verdict, beside the committed reference
# (examples/bench/speed_reference.json), flagging changes beyond noise.
# Method and how to read it: docs/measuring.md.
#
#   scripts/speedcheck.sh [--quick] [--parts sysbench,rwlock,sem,instr]
#                         [--write-reference] [--fail-on-change] [--repeat N]
#
# Builds what it needs in BUILD_DIR (default build/) first. Run `lockswap
# doctor` before trusting a timed ratio on an unfamiliar machine.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/scripts/lib.sh"

[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || die "$BUILD_DIR is not configured: run scripts/build.sh first"
command -v sysbench >/dev/null || die "sysbench not found (scripts/setup.sh installs it)"
log "speedcheck: building lockswap, lockswap-probe and the benchmarks in $BUILD_DIR"
cmake --build "$BUILD_DIR" -j"$(nproc)" --target lockswap lockswap-probe rwlock_bench sem_bench fastpath >/dev/null
exec python3 "$ROOT/examples/bench/speedcheck.py" --build "$BUILD_DIR" "$@"
