#!/usr/bin/env bash
# tests/tools/server_rounds_test.sh — examples/servers/server_lib.sh's
# srv_rounds with a scripted core-to-core probe: a round whose readings
# disagree (lockswap_stats.steady_round) is run again until each key has
# --repeat steady rounds, and never more than twice --repeat rounds per key;
# each round runs every variant once, in a rotated order.
# No server, no library; about a second.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
SRV_NAME=rounds-test
# shellcheck source=server_test_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/server_test_lib.sh"

# The probe answers the readings of $TMP/readings in turn, one per call.
# shellcheck disable=SC2016  # expanded by the probe
stand_in_probe 'echo "c2c_ns=$(sed -n "$((n + 1))p" "$dir/readings") cpus=0,1"'

one_round() { echo "$1:$3" >>"$TMP/log"; }  # KEY VARIANT REP: one run per round below
SRV_ALL=(only)
rounds_with() {  # READINGS KEY...: run srv_rounds, print the rounds it ran
  printf '%s\n' $1 >"$TMP/readings"
  rm -f "$TMP/calls" "$TMP/log" "$TMP/rounds.tsv"
  shift
  SRV_DIR=$TMP SRV_ROUNDS=0 srv_rounds one_round "$@"
  tr '\n' ' ' <"$TMP/log"
}

SRV_REPEAT=2
# steady, moved (100 -> 400: dropped), steady: three rounds for two kept.
got=$(rounds_with "100 100 100 400 400 400" k)
[[ "$got" == "k:1 k:2 k:3 " ]] && ok "a dropped round is run again" || bad "rounds run: $got"
[[ $(wc -l <"$TMP/rounds.tsv") == 4 ]] && ok "rounds.tsv has every round" || bad "rounds.tsv: $(cat "$TMP/rounds.tsv")"
# Always moving: 2 x --repeat rounds, then it stops.
got=$(rounds_with "100 400 100 400 100 400 100 400 100 400" k)
[[ "$got" == "k:1 k:2 k:3 k:4 " ]] && ok "at most twice --repeat rounds" || bad "rounds run: $got"
# Two keys: only the one with a dropped round gets another.
got=$(rounds_with "100 100 100 100 100 400 100 100 100 100" a b)
[[ "$got" == "a:1 b:1 a:2 b:2 a:3 " ]] && ok "only the key that lost a round runs again" || bad "rounds run: $got"
# No probe: every round counts.
SRV_PROBE=/nonexistent
got=$(rounds_with "" k)
[[ "$got" == "k:1 k:2 " ]] && ok "without a probe every round is steady" || bad "rounds run: $got"
# Every variant once per round, the order rotated by one from round to round.
one_round() { echo "$2" >>"$TMP/log"; }
SRV_ALL=(a b c)
got=$(rounds_with "" k)
[[ "$got" == "a b c b c a " ]] && ok "variants rotated per round" || bad "runs: $got"
((fails == 0)) || { echo "server_rounds_test: $fails check(s) FAILED"; exit 1; }
echo "server_rounds_test: passed"
