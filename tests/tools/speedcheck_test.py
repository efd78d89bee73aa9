#!/usr/bin/env python3
"""tests/tools/speedcheck_test.py — the speed regression check's reference
per placement mode (examples/bench/speedcheck.py), the mode of a set of
rounds and the one round loop (tools/lockswap_cli/stats.py) as the benchmark
drivers use it (examples/bench/bench_common.py), from given results and
scripted probes: nothing is timed."""
import contextlib
import io
import json
import os
import tempfile
import types
import unittest

# tools/ and examples/bench/ on PYTHONPATH (tests/tools/CMakeLists.txt)
import bench_common
import speedcheck
from lockswap_cli import stats as lockswap_stats

SLOW_ENV = "env: cpus=2 topology=none c2c_ns=455 load=0.50 steal_pct=0.0 ebpf=yes"
FAST_ENV = "env: cpus=2 topology=none c2c_ns=75 load=0.50 steal_pct=0.0 ebpf=yes"


def timed(speed, lo, hi, placement):
    return speedcheck.timed_entry(speed, lo, hi, "no significant difference", "6/6", placement)


def report_text(results, ref, env_line):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        changes = speedcheck.report(results, ref, env_line, 1.0)
    return changes, out.getvalue()


class PlacementTest(unittest.TestCase):
    def test_mode_of_a_round_trip(self):
        self.assertEqual(lockswap_stats.placement_mode(75), "fast")
        self.assertEqual(lockswap_stats.placement_mode(455), "slow")
        self.assertIsNone(lockswap_stats.placement_mode(None))

    def test_a_geometric_mean_needs_every_cell(self):
        self.assertAlmostEqual(bench_common.geomean([1.0, 4.0]), 2.0)
        self.assertIsNone(bench_common.geomean([1.3, None]), "a cell without a ratio: no mean of the rest")
        self.assertIsNone(bench_common.geomean([]))

    def test_mode_of_rounds_is_the_majority(self):
        self.assertEqual(lockswap_stats.rounds_mode([70, 80, 450]), "fast")
        self.assertEqual(lockswap_stats.rounds_mode([70, 450]), "slow")  # a tie counts as slow
        self.assertIsNone(lockswap_stats.rounds_mode([None, None]))


class RoundLoopTest(unittest.TestCase):
    """Probe readings are scripted: a pair further apart than PROBE_TOLERANCE
    is a placement change, and its round is dropped and run again."""

    def run_rounds(self, readings, want, max_rounds, mode=None, wait_s=0, poll_s=0):
        """wait_s: how long a round waits for `mode` (0: it starts at once); poll_s: between polls."""
        script, order = iter(readings), []
        saved = lockswap_stats.probe_c2c, lockswap_stats.MODE_WAIT_S, lockswap_stats.MODE_POLL_S
        lockswap_stats.probe_c2c = lambda probe: next(script)
        lockswap_stats.MODE_WAIT_S, lockswap_stats.MODE_POLL_S = wait_s, poll_s
        try:
            rounds = bench_common.Rounds(["a", "b", "c"]).run(lambda v: order.append(v) or v.upper(),
                                                               "probe", want, max_rounds, mode=mode)
        finally:
            lockswap_stats.probe_c2c, lockswap_stats.MODE_WAIT_S, lockswap_stats.MODE_POLL_S = saved
        return rounds, order

    def test_order_rotates_and_every_round_runs_every_variant(self):
        rounds, order = self.run_rounds([100, 100] * 3, want=3, max_rounds=6)
        self.assertEqual(order, ["a", "b", "c", "b", "c", "a", "c", "a", "b"])
        self.assertEqual(rounds.kept, [{"a": "A", "b": "B", "c": "C"}] * 3)
        self.assertEqual((rounds.started, rounds.dropped, rounds.steady), (3, 0, [True] * 3))

    def test_a_round_across_a_placement_change_is_dropped_and_run_again(self):
        rounds, _ = self.run_rounds([100, 100, 100, 450, 450, 450, 450, 450], want=3, max_rounds=6)
        self.assertEqual((rounds.started, rounds.dropped, len(rounds.kept)), (4, 1, 3))
        self.assertEqual(rounds.steady, [True, False, True, True])
        self.assertEqual(rounds.c2c, [100, 450, 450])
        self.assertEqual(rounds.placement(), "slow")

    def test_a_round_of_the_other_mode_is_dropped_when_one_mode_is_asked(self):
        # steady slow, steady fast, a fast/slow pair straddling the threshold, steady fast
        readings = [450, 450, 90, 90, 180, 210, 95, 95]
        rounds, _ = self.run_rounds(readings, want=2, max_rounds=4, mode="fast")
        self.assertEqual(rounds.steady, [False, True, False, True])
        self.assertEqual((rounds.c2c, rounds.placement()), ([90, 95], "fast"))
        rounds, _ = self.run_rounds(readings, want=2, max_rounds=4)
        self.assertEqual(rounds.steady, [True, True])
        self.assertEqual(rounds.placement(), "slow")  # one of each: a tie counts as slow

    def test_a_round_waits_for_the_mode_asked(self):
        # slow, slow, then fast: the round starts at the first fast reading
        rounds, order = self.run_rounds([450, 460, 90, 95], want=1, max_rounds=1, mode="fast", wait_s=60)
        self.assertEqual((rounds.started, rounds.steady, rounds.c2c), (1, [True], [92.5]))
        self.assertEqual(order, ["a", "b", "c"])

    def test_a_round_that_waited_in_vain_runs_and_is_dropped(self):
        rounds, order = self.run_rounds(iter(lambda: 450, None), want=1, max_rounds=1, mode="fast",
                                        wait_s=0.02, poll_s=0.005)
        self.assertEqual((rounds.started, rounds.dropped, rounds.kept), (1, 1, []))
        self.assertEqual(order, ["a", "b", "c"])

    def test_without_a_mode_a_round_does_not_wait(self):
        rounds, _ = self.run_rounds([450, 450], want=1, max_rounds=1, wait_s=60)
        self.assertEqual((rounds.started, rounds.c2c), (1, [450]))

    def test_max_rounds_bounds_the_reruns(self):
        rounds, _ = self.run_rounds([100, 450] * 4, want=3, max_rounds=4)
        self.assertEqual((rounds.started, rounds.dropped, len(rounds.kept)), (4, 4, 0))
        self.assertEqual(rounds.kept_text(), "0/4")


class ReferenceTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "ref.json")
        self.args = types.SimpleNamespace(reference=self.path, parts=["sysbench", "instr"], quick=False)

    def tearDown(self):
        self.dir.cleanup()

    def test_one_mode_file_reads_as_its_env_mode(self):
        with open(self.path, "w") as f:
            json.dump({"env": SLOW_ENV, "date": "2026-12-02", "parts": ["instr", "sysbench"],
                       "results": {"instr mutex rwsem": {"instr": 43.0},
                                   "sysbench mutex t2 rwsem": timed(1.4, 1.2, 1.6, None)}}, f)
        ref = speedcheck.load_reference(self.path)
        self.assertEqual(ref["instr"], {"instr mutex rwsem": {"instr": 43.0}})
        self.assertEqual(list(ref["modes"]), ["slow"])
        self.assertIn("sysbench mutex t2 rwsem", ref["modes"]["slow"]["results"])

    def test_each_cell_is_written_to_and_compared_with_its_own_mode(self):
        speedcheck.write_reference(self.args, None, {"sysbench mutex t2 rwsem": timed(1.4, 1.2, 1.6, "slow"),
                                                     "instr mutex rwsem": {"instr": 43.0}}, SLOW_ENV)
        ref = speedcheck.load_reference(self.path)
        fast = {"sysbench mutex t2 rwsem": timed(0.4, 0.35, 0.5, "fast")}
        changes, text = report_text(fast, ref, FAST_ENV)
        self.assertEqual(changes, 0, text)  # no fast-mode reference: nothing to compare
        self.assertIn("1 timed line(s) ran in the fast placement mode", text)

        speedcheck.write_reference(self.args, ref, fast, FAST_ENV)
        ref = speedcheck.load_reference(self.path)
        self.assertEqual(sorted(ref["modes"]), ["fast", "slow"])
        self.assertEqual(ref["modes"]["slow"]["results"]["sysbench mutex t2 rwsem"]["speed"], 1.4)
        self.assertEqual(ref["instr"]["instr mutex rwsem"]["instr"], 43.0)
        changes, text = report_text({"sysbench mutex t2 rwsem": timed(1.0, 0.9, 1.1, "slow")}, ref, SLOW_ENV)
        self.assertEqual(changes, 1, text)  # 1.4 lies outside [0.9, 1.1]
        changes, text = report_text({"sysbench mutex t2 rwsem": timed(0.45, 0.38, 0.52, "fast")}, ref, SLOW_ENV)
        self.assertEqual(changes, 0, text)  # the fast reference, 0.4, lies inside

    def test_a_cell_without_probe_takes_the_run_mode(self):
        entry = timed(1.0, 0.9, 1.1, None)
        self.assertEqual(speedcheck.entry_mode(entry, FAST_ENV), "fast")
        self.assertEqual(speedcheck.entry_mode(entry, "env: cpus=1"), "slow")


if __name__ == "__main__":
    unittest.main()
