#!/usr/bin/env bash
# tests/tools/server_unsteady_test.sh — the runners' table (server_lib.sh's
# srv_rounds, srv_record, srv_report; examples/servers/report.py) with a
# stand-in core-to-core probe that moves across every round: every completed
# run is still reported ("never blank, never silent"): the figures over every
# round, the verdict `host unsteady (k of n rounds steady)`, the note under
# the table, the forest plot and the page; --strict-steady gives today's
# blank rows. Also the audit record of a result set. No server, no library.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
SRV_NAME=unsteady-test
# shellcheck source=server_test_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/server_test_lib.sh"

# The probe alternates 100 and 900 ns: each round's before and after disagree.
# shellcheck disable=SC2016  # expanded by the probe
stand_in_probe 'echo "c2c_ns=$(( n % 2 ? 900 : 100 )) cpus=0,1"'

declare -A SPEED=([none]=100 [glibc]=99 [rwsem]=130)
one_run() {  # KEY VARIANT REP: a run of a made-up benchmark whose speed depends on the variant
  srv_record bench="$1" label="made-up $1" variant="$2" rep="$3" value="${SPEED[$2]}" unit=ops/s status=ok >/dev/null
}
SRV_ALL=(none glibc rwsem) SRV_REPEAT=2 SRV_QUIET=1 SRV_DIR=$TMP/run
mkdir -p "$SRV_DIR"
# shellcheck disable=SC2059
printf "$SRV_TSV_COLUMNS" >"$SRV_DIR/runs.tsv"
srv_rounds one_run k 2>/dev/null
[[ $(grep -c . "$SRV_DIR/rounds.tsv") == 5 ]] && ok "every round dropped: 2 x --repeat rounds ran" ||
  bad "rounds.tsv: $(cat "$SRV_DIR/rounds.tsv")"

out=$(srv_report "made-up" 2>"$TMP/err")
row() { grep -F "| made-up k | $1 |" <<<"$out" || true; }
[[ "$(row rwsem)" == *"| 4/4 | 130.0 ops/s | 1.300 [1.300, 1.300] (88%) | host unsteady (0 of 4 rounds steady) | 0/4 |"* ]] &&
  ok "a row over every round, with its figure and the unsteady verdict" || bad "rwsem row: $(row rwsem)"
[[ "$(row none)" == *"| 100.0 ops/s | 1 (reference) |"* ]] && ok "the reference row has its figure" ||
  bad "none row: $(row none)"
grep -q 'Over every completed round: made-up k. `host unsteady (k of n rounds steady)`' <<<"$out" &&
  grep -q "Trust only the direction" <<<"$out" && ok "the note says what it means and how far to trust it" ||
  bad "no note: $out"
if "$SRV_PYTHON" -c 'import matplotlib' 2>/dev/null; then
  [[ "$(head -c 8 "$SRV_DIR/results.png" | od -An -c | tr -d ' ')" == '211PNG\r\n032\n' ]] &&
    ok "results.png is a PNG (forest plot)" || bad "results.png: $(file "$SRV_DIR/results.png" 2>&1)"
  grep -q 'data:image/png;base64,' "$SRV_DIR/results.html" && grep -q 'host unsteady (0 of 4 rounds steady)' \
    "$SRV_DIR/results.html" && ok "results.html: the plot inline and the table" || bad "results.html"
else
  ok "matplotlib missing: plot not checked ($(grep -c skipped "$TMP/err" || true) notes)"
fi
grep -q 'every round' "$SRV_DIR/results.csv" && ok "results.csv says what the figure is over" || bad "results.csv"

SRV_STRICT=1
out=$(srv_report "made-up" 2>/dev/null)
[[ "$(row rwsem)" == *"| 4/4 | - ops/s | - | no runs | 0/4 |"* ]] && ok "--strict-steady: steady rounds only" ||
  bad "strict rwsem row: $(row rwsem)"
! grep -q "host unsteady" <<<"$out" && ok "--strict-steady: no unsteady verdict" || bad "strict: $out"
SRV_STRICT=0

# One steady round of two asked: still fewer than asked, so over every round, k counted.
rm -f "$TMP/calls"
SRV_DIR=$TMP/run2; mkdir -p "$SRV_DIR"
# shellcheck disable=SC2059
printf "$SRV_TSV_COLUMNS" >"$SRV_DIR/runs.tsv"
# shellcheck disable=SC2016  # expanded by the probe
stand_in_probe 'case $n in 0|1) echo "c2c_ns=100 cpus=0,1" ;; *) echo "c2c_ns=$(( n % 2 ? 100 : 900 )) cpus=0,1" ;; esac'
srv_rounds one_run k 2>/dev/null
out=$(srv_report "made-up" 2>/dev/null)
[[ "$(row rwsem)" == *"| host unsteady (1 of 4 rounds steady) | 1/4 |"* ]] && ok "k of n counts the steady rounds" ||
  bad "1 of 4: $(row rwsem) $(cat "$SRV_DIR/rounds.tsv")"

# The audit record of a result set: begun at set-up, completed at the end.
SRV_DIR=$TMP/run
LIBLOCKSWAP=$TMP/liblockswap.so.9.8.7; : >"$LIBLOCKSWAP"
srv_audit_begin "$SRV_DIR/audit.json" runner.sh --repeat 2 2>/dev/null
srv_audit_end "$SRV_DIR/audit.json" 2>/dev/null
python3 - "$SRV_DIR/audit.json" <<'PY' && ok "audit.json: command, version, settings, host before and after" || bad "audit.json"
import json, sys
a = json.load(open(sys.argv[1]))
assert a["command"] == ["runner.sh", "--repeat", "2"], a["command"]
assert a["lockswap"]["version"] == "9.8.7", a["lockswap"]
assert a["lockswap"]["commit"], a["lockswap"]
assert a["settings"]["variants"] == "none glibc rwsem" and a["settings"]["repeat"] == "2", a["settings"]
assert "loadavg" in a["before"] and "loadavg" in a["after"] and len(a["checks"]) == 8
PY
grep -q '^host checks: governor' <(srv_host_summary) && ok "the header's host summary line" || bad "srv_host_summary"

((fails == 0)) || { echo "server_unsteady_test: $fails check(s) FAILED"; exit 1; }
echo "server_unsteady_test: passed"
