#!/usr/bin/env bash
# tests/tools/cli_test.sh LOCKSWAP — smoke test of the `lockswap` command.
set -euo pipefail
CLI=${1:?usage: cli_test.sh path/to/lockswap}
# shellcheck source=expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

expect help 0 'usage: lockswap' -- "$CLI" --help
expect list 0 'LOCKSWAP_MUTEX = glibc .*futex' -- "$CLI" --list
expect list-rwlock 0 'LOCKSWAP_RWLOCK = glibc' -- "$CLI" --list
expect list-sem 0 'LOCKSWAP_SEM = glibc futex lockref' -- "$CLI" --list
expect list-retries 0 'LOCKSWAP_LOCKREF_RETRIES = 0..1000000' -- "$CLI" --list
expect no-command 2 'no command given' -- "$CLI" --mutex futex
expect bad-option 2 "unknown option '--bogus'" -- "$CLI" --bogus -- true
expect missing-value 2 'option --mutex needs a value' -- "$CLI" --mutex
expect bad-set 2 'expects NAME=VALUE' -- "$CLI" --set FOO -- true
expect bad-variant 2 'unknown mutex variant' -- "$CLI" --mutex nope -- true
expect bad-tunable 2 'unknown lockswap variable' -- "$CLI" --set NOPE=1 -- true
expect bad-number 2 'not a decimal number' -- "$CLI" --set RWSEM_SPIN=x -- true
expect runs 0 '^LOCKSWAP_MUTEX=futex$' -- "$CLI" --mutex futex -- env
expect rwlock 0 '^LOCKSWAP_RWLOCK=futex$' -- "$CLI" --rwlock=futex -- env
expect variant 0 '^LOCKSWAP_RWLOCK=futex$' -- "$CLI" --variant futex -- env
expect sem 0 '^LOCKSWAP_SEM=lockref$' -- "$CLI" --sem lockref -- env
expect variant-lockref 0 '^LOCKSWAP_SEM=lockref$' -- "$CLI" --variant lockref -- env
expect bad-sem 2 'unknown sem variant' -- "$CLI" --sem nope -- true
expect bad-retries 2 'LOCKSWAP_LOCKREF_RETRIES=-1: not a decimal number' -- "$CLI" --set LOCKREF_RETRIES=-1 -- true
# The wrapper's own variable is not one the library rejects.
expect wrapper-variable 0 '' -- env LOCKSWAP_LIB="$(sed -n "s/^LOCKSWAP_LIB_DEFAULT='\(.*\)'$/\1/p" "$CLI")" "$CLI" --mutex futex -- true
expect set-prefix 0 '^LOCKSWAP_RWSEM_SPIN=0$' -- "$CLI" --set RWSEM_SPIN=0 -- env
expect stats 0 '^LOCKSWAP_STATS=1$' -- "$CLI" --stats -- env
expect no-dashdash 0 '^LOCKSWAP_MUTEX=futex$' -- "$CLI" --mutex futex env
expect exit-status 3 '' -- "$CLI" --mutex futex -- sh -c 'exit 3'
# shellcheck disable=SC2016  # $LD_PRELOAD is expanded by the inner sh
expect preload-first 0 '^LD_PRELOAD=[^ ]*liblockswap\.so /nonexistent-keep\.so$' -- \
  env LD_PRELOAD=/nonexistent-keep.so "$CLI" --mutex futex -- sh -c 'echo "LD_PRELOAD=$LD_PRELOAD"'
expect rspin-map 0 'LOCKSWAP_MUTEX=rwsem' -- "$CLI" --dry-run --variant rwsem-rspin -- true
expect percid-map 0 'LOCKSWAP_MUTEX=rwsem' -- "$CLI" --dry-run --variant percid -- true
# --print-env: what COMMAND would get, NUL-separated, no command needed;
# the settings are checked first, like a run's.
expect print-env 0 '^LOCKSWAP_RWLOCK=rwsem-rspin$' -- sh -c '"$0" --variant rwsem-rspin --print-env | tr "\\0" "\\n"' "$CLI"
expect print-env-preload 0 '^LD_PRELOAD=[^ ]*liblockswap\.so$' -- sh -c '"$0" --mutex futex --print-env | tr "\\0" "\\n"' "$CLI"
expect print-env-refused 2 'unknown sem variant' -- "$CLI" --sem nope --print-env
# --variant NAME is the column of that name in the library's one list
# (preload/config/variant_columns.def), printed by --list; explicit options win.
expect list-columns 0 'rwsem-rspin LOCKSWAP_MUTEX=rwsem,LOCKSWAP_RWLOCK=rwsem-rspin' -- "$CLI" --list
expect variant-column 0 '^LOCKSWAP_CID=percpu$' -- "$CLI" --variant percid-percpu -- env
expect variant-oncpu-off 0 '^LOCKSWAP_ONCPU=off$' -- "$CLI" --variant rwsem-oncpu-off -- env
expect variant-lockref-mutex 0 '^LOCKSWAP_MUTEX=futex$' -- "$CLI" --variant lockref -- env
expect variant-then-mutex 0 '^LOCKSWAP_MUTEX=glibc$' -- "$CLI" --mutex glibc --variant rwsem -- env
expect variant-then-cid 0 '^LOCKSWAP_CID=global$' -- "$CLI" --cid global --variant percid -- env
expect bad-column 2 "unknown variant 'nope'" -- "$CLI" --variant nope -- true
expect cid 0 '^LOCKSWAP_CID=global$' -- "$CLI" --rwlock percid --cid global -- env
# LOCKSWAP_ONCPU (core/oncpu.h): checked like every setting; bpf never
# falls back silently when the map is not there.
expect list-oncpu 0 'LOCKSWAP_ONCPU = auto bpf rseq off' -- "$CLI" --list
expect bad-oncpu 2 'LOCKSWAP_ONCPU=nope: unknown owner-on-CPU source' -- "$CLI" --set ONCPU=nope -- true
expect oncpu-rseq 0 '^LOCKSWAP_ONCPU=rseq$' -- "$CLI" --set ONCPU=rseq -- env
expect oncpu-off 0 '' -- "$CLI" --mutex rwsem --set ONCPU=off -- true
expect oncpu-auto-no-map 0 'oncpu=rseq' -- env -u LOCKSWAP_ONCPU_FD "$CLI" --mutex rwsem --stats -- true
expect oncpu-bpf-no-map 2 'LOCKSWAP_ONCPU=bpf: LOCKSWAP_ONCPU_FD is not set' -- env -u LOCKSWAP_ONCPU_FD "$CLI" --set ONCPU=bpf -- true
expect oncpu-bpf-not-a-map 2 "LOCKSWAP_ONCPU=bpf: LOCKSWAP_ONCPU_FD is not lockswap's owner-on-CPU map" -- \
  env LOCKSWAP_ONCPU_FD=2 "$CLI" --set ONCPU=bpf -- true
expect oncpu-bpf-closed-fd 2 'LOCKSWAP_ONCPU_FD names no open descriptor' -- env LOCKSWAP_ONCPU_FD=987 "$CLI" --set ONCPU=bpf -- true
expect oncpu-bad-fd 2 'LOCKSWAP_ONCPU_FD=x: not a decimal number' -- env LOCKSWAP_ONCPU_FD=x "$CLI" --mutex rwsem -- true
expect list-cid 0 'LOCKSWAP_CID = rseq percpu global thread' -- "$CLI" --list
expect bad-cid 2 'unknown concurrency-id allocator' -- "$CLI" --rwlock percid --cid nope -- true
expect stats-file 0 '' -- "$CLI" --stats-file "${TMPDIR:-/tmp}/lockswap-cli-test.$$" --mutex futex -- true
if [[ -s "${TMPDIR:-/tmp}/lockswap-cli-test.$$" ]] && grep -q 'mutex=futex' "${TMPDIR:-/tmp}/lockswap-cli-test.$$"; then
  ok stats-file-written
else
  bad stats-file-written
fi
rm -f "${TMPDIR:-/tmp}/lockswap-cli-test.$$"

# `report` and `compare` are subcommands only as the first word: a program of
# that name still runs after -- or after an option.
bindir=$(mktemp -d "${TMPDIR:-/tmp}/lockswap-cli-bin.XXXXXX")
for name in report compare; do
  # shellcheck disable=SC2016  # $LOCKSWAP_MUTEX is expanded by the generated script
  printf '#!/bin/sh\necho "program %s ran with LOCKSWAP_MUTEX=$LOCKSWAP_MUTEX"\n' "$name" > "$bindir/$name"
  chmod +x "$bindir/$name"
done
expect program-report 0 '^program report ran with LOCKSWAP_MUTEX=futex$' -- env PATH="$bindir:$PATH" "$CLI" --mutex futex -- report
expect program-compare 0 '^program compare ran' -- env PATH="$bindir:$PATH" "$CLI" --mutex futex compare
expect program-dashdash 0 '^program report ran' -- env PATH="$bindir:$PATH" "$CLI" -- report
rm -rf "$bindir"
expect subcommand-report 0 'usage: lockswap report' -- "$CLI" report --help
expect subcommand-compare 0 'usage: lockswap compare' -- "$CLI" compare --help
expect help-subcommands 0 'lockswap report \[' -- "$CLI" --help

if ((fails)); then echo "$fails failed"; exit 1; fi
echo "all passed"
