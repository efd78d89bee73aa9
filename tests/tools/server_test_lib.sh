# tests/tools/server_test_lib.sh — the set-up shared by the tests of
# examples/servers/server_lib.sh's rounds (server_rounds_test.sh,
# server_unsteady_test.sh). Set SRV_NAME, then source it at the top level
# (not from a function: server_lib.sh's declarations must stay global). It
# gives expect.sh's checks, server_lib.sh, $TMP (a new directory, removed at
# exit) and stand_in_probe.
# shellcheck shell=bash source-path=SCRIPTDIR
_server_test_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=expect.sh
source "$_server_test_dir/expect.sh"
# shellcheck source=../../examples/servers/server_lib.sh
source "$_server_test_dir/../../examples/servers/server_lib.sh"
TMP=$(mktemp -d "/tmp/lockswap-$SRV_NAME.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# stand_in_probe COMMANDS: SRV_PROBE becomes $TMP/probe, a stand-in for the
# core-to-core probe that srv_rounds reads before and after each round. It
# counts its calls in $TMP/calls (remove the file to count from 0 again),
# then runs COMMANDS, which print the reading (`c2c_ns=100 cpus=0,1`), with
# $n the number of calls before this one and $dir the probe's directory.
stand_in_probe() {
  SRV_PROBE=$TMP/probe
  # shellcheck disable=SC2016  # the probe's own expansions
  printf '%s\n' '#!/usr/bin/env bash' \
    'dir=$(dirname "$0"); n=$(cat "$dir/calls" 2>/dev/null || echo 0); echo $((n + 1)) >"$dir/calls"' \
    "$1" >"$SRV_PROBE"
  chmod +x "$SRV_PROBE"
}
