#!/usr/bin/python3
"""preload/cli/test/compare_test.py LOCKSWAP — `lockswap compare` with tiny deterministic
commands: the rotation of the variant order across repetitions, metric extraction, the CSV, the
reporting of failed runs, the baseline rules and --help. No timing value is asserted."""
import csv
import os

import cli_test_util as util
from cli_test_util import CliTestCase

# The command records which variant it ran under (the wrapper sets LOCKSWAP_*).
LOG_VARIANT = 'echo "${LOCKSWAP_MUTEX:-glibc}/${LOCKSWAP_RWLOCK:-glibc}" >> "$0"; echo ops=42'
FAIL_ON_RWSEM = ('echo "ran ${LOCKSWAP_MUTEX}"; echo "last words of the run";'
                 '[ "$LOCKSWAP_MUTEX" = rwsem ] && exit 7; echo ops=42')
METRIC = ["--metric", r"ops=(\d+)"]


def read_lines(path):
    with open(path) as fh:
        return fh.read().split()


def table_rows(stdout):
    """{variant: [n, median, min, max, spread, ratio, verdict...]} from the summary table."""
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


class CompareTest(CliTestCase):
    def compare(self, *args, want_rc=0):
        p = util.run_cli("compare", *args)
        self.assertEqual(p.returncode, want_rc, f"{p.stdout}\n{p.stderr}")
        return p

    def test_help(self):
        out = self.ok("compare", "--help").stdout
        for want in ("usage: lockswap compare", "--variants", "--repeat", "--metric", "--time",
                     "--higher-is-better", "--lower-is-better", "--csv", "--png", "--set", "rotated"):
            self.assertIn(want, out)
        self.assertIn("compare", self.ok("--help").stdout)

    def test_rotation_order(self):
        log = os.path.join(self.tmp, "order.log")
        self.compare("--variants", "futex,rwsem", "--repeat", "3", *METRIC, "--", "sh", "-c", LOG_VARIANT, log)
        g, f, r = "glibc/glibc", "futex/futex", "rwsem/rwsem"
        # glibc added in front as the baseline; repetition r rotates the order by r.
        self.assertEqual(read_lines(log), [g, f, r, f, r, g, r, g, f])

    def test_metric_and_csv(self):
        path = os.path.join(self.tmp, "runs.csv")
        p = self.compare("--variants", "glibc,futex", "--repeat", "2", *METRIC, "--csv", path,
                         "--", "sh", "-c", "echo ops=42")
        self.assertIn("higher is better", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual(rows["glibc"][:4], ["2", "42", "42", "42"])
        self.assertEqual(rows["futex"][5], "1.000")
        with open(path) as fh:
            recs = list(csv.DictReader(fh))
        runs = [r for r in recs if r["record"] == "run"]
        self.assertEqual([(r["variant"], r["rep"], r["position"]) for r in runs],
                         [("glibc", "1", "1"), ("futex", "1", "2"), ("futex", "2", "1"), ("glibc", "2", "2")])
        self.assertTrue(all(r["status"] == "ok" and r["exit_status"] == "0" and float(r["value"]) == 42
                            for r in runs))
        summary = {r["variant"]: r for r in recs if r["record"] == "summary"}
        self.assertEqual(set(summary), {"glibc", "futex"})
        self.assertEqual((summary["futex"]["n"], float(summary["futex"]["median"]),
                          float(summary["futex"]["ratio"])), ("2", 42.0, 1.0))
        self.assertIn("[1/4] glibc rep 1 ... 42", p.stderr)   # progress, one line per run
        self.assertIn("[4/4] glibc rep 2 ... 42", p.stderr)

    def test_time_metric(self):
        p = self.compare("--variants", "futex", "--repeat", "1", "--time", "--", "sleep", "0.05")
        self.assertIn("wall time (s), lower is better", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual(set(rows), {"glibc", "futex"})
        self.assertGreater(float(rows["futex"][1]), 0.0)

    def test_failed_runs_reported(self):
        p = self.compare("--variants", "futex,rwsem", "--repeat", "2", *METRIC,
                         "--", "sh", "-c", FAIL_ON_RWSEM, want_rc=1)
        self.assertIn("2 of 6 runs failed", p.stdout)
        self.assertIn("rwsem rep 1: exit status 7", p.stdout)
        self.assertIn("| last words of the run", p.stdout)
        self.assertIn("| ran rwsem", p.stdout)
        rows = table_rows(p.stdout)
        self.assertEqual(rows["rwsem"][:1] + rows["rwsem"][-1:], ["0", "2"])  # n=0, failed=2
        self.assertEqual(rows["futex"][0], "2")
        self.assertIn("FAILED: exit status 7", p.stderr)

    def test_metric_not_found(self):
        p = self.compare("--variants", "futex", "--repeat", "1", "--metric", r"tps=(\d+)",
                         "--", "sh", "-c", "echo ops=1", want_rc=1)
        self.assertIn("not found in the output", p.stdout)
        self.assertIn("| ops=1", p.stdout)

    def test_baseline_rules(self):
        p = self.compare("--variants", "futex,rwsem", "--no-glibc", "--repeat", "1", *METRIC,
                         "--lower-is-better", "--", "sh", "-c", "echo ops=3")
        self.assertIn("glibc excluded", p.stdout)
        self.assertIn("median(futex)", p.stdout)
        self.assertIn("lower is better", p.stdout)
        self.assertNotIn("glibc", table_rows(p.stdout))
        p = self.compare("--variants", "futex", "--repeat", "1", *METRIC, "--", "sh", "-c", "echo ops=3")
        self.assertIn("baseline: glibc (added", p.stdout)

    def test_settings_reach_the_command(self):
        p = self.compare("--variants", "rwsem", "--repeat", "1", "--set", "RWSEM_SPIN=0",
                         "--metric", r"spin=(\d+)", "--", "sh", "-c", 'echo "spin=1${LOCKSWAP_RWSEM_SPIN}"')
        self.assertEqual(table_rows(p.stdout)["rwsem"][1], "10")

    def test_bad_variant_stops_before_running(self):
        log = os.path.join(self.tmp, "order.log")
        p = self.compare("--variants", "nope", "--", "sh", "-c", LOG_VARIANT, log, want_rc=2)
        self.assertIn("unknown", p.stderr)
        self.assertFalse(os.path.exists(log))

    def test_usage_errors(self):
        self.assertIn("no command given", self.compare("--variants", "futex", want_rc=2).stderr)
        self.assertIn("not allowed with", self.compare("--time", "--metric", "x", "--", "true", want_rc=2).stderr)

    def test_png(self):
        png = os.path.join(self.tmp, "cmp.png")
        p = self.compare("--variants", "futex", "--repeat", "2", *METRIC, "--png", png,
                         "--", "sh", "-c", "echo ops=5")
        self.assert_png(png, p.stderr)


if __name__ == "__main__":
    util.main()
