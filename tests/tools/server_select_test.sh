#!/usr/bin/env bash
# tests/tools/server_select_test.sh LIBLOCKSWAP — examples/servers/server_lib.sh's
# --select LABEL=RULES without a server: the option's checks, the variant's
# settings (glibc, then the rules, one word however they are spelt), and a
# mini runner whose "server" is `sh -c`: the label in every round and the
# --profile runs, the library's check in srv_setup, the RESULT records and
# report.py's table with the rules in the header. A few seconds.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
export LIBLOCKSWAP=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIB_SH=$HERE/../../examples/servers/server_lib.sh
# shellcheck source=expect.sh
source "$HERE/expect.sh"
SRV_NAME=select-test
# shellcheck source=../../examples/servers/server_lib.sh
source "$LIB_SH"
# The probe is not what this test is about: every round counts as steady.
SRV_PROBE=/nonexistent
TMP=$(mktemp -d /tmp/lockswap-select-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# Spaces, a comma, parentheses, `;`, `=`, `@` and `:`; matches nothing in sh.
RULES='mutex=rwsem@func:tc_acquire_table(THD*, TDC_element*);rwlock=futex@sym:no_such_lock'

# 1. The option and the settings.
srv_parse_common --select "tc-rwsem=$RULES"
[[ "$SRV_SHIFT" == 2 && "$(srv_select_rules tc-rwsem)" == "$RULES" ]] && ok "--select parsed" || bad "--select parsed"
SRV_EXTRA_ENV=(LOCKSWAP_SELECT=mutex=futex@sym:for_every_variant LOCKSWAP_RWSEM_SPIN=0)
want="$(srv_variant_envs glibc)
LOCKSWAP_SELECT=$RULES"
[[ "$(srv_variant_envs tc-rwsem)" == "$want" ]] && ok "glibc, --env, then the rules (they win)" ||
  bad "settings of tc-rwsem: $(srv_variant_envs tc-rwsem)"
SRV_EXTRA_ENV=()
srv_env_words tc-rwsem "$LIBLOCKSWAP" "$TMP/stats.txt"
got=$(env -i "${SRV_ENV[@]}" sh -c 'echo "$LOCKSWAP_MUTEX|$LOCKSWAP_SELECT"' 2>/dev/null)
[[ "$got" == "glibc|$RULES" ]] && ok "the rules are one word of env" || bad "env words: $got"
expect "the library is preloaded first" 0 "" -- test "${SRV_ENV[0]}" = "LD_PRELOAD=$LIBLOCKSWAP"

# 2. What --select refuses (exit 2, a message naming the problem).
expect "no =" 2 "expected LABEL=RULES" -- srv_parse_common --select tc
expect "a label that is no plain name" 2 "expected LABEL=RULES" -- srv_parse_common --select 'a b=mutex=futex@sym:x'
expect "no rules" 2 "no rules after tc=" -- srv_parse_common --select 'tc= '
expect "none is taken" 2 "already the name" -- srv_parse_common --select none=mutex=futex@sym:x
expect "glibc is taken" 2 "already the name" -- srv_parse_common --select glibc=mutex=futex@sym:x
expect "a label twice" 2 "already the name" -- srv_parse_common --select "tc-rwsem=$RULES"
expect "--help lists it" 0 "--select LABEL=RULES" -- srv_parse_common --help

# 3. A mini runner: the server is `sh -c`, its metric the length of its LOCKSWAP_SELECT.
run_one() {  # run_one LOAD VARIANT REP
  local tag out
  tag=$(srv_tag "$2-r$3")
  srv_env "$2" "$tag"
  out=$(srv_as sh -c 'echo "${LOCKSWAP_MUTEX:-unset}|${LOCKSWAP_SELECT:-unset}"' 2>/dev/null)
  echo "$2 $3 $out" >>"$SRV_DIR/order.log"
  srv_record bench=b label=B variant="$2" rep="$3" value="$((100 + ${#out}))" unit=ops/s shutdown=clean status=ok \
    stats="$(srv_stats "$tag")"
}
mini_runner() {  # mini_runner ARGS...: parse like a runner, set up, two rounds and --profile, report
  SRV_SELECTS=() SRV_DIR=$TMP/run SRV_REPEAT=2 SRV_QUIET=1 SRV_PLOT=0 SRV_VARIANTS=futex SRV_PROFILE=1
  [[ $(id -u) -ne 0 ]] || SRV_USER=nobody   # not the default account: nothing to create
  while [[ $# -gt 0 ]]; do srv_parse_common "$@" || exit 2; shift "$SRV_SHIFT"; done
  srv_setup
  srv_matrix load
  srv_finish
}
out=$( (mini_runner --select "tc-rwsem=$RULES") 2>&1) && ok "mini runner" || bad "mini runner: $out"
order=$(cut -d' ' -f1-2 "$TMP/run/order.log" | tr '\n' ' ')
[[ "$order" == "none 1 glibc 1 futex 1 tc-rwsem 1 glibc 2 futex 2 tc-rwsem 2 none 2 glibc profile futex profile tc-rwsem profile " ]] &&
  ok "the label rotates with the others and is profiled" || bad "order: $order"
grep -qxF "tc-rwsem 1 glibc|$RULES" "$TMP/run/order.log" && ok "the rules reach the server" ||
  bad "the rules did not reach the server: $(cat "$TMP/run/order.log")"
grep -qxF "futex 1 futex|unset" "$TMP/run/order.log" && ok "other variants get no rules" || bad "futex got rules"
grep -q "^RESULT bench=b variant=tc-rwsem rep=2 ops/s=" <<<"$out" && ok "RESULT variant=LABEL" || bad "no RESULT for tc-rwsem"
grep -qF "select:    tc-rwsem = LOCKSWAP_SELECT=$RULES" <<<"$out" && ok "the report's header gives the rules" ||
  bad "no legend line in: $out"
grep -q "^| B | tc-rwsem | 2/2 |" <<<"$out" && ok "the report has the tc-rwsem row" || bad "no tc-rwsem row in: $out"
grep -q "	tc-rwsem	profile	" "$TMP/run/profile.tsv" && ok "profile.tsv has it" || bad "profile.tsv lacks tc-rwsem"

# 4. srv_setup: a malformed rule, and a label that is also in --variants.
expect "the library refuses a malformed rule" 2 "variant 'bad' rejected" -- mini_runner --select 'bad=mutex=rwsem@nosuch:x'
expect "a label also in --variants" 2 "also a variant of --variants" -- \
  mini_runner --variants futex,tc --select tc=mutex=futex@sym:x

((fails == 0)) || { echo "server_select_test: $fails check(s) FAILED"; exit 1; }
echo "server_select_test: passed"
