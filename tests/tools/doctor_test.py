#!/usr/bin/env python3
"""tests/tools/doctor_test.py — lockswap_doctor's warnings from given
facts (the machine these tests run on has whatever facts it has)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import lockswap_doctor  # noqa: E402

QUIET = """cpus_online=2
cpus_allowed=2
cpu_list=0,1
topology=shared
clocksource=tsc
clock_gettime_ns=20.0
c2c pair=0,1 pass=0 ns=100
c2c pair=0,1 pass=1 ns=104
c2c pair=0,1 pass=2 ns=98
wake samples=40 lost=0 on_waker_pct=10 mean_us=20.0 max_us=40.0
wake_remote samples=40 idle_mean_us=20.0 busy_mean_us=4.0
spread runnable=4 cpus_used=1.97
sched_boot_options=isolcpus=3
steal_pct=0.0
load_before=0.05
load_after=0.10
ebpf=yes
"""


def warnings_for(text, **changes):
    for k, v in changes.items():
        text = "\n".join(f"{k}={v}" if line.startswith(k + "=") else line for line in text.splitlines())
    return "\n".join(lockswap_doctor.warnings(lockswap_doctor.parse_facts(text)))


class DoctorTest(unittest.TestCase):
    def test_quiet_machine_has_no_warning(self):
        self.assertEqual(warnings_for(QUIET), "")

    def test_moving_round_trip(self):
        text = QUIET.replace("pass=1 ns=104", "pass=1 ns=700")
        self.assertIn("moved", warnings_for(text))
        self.assertIn("short interleaved rounds", warnings_for(text))

    def test_wake_on_waker(self):
        text = QUIET.replace("on_waker_pct=10", "on_waker_pct=96")
        self.assertIn("queues behind the thread that woke it", warnings_for(text))

    def test_wake_figure_void_without_an_idle_cpu(self):
        w = warnings_for(QUIET.replace("on_waker_pct=10", "on_waker_pct=96"), load_before="3.0")
        self.assertIn("says nothing", w)
        self.assertNotIn("queues behind", w)

    def test_slow_idle_wake_up(self):
        slow = QUIET.replace("mean_us=20.0 max", "mean_us=68.2 max")
        quiet, busy = warnings_for(slow), warnings_for(slow, load_before="3.0")
        self.assertIn("took 68.2 us on average to start on the idle CPU", quiet)
        self.assertNotIn("queues behind", quiet)
        self.assertNotIn("to start on the idle CPU", busy, "the probe had no idle CPU: its figure says nothing")

    def test_slow_wake_up_named_by_its_cause(self):
        slow = QUIET.replace("mean_us=20.0 max", "mean_us=70.0 max")
        deep_idle = warnings_for(slow.replace("idle_mean_us=20.0", "idle_mean_us=70.0"))
        self.assertIn("slow to leave its idle state", deep_idle)
        self.assertIn("cpupower idle-set -D 0", deep_idle)
        host = warnings_for(slow.replace("busy_mean_us=4.0", "busy_mean_us=52.0"))
        self.assertIn("slow to deliver a wake-up to another vCPU (52.0 us", host)
        self.assertNotIn("cpupower", host)
        older = warnings_for("\n".join(l for l in slow.splitlines() if not l.startswith("wake_remote")))
        self.assertIn("slow to resume", older)

    def test_packing_scheduler(self):
        packed = QUIET.replace("cpus_used=1.97", "cpus_used=1.06")
        self.assertIn("kept only 1.06 of 2 CPUs busy", warnings_for(packed))
        self.assertNotIn("kept only", warnings_for(packed, load_before="1.5"))

    def test_patched_scheduler_option(self):
        w = warnings_for(QUIET, sched_boot_options="sched_vcpu_pack=15(patched) nohz_full=1")
        self.assertIn("upstream Linux does not have (sched_vcpu_pack=15)", w)
        self.assertNotIn("nohz_full", w)

    def test_facts_of_an_older_probe(self):
        text = "\n".join(l for l in QUIET.splitlines() if not l.startswith(("spread", "sched_boot")))
        self.assertEqual(warnings_for(text), "")

    def test_single_cpu(self):
        text = "\n".join(l for l in QUIET.splitlines() if not l.startswith(("c2c", "wake")))
        self.assertIn("one usable CPU", warnings_for(text, cpus_allowed="1", cpu_list="0"))

    def test_steal_load_topology_clock_ebpf(self):
        w = warnings_for(QUIET, steal_pct="7.5", load_before="1.2", topology="none", clock_gettime_ns="400.0",
                         ebpf="no (not root)")
        for words in ("stolen", "load average 1.2", "no cache topology", "clock_gettime costs", "not root"):
            self.assertIn(words, w)


if __name__ == "__main__":
    unittest.main()
