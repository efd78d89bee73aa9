#!/usr/bin/python3
"""tests/tools/compare_test.py LOCKSWAP — `lockswap compare` with tiny deterministic
commands and a fake core-to-core probe: the rows (none, glibc, the variants), the rotation of the
order across rounds, the verdicts (faster, slower, no significant difference, not enough runs),
dropped unsteady rounds, metric extraction, the CSV, failed runs, the baseline rules, statistics
that never switch the profiler on, --select rows (LOCKSWAP_SELECT as a row) and --help. No timing
value is asserted."""
import csv
import glob
import json
import os
import re
import stat

import cli_test_util as util
from cli_test_util import CliTestCase

# The command records which row it ran under: the wrapper sets LOCKSWAP_* (none sets nothing).
LOG_VARIANT = 'echo "${LOCKSWAP_MUTEX:-unset}/${LOCKSWAP_RWLOCK:-unset}" >> "$0"; echo ops=42'
FAIL_ON_RWSEM = ('echo "ran ${LOCKSWAP_MUTEX}"; echo "last words of the run";'
                 '[ "$LOCKSWAP_MUTEX" = rwsem ] && exit 7; echo ops=42')
# rwsem does twice the work of the others, futex half.
CLEAR_DIFFERENCE = 'case "$LOCKSWAP_MUTEX" in rwsem) echo ops=200;; futex) echo ops=50;; *) echo ops=100;; esac'
# Every run: 1000 +- 5 from a counter shared by all runs; rwsem adds 1 (0.1%, far inside the noise).
TINY_DIFFERENCE = ('n=$(cat "$0" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$0";'
                   'v=$((1000 + (n * 37) % 11 - 5)); [ "$LOCKSWAP_MUTEX" = rwsem ] && v=$((v + 1)); echo ops=$v')
METRIC = ["--metric", r"ops=(\d+)"]
# stats=0: no statistics, 1: statistics without the profiler, 9: the profiler.
STATS_MODE = 'case "$LOCKSWAP_STATS" in profile) echo stats=9;; "") echo stats=0;; *) echo stats=1;; esac'
# The row's process-wide mutex variant and its LOCKSWAP_SELECT, one line per run.
LOG_SELECT = 'echo "${LOCKSWAP_MUTEX:-unset}|${LOCKSWAP_SELECT:-unset}" >> "$0"; echo ops=42'
# Spaces, a comma and parentheses, as `lockswap report` prints a C++ function; matches nothing here.
RULES = "mutex=rwsem@func:tc_acquire_table(THD*, TDC_element*);rwlock=futex@sym:no_such_lock"

# lockswap-probe's contract: `c2c` prints one line `c2c_ns=N cpus=A,B`, `summary` one `env:` line.
# This one answers its Nth c2c call with line N of $FAKE_PROBE_SEQ (the last line once past the
# end) and logs the calls.
FAKE_PROBE = """#!/bin/sh
dir=$(dirname "$0")
case "$1" in
  summary) echo "env: fake probe, cpus=2" ;;
  c2c)
    n=$(($(cat "$dir/calls" 2>/dev/null || echo 0) + 1)); echo $n > "$dir/calls"
    v=$(sed -n "${n}p" "$dir/seq"); [ -n "$v" ] || v=$(tail -n 1 "$dir/seq")
    echo "c2c_ns=$v cpus=0,1" ;;
esac
"""


def read_lines(path):
    with open(path) as fh:
        return fh.read().split()


def table_rows(stdout):
    """{row: [runs, median, min, max, ratio, low, high, (failed,) verdict words...]} from the table."""
    rows, in_table = {}, False
    for line in stdout.splitlines():
        words = line.split()
        if words[:1] == ["variant"]:
            in_table = True
        elif in_table and words:
            rows[words[0]] = words[1:]
        elif in_table:
            break
    return rows


def verdict(rows, name):
    words = rows[name][7:]
    return " ".join(w for w in words if not w.isdigit())


class CompareTest(CliTestCase):
    def setUp(self):
        super().setUp()
        self.probe = self.fake_probe([100])

    def fake_probe(self, readings):
        pdir = os.path.join(self.tmp, f"probe{len(readings)}-{readings[-1]}")
        os.makedirs(pdir)
        path = os.path.join(pdir, "lockswap-probe")
        with open(path, "w") as fh:
            fh.write(FAKE_PROBE)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        with open(os.path.join(pdir, "seq"), "w") as fh:
            fh.write("".join(f"{r}\n" for r in readings))
        return path

    def probe_calls(self, probe):
        with open(os.path.join(os.path.dirname(probe), "calls")) as fh:
            return int(fh.read())

    def compare(self, *args, want_rc=0, probe=None, env=None):
        p = util.run_cli("compare", "--probe", probe or self.probe, *args, env=env)
        self.assertEqual(p.returncode, want_rc, f"{p.stdout}\n{p.stderr}")
        self.assertNotIn("Traceback", p.stderr)
        return p

    def test_help(self):
        out = self.ok("compare", "--help").stdout
        for want in ("usage: lockswap compare", "--variants", "--repeat", "--metric", "--time",
                     "--higher-is-better", "--lower-is-better", "--csv", "--png", "--set", "rotated",
                     "--baseline", "--level", "--probe", "--keep-unsteady", "--profile-run", "--stats",
                     "not enough runs", "no significant difference", "hyperfine", "--select", "LABEL=RULES"):
            self.assertIn(want, out)
        self.assertIn("compare", self.ok("--help").stdout)

    def test_rows_and_rotation(self):
        log = os.path.join(self.tmp, "order.log")
        self.compare("--variants", "futex,rwsem", "--repeat", "3", *METRIC, "--", "sh", "-c", LOG_VARIANT, log)
        n, g, f, r = "unset/unset", "glibc/glibc", "futex/futex", "rwsem/rwsem"
        # none (no lockswap at all) and glibc added in front; round r rotates the order by r-1.
        self.assertEqual(read_lines(log), [n, g, f, r, g, f, r, n, f, r, n, g])

    def test_none_runs_without_lockswap(self):
        p = self.compare("--variants", "futex", "--repeat", "1", "--metric", r"preload=(\d)",
                         "--", "sh", "-c", 'case "$LD_PRELOAD" in *liblockswap*) echo preload=1;; '
                                           '*) echo preload=0;; esac',
                         env={"LD_PRELOAD": "", "LOCKSWAP_RWSEM_SPIN": "0"})
        rows = table_rows(p.stdout)
        self.assertEqual([rows[v][1] for v in ("none", "glibc", "futex")], ["0", "1", "1"])
        self.assertIn("reference: none (the command without lockswap)", p.stdout)
        # The caller's LOCKSWAP_* variables are not passed on: settings come from --set only.
        p = self.compare("--variants", "futex", "--repeat", "1", "--metric", r"spin=(\d+)",
                         "--", "sh", "-c", 'echo "spin=1${LOCKSWAP_RWSEM_SPIN}"', env={"LOCKSWAP_RWSEM_SPIN": "0"})
        self.assertEqual([table_rows(p.stdout)[v][1] for v in ("none", "futex")], ["1", "1"])
        # none: no LOCKSWAP_* at all, not even the wrapper's own LOCKSWAP_LIB (which still finds
        # the library for the other rows).
        with open(util.CLI) as fh:
            lib = re.search(r"^LOCKSWAP_LIB_DEFAULT='(.*)'$", fh.read(), re.M).group(1)
        p = self.compare("--variants", "futex", "--repeat", "1", "--metric", r"vars=(\d+)",
                         "--", "sh", "-c", 'echo "vars=$(env | grep -c ^LOCKSWAP_)"', env={"LOCKSWAP_LIB": lib})
        rows = table_rows(p.stdout)
        self.assertEqual(rows["none"][1], "0")
        self.assertGreater(int(rows["futex"][1]), 1)

    def test_two_runs_are_not_enough(self):
        p = self.compare("--variants", "rwsem", "--repeat", "2", *METRIC, "--", "sh", "-c", CLEAR_DIFFERENCE)
        rows = table_rows(p.stdout)
        self.assertEqual(verdict(rows, "rwsem"), "not enough runs")
        self.assertEqual(verdict(rows, "glibc"), "not enough runs")
        self.assertEqual(verdict(rows, "none"), "reference")
        self.assertIn("rwsem vs none: 2.000 [2.000, 2.000] (not enough runs; 50.0% interval, 2 rounds)", p.stdout)
        self.assertNotIn("faster", verdict(rows, "rwsem"))

    def test_clear_difference_is_called(self):
        p = self.compare("--variants", "futex,rwsem", *METRIC, "--", "sh", "-c", CLEAR_DIFFERENCE)
        self.assertIn("rounds: 6 of 6 kept (all steady)", p.stdout)   # default --repeat: 6
        rows = table_rows(p.stdout)
        self.assertEqual(verdict(rows, "rwsem"), "faster")
        self.assertEqual(verdict(rows, "futex"), "slower")
        self.assertEqual(verdict(rows, "glibc"), "no significant difference")
        self.assertEqual(rows["rwsem"][:7], ["6", "200", "200", "200", "2.000", "2.000", "2.000"])
        self.assertEqual(rows["futex"][4:7], ["0.500", "0.500", "0.500"])
        self.assertIn("rwsem is 2.000 [2.000, 2.000] times faster than none (96.9% interval, 6 rounds)", p.stdout)
        self.assertIn("futex is 2.000 [2.000, 2.000] times slower than none", p.stdout)
        # Lower is better: the same numbers read the other way round.
        p = self.compare("--variants", "rwsem", *METRIC, "--lower-is-better", "--", "sh", "-c", CLEAR_DIFFERENCE)
        self.assertEqual(verdict(table_rows(p.stdout), "rwsem"), "slower")

    def test_tiny_difference_in_noise(self):
        counter = os.path.join(self.tmp, "counter")
        p = self.compare("--variants", "rwsem", "--repeat", "8", *METRIC, "--", "sh", "-c", TINY_DIFFERENCE, counter)
        rows = table_rows(p.stdout)
        self.assertEqual(verdict(rows, "rwsem"), "no significant difference", p.stdout)
        low, high = float(rows["rwsem"][5]), float(rows["rwsem"][6])
        self.assertLess(low, 1.0)
        self.assertGreater(high, 1.0)

    def test_unsteady_rounds_dropped(self):
        # c2c call 1 is compare's availability check, then before and after of each round:
        # round 2's after-reading jumps (the host moved the vCPUs), round 3 starts from there.
        # --max-rounds 6 leaves no room to run the dropped round again. --strict-steady: the
        # figures of the steady rounds alone, as before the fallback existed.
        probe = self.fake_probe([100, 100, 100, 100, 900, 900, 900])
        p = self.compare("--variants", "rwsem", "--repeat", "6", "--max-rounds", "6", "--strict-steady", *METRIC,
                         "--", "sh", "-c", CLEAR_DIFFERENCE, probe=probe)
        self.assertEqual(self.probe_calls(probe), 1 + 2 * 6)
        self.assertIn("rounds: 5 of 6 kept (1 dropped: the core-to-core probe changed by more than 1.5x", p.stdout)
        self.assertIn("env: fake probe, cpus=2", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual([rows[v][0] for v in ("none", "glibc", "rwsem")], ["5", "5", "5"])
        self.assertEqual(verdict(rows, "rwsem"), "not enough runs")   # 5 rounds cannot reach 95%
        self.assertNotIn("host unsteady", p.stdout)
        # By default 5 steady of 6 asked (too few for 95%): the figure is over all 6 rounds, and says so.
        probe = self.fake_probe([100, 100, 100, 100, 900, 900, 900, 900])
        p = self.compare("--variants", "rwsem", "--repeat", "6", "--max-rounds", "6", *METRIC,
                         "--", "sh", "-c", CLEAR_DIFFERENCE, probe=probe)
        self.assertIn("rounds: 5 of 6 kept (1 dropped", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual([rows[v][0] for v in ("none", "glibc", "rwsem")], ["6", "6", "6"])
        self.assertRegex(p.stdout, r"\n  rwsem +6 +200 +200 +200 +2\.000 +2\.000 +2\.000 +"
                                   r"host unsteady \(5 of 6 rounds steady\)\n")
        self.assertIn("rwsem vs none: 2.000 [2.000, 2.000] over all 6 completed rounds (host unsteady (5 of 6 "
                      "rounds steady): an indication, not a verdict", p.stdout)
        self.assertIn("`host unsteady (k of n rounds steady)`: fewer rounds than asked passed the core-to-core "
                      "check", p.stdout)
        self.assertIn("Trust only the direction", p.stdout)

    def test_probe_moving_every_round(self):
        """A stand-in probe that moves across every round: never blank, never silent."""
        probe = self.fake_probe([100] + [100, 900] * 8)
        path = os.path.join(self.tmp, "runs.csv")
        p = self.compare("--variants", "futex,rwsem", "--repeat", "2", *METRIC, "--csv", path,
                         "--", "sh", "-c", CLEAR_DIFFERENCE, probe=probe)
        self.assertIn("rounds: 0 of 4 kept (4 dropped", p.stdout)
        rows = table_rows(p.stdout)
        for v, median, ratio in (("glibc", "100", "1.000"), ("futex", "50", "0.500"), ("rwsem", "200", "2.000")):
            self.assertRegex(p.stdout, rf"\n  {v} +4 +{median} +{median} +{median} +{ratio} +{ratio} +{ratio} +"
                                       r"host unsteady \(0 of 4 rounds steady\)\n")
        self.assertEqual(rows["none"][:4], ["4", "100", "100", "100"])
        self.assertIn("no difference is called", p.stdout)
        with open(path) as fh:
            summary = {r["variant"]: r for r in csv.DictReader(fh) if r["record"] == "summary"}
        self.assertEqual((summary["rwsem"]["verdict"], summary["rwsem"]["figure_over"], summary["rwsem"]["n"]),
                         ("host unsteady (0 of 4 rounds steady)", "every round", "4"))
        # --strict-steady: today's blank rows, and no note.
        probe = self.fake_probe([100] + [100, 900] * 8 + [100])
        p = self.compare("--variants", "futex,rwsem", "--repeat", "2", "--strict-steady", *METRIC,
                         "--", "sh", "-c", CLEAR_DIFFERENCE, probe=probe)
        rows = table_rows(p.stdout)
        self.assertEqual(rows["rwsem"][:5], ["0", "-", "-", "-", "-"])
        self.assertEqual(verdict(rows, "rwsem"), "no runs")
        self.assertNotIn("host unsteady", p.stdout)

    def test_dropped_round_run_again(self):
        # As above with the default --max-rounds (2 x --repeat): a seventh round replaces round 2.
        probe = self.fake_probe([100, 100, 100, 100, 900, 900, 900])
        p = self.compare("--variants", "rwsem", "--repeat", "6", *METRIC, "--", "sh", "-c", CLEAR_DIFFERENCE,
                         probe=probe)
        self.assertEqual(self.probe_calls(probe), 1 + 2 * 7)
        self.assertIn("rounds: 6 of 7 kept (1 dropped: the core-to-core probe changed by more than 1.5x", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual([rows[v][0] for v in ("none", "glibc", "rwsem")], ["6", "6", "6"])
        self.assertEqual(verdict(rows, "rwsem"), "faster")
        # A probe that never settles: the rounds stop at --max-rounds, every one dropped.
        probe = self.fake_probe([100] + [100, 900] * 8)
        p = self.compare("--variants", "rwsem", "--repeat", "2", *METRIC, "--", "sh", "-c", CLEAR_DIFFERENCE,
                         probe=probe)
        self.assertEqual(self.probe_calls(probe), 1 + 2 * 4)
        self.assertIn("rounds: 0 of 4 kept (4 dropped", p.stdout)
        self.compare("--repeat", "3", "--max-rounds", "2", "--", "true", want_rc=2)
        path = os.path.join(self.tmp, "runs.csv")
        probe = self.fake_probe([100, 100, 100, 100, 900, 900, 900, 900])
        p = self.compare("--variants", "rwsem", "--repeat", "6", "--keep-unsteady", *METRIC, "--csv", path,
                         "--", "sh", "-c", CLEAR_DIFFERENCE, probe=probe)
        self.assertIn("rounds: 6 of 6 kept (1 unsteady kept by --keep-unsteady)", p.stdout)
        self.assertEqual(verdict(table_rows(p.stdout), "rwsem"), "faster")
        with open(path) as fh:
            runs = [r for r in csv.DictReader(fh) if r["record"] == "run"]
        round2 = [r for r in runs if r["round"] == "2"]
        self.assertEqual({(r["probe_before_ns"], r["probe_after_ns"], r["kept"]) for r in round2},
                         {("100.0", "900.0", "1")})

    def test_probe_unavailable(self):
        p = self.compare("--variants", "rwsem", "--repeat", "1", *METRIC, "--", "sh", "-c", "echo ops=1",
                         probe=os.path.join(self.tmp, "no-such-probe"))
        self.assertIn("probe unavailable", p.stdout)
        self.assertIn("rounds: 1 of 1 kept (probe unavailable: every round counted as steady)", p.stdout)
        self.assertIn("load average (1/5/15 min): before ", p.stdout)

    def test_metric_and_csv(self):
        path = os.path.join(self.tmp, "runs.csv")
        p = self.compare("--variants", "glibc,futex", "--repeat", "2", *METRIC, "--csv", path,
                         "--", "sh", "-c", "echo ops=42")
        self.assertIn("higher is better", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual(rows["glibc"][:4], ["2", "42", "42", "42"])
        self.assertEqual(rows["futex"][4], "1.000")
        with open(path) as fh:
            recs = list(csv.DictReader(fh))
        runs = [r for r in recs if r["record"] == "run"]
        self.assertEqual([(r["variant"], r["round"], r["position"]) for r in runs],
                         [("none", "1", "1"), ("glibc", "1", "2"), ("futex", "1", "3"),
                          ("glibc", "2", "1"), ("futex", "2", "2"), ("none", "2", "3")])
        self.assertTrue(all(r["status"] == "ok" and r["exit_status"] == "0" and float(r["value"]) == 42
                            and r["kept"] == "1" and float(r["probe_before_ns"]) == 100 for r in runs))
        summary = {r["variant"]: r for r in recs if r["record"] == "summary"}
        self.assertEqual(set(summary), {"none", "glibc", "futex"})
        self.assertEqual((summary["futex"]["n"], float(summary["futex"]["median"]),
                          float(summary["futex"]["ratio"]), summary["futex"]["verdict"],
                          summary["futex"]["baseline"]), ("2", 42.0, 1.0, "not enough runs", "none"))
        self.assertIn("[1/6] none round 1 ... 42", p.stderr)   # progress, one line per run
        self.assertIn("[6/6] none round 2 ... 42", p.stderr)

    def test_time_metric(self):
        p = self.compare("--variants", "futex", "--repeat", "1", "--time", "--", "sleep", "0.05")
        self.assertIn("wall time (s), lower is better", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual(set(rows), {"none", "glibc", "futex"})
        self.assertGreater(float(rows["futex"][1]), 0.0)

    def test_failed_runs_reported(self):
        p = self.compare("--variants", "futex,rwsem", "--repeat", "2", *METRIC,
                         "--", "sh", "-c", FAIL_ON_RWSEM, want_rc=1)
        self.assertIn("2 of 8 runs failed", p.stdout)
        self.assertIn("rwsem round 1: exit status 7", p.stdout)
        self.assertIn("| last words of the run", p.stdout)
        self.assertIn("| ran rwsem", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual(rows["rwsem"][0], "0")
        self.assertIn("2 no runs", " ".join(rows["rwsem"]))   # failed=2, no ratio at all
        self.assertEqual(rows["futex"][0], "2")
        self.assertIn("FAILED: exit status 7", p.stderr)

    def test_metric_not_found(self):
        p = self.compare("--variants", "futex", "--repeat", "1", "--metric", r"tps=(\d+)",
                         "--", "sh", "-c", "echo ops=1", want_rc=1)
        self.assertIn("not found in the output", p.stdout)
        self.assertIn("| ops=1", p.stdout)

    def test_baseline_rules(self):
        p = self.compare("--variants", "futex,rwsem", "--baseline", "futex", "--no-glibc", *METRIC,
                         "--lower-is-better", "--", "sh", "-c", CLEAR_DIFFERENCE)
        self.assertIn("reference: futex (--baseline)", p.stdout)
        self.assertIn("x-vs-futex", p.stdout)
        self.assertIn("lower is better", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual(set(rows), {"none", "futex", "rwsem"})
        self.assertEqual(verdict(rows, "futex"), "reference")
        self.assertEqual(rows["rwsem"][4], "0.250")    # 200 vs 50, lower is better: 4 times slower
        self.assertIn("rwsem is 4.000 [4.000, 4.000] times slower than futex", p.stdout)
        self.assertIn("none is 2.000 [2.000, 2.000] times slower than futex", p.stdout)
        p = self.compare("--variants", "futex", "--baseline", "rwsem", "--", "true", want_rc=2)
        self.assertIn("--baseline rwsem is not one of the rows: none, glibc, futex", p.stderr)

    def test_settings_reach_the_command(self):
        p = self.compare("--variants", "rwsem", "--repeat", "1", "--set", "RWSEM_SPIN=0",
                         "--metric", r"spin=(\d+)", "--", "sh", "-c", 'echo "spin=1${LOCKSWAP_RWSEM_SPIN}"')
        self.assertEqual(table_rows(p.stdout)["rwsem"][1], "10")
        self.assertEqual(table_rows(p.stdout)["none"][1], "1")

    def test_stats_never_profile(self):
        """--stats: the measured runs get statistics, counts only (contract: never the profiler)."""
        sdir = os.path.join(self.tmp, "stats")
        p = self.compare("--variants", "futex", "--repeat", "1", "--stats", "--stats-dir", sdir,
                         "--metric", r"stats=(\d)", "--", "sh", "-c",
                         STATS_MODE + "; /bin/true")   # dash itself leaves by _exit: no dump
        rows = table_rows(p.stdout)
        self.assertEqual([rows[v][1] for v in ("none", "glibc", "futex")], ["0", "1", "1"])
        self.assertIn(f"counts-only statistics of the measured runs: {sdir}/", p.stdout)
        self.assertEqual(len(glob.glob(os.path.join(sdir, "futex.*"))), 1)   # the env capture left none
        self.assertEqual(len(glob.glob(os.path.join(sdir, "*"))), 2)         # glibc and futex

    def test_profile_run_is_separate(self):
        if "--profile" not in self.ok("--help").stdout:
            self.skipTest("this lockswap command has no --profile (LOCKSWAP_STATS=profile) yet")
        sdir = os.path.join(self.tmp, "stats")
        path = os.path.join(self.tmp, "runs.csv")
        p = self.compare("--variants", "futex", "--repeat", "2", "--profile-run", "--stats-dir", sdir,
                         "--csv", path, "--metric", r"stats=(\d)", "--", "sh", "-c",
                         STATS_MODE)
        rows = table_rows(p.stdout)
        self.assertEqual([rows[v][:2] for v in ("none", "glibc", "futex")], [["2", "0"]] * 3)
        self.assertIn("profile runs (one per row, under the profiler: not timed, not in the table)", p.stdout)
        self.assertIn(f"profile futex: ok; lockswap report {sdir}/futex.profile.*", p.stdout)
        with open(path) as fh:
            prof = [r for r in csv.DictReader(fh) if r["record"] == "profile"]
        self.assertEqual([(r["variant"], float(r["value"])) for r in prof], [("glibc", 9.0), ("futex", 9.0)])

    def test_bad_variant_stops_before_running(self):
        log = os.path.join(self.tmp, "order.log")
        p = self.compare("--variants", "nope", "--", "sh", "-c", LOG_VARIANT, log, want_rc=2)
        self.assertIn("unknown", p.stderr)
        self.assertFalse(os.path.exists(log))

    def test_select_row(self):
        """A --select row: glibc plus its rules, rotated with the others, in the table, the header
        and the CSV; its rules win over a LOCKSWAP_SELECT that --set gives every row."""
        log, path = os.path.join(self.tmp, "select.log"), os.path.join(self.tmp, "runs.csv")
        p = self.compare("--variants", "rwsem", "--select", f"tc={RULES}", "--set", "SELECT=mutex=futex@sym:other",
                         "--repeat", "2", *METRIC, "--csv", path, "--", "sh", "-c", LOG_SELECT, log)
        n, g, r, tc = "unset|unset", "glibc|mutex=futex@sym:other", "rwsem|mutex=futex@sym:other", f"glibc|{RULES}"
        with open(log) as fh:
            self.assertEqual(fh.read().splitlines(), [n, g, r, tc, g, r, tc, n])
        self.assertEqual(set(table_rows(p.stdout)), {"none", "glibc", "rwsem", "tc"})
        self.assertEqual(table_rows(p.stdout)["tc"][:2], ["2", "42"])
        self.assertIn("select row tc: lockswap --variant glibc --set SELECT=mutex=futex@sym:other --select "
                      f"'{RULES}'", p.stdout)
        # The library says in the run that a rule matches nothing: compare says it under the table.
        self.assertIn("  tc: lockswap: LOCKSWAP_SELECT: rule 1 matches nothing", p.stdout)
        with open(path) as fh:
            recs = list(csv.DictReader(fh))
        self.assertEqual({(r["record"], r["select"]) for r in recs if r["variant"] == "tc"},
                         {("run", RULES), ("summary", RULES)})
        self.assertEqual({r["select"] for r in recs if r["variant"] != "tc"}, {""})
        # It may be the baseline.
        p = self.compare("--variants", "futex", "--select", "tc=mutex=futex@sym:x", "--baseline", "tc", "--repeat", "1",
                         *METRIC, "--", "sh", "-c", "echo ops=1")
        self.assertEqual(verdict(table_rows(p.stdout), "tc"), "reference")

    def test_select_errors(self):
        log = os.path.join(self.tmp, "select.log")
        # A malformed rule: the library refuses it before any run, and compare names the row.
        p = self.compare("--select", "bad=mutex=rwsem@nosuch:x", "--", "sh", "-c", LOG_SELECT, log, want_rc=2)
        self.assertIn("LOCKSWAP_SELECT=mutex=rwsem@nosuch:x", p.stderr)
        self.assertIn("compare: row bad (lockswap --variant glibc --select mutex=rwsem@nosuch:x): the settings "
                      "were refused; nothing was run", p.stderr)
        self.assertFalse(os.path.exists(log))
        for spec, why in (("tc", "expected LABEL=RULES"), ("a/b=mutex=futex@sym:x", "expected LABEL=RULES"),
                          ("tc=", "no rules after tc="), ("none=mutex=futex@sym:x", "already the name of a row"),
                          ("futex=mutex=futex@sym:x", "already the name of a row")):
            self.assertIn(why, self.compare("--variants", "futex", "--select", spec, "--", "true", want_rc=2).stderr)
        p = self.compare("--select", "x=mutex=futex@sym:a", "--select", "x=mutex=futex@sym:b", "--", "true", want_rc=2)
        self.assertIn("--select x: already the name of a row", p.stderr)

    def test_usage_errors(self):
        self.assertIn("no command given", self.compare("--variants", "futex", want_rc=2).stderr)
        self.assertIn("not allowed with", self.compare("--time", "--metric", "x", "--", "true", want_rc=2).stderr)

    def test_png(self):
        png = os.path.join(self.tmp, "cmp.png")
        p = self.compare("--variants", "futex", "--repeat", "2", *METRIC, "--png", png,
                         "--", "sh", "-c", "echo ops=5")
        self.assert_png(png, p.stderr)
        if util.have_matplotlib():   # a forest plot sized for a screen: 1200 px wide, height by rows
            with open(png, "rb") as fh:
                head = fh.read(24)
            width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
            self.assertEqual(width, 1200)
            png2 = os.path.join(self.tmp, "cmp2.png")
            self.compare("--variants", "futex,rwsem,lockref", "--repeat", "2", *METRIC, "--png", png2,
                         "--", "sh", "-c", "echo ops=5")
            with open(png2, "rb") as fh:
                self.assertGreater(int.from_bytes(fh.read(24)[20:24], "big"), height)

    def test_html_audit_and_context_switches(self):
        page, path = os.path.join(self.tmp, "cmp.html"), os.path.join(self.tmp, "runs.csv")
        p = self.compare("--variants", "futex", "--repeat", "2", *METRIC, "--html", page, "--csv", path,
                         "--", "sh", "-c", "echo ops=5")
        with open(page) as fh:
            text = fh.read()
        self.assertIn("env: fake probe, cpus=2", text)
        self.assertIn("host checks: governor", text)
        self.assertRegex(text, r"futex +2 +5 +5 +5 +1\.000")
        if util.have_matplotlib():
            self.assertIn('src="data:image/png;base64,iVBORw0KGgo', text)
        # The header carries the doctor's host summary; the audit record lies beside the CSV.
        self.assertRegex(p.stdout, r"\nhost checks: governor [^\n]*, SMT [^\n]*, virt ")
        with open(path + ".audit.json") as fh:
            audit = json.load(fh)
        self.assertEqual(audit["command"][:2], ["lockswap", "compare"])
        self.assertIn("--html", audit["command"])
        self.assertEqual(audit["settings"]["measured_command"], ["sh", "-c", "echo ops=5"])
        self.assertEqual(audit["settings"]["variants"], ["none", "glibc", "futex"])
        self.assertTrue(audit["lockswap"]["version"])
        self.assertIn("loadavg", audit["before"])
        self.assertIn("loadavg", audit["after"])
        self.assertEqual(len(audit["checks"]), 8)
        # Each run's context switches: in the CSV and summarised under the table.
        with open(path) as fh:
            runs = [r for r in csv.DictReader(fh) if r["record"] == "run"]
        self.assertTrue(all(r["voluntary_csw"].isdigit() and r["involuntary_csw"].isdigit() for r in runs))
        self.assertRegex(p.stdout, r"context switches per run [^\n]*\n  none \d+ / \d+; glibc \d+ / \d+; futex ")


if __name__ == "__main__":
    util.main()
