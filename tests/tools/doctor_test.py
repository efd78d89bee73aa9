#!/usr/bin/env python3
"""tests/tools/doctor_test.py — lockswap_cli.doctor's warnings from given
facts (the machine these tests run on has whatever facts it has), and its
host checks, --json, --summary, --run and audit records against made-up
/sys and /proc trees (--root): every missing source reads "not available"."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from lockswap_cli import doctor as lockswap_doctor  # tools/ on PYTHONPATH (tests/tools/CMakeLists.txt)

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


DOCTOR = ["-m", "lockswap_cli", "doctor"]   # as `lockswap doctor` runs it


class HostChecksTest(unittest.TestCase):
    """The checks beyond the probe, each from a made-up tree under a temporary root."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="lockswap-doctor-")
        self.root = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def put(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)

    def checks(self, before=None, after=None):
        h = lockswap_doctor.Host(self.root)
        st = lockswap_doctor.host_state(h)
        return {c["name"]: c for c in lockswap_doctor.host_checks(h, before or st, after or st)}

    def test_nothing_there_is_not_available_never_a_crash(self):
        got = self.checks()
        self.assertEqual(set(got), {"governor", "turbo", "clock spread", "isolated CPUs", "SMT", "virtualisation",
                                    "thermal throttling", "kernel messages"})
        for name, c in got.items():
            self.assertEqual(c["state"], "n/a", name)
            self.assertTrue(c["detail"].startswith("not available ("), c["detail"])
        line = lockswap_doctor.summary_line(lockswap_doctor.Host(self.root))
        self.assertTrue(line.startswith("host checks: governor n/a, turbo n/a, clock n/a"), line)
        self.assertNotRegex(line, r"\S! |\S!,")   # no check flagged

    def test_governor_and_turbo(self):
        self.put("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance\n")
        self.put("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n")
        self.put("sys/devices/system/cpu/intel_pstate/no_turbo", "0\n")
        got = self.checks()
        self.assertEqual(got["governor"]["state"], "warn")
        self.assertIn("powersave on CPUs 1", got["governor"]["advice"])
        self.assertIn("cpupower frequency-set -g performance", got["governor"]["advice"])
        self.assertEqual((got["turbo"]["state"], got["turbo"]["value"]), ("warn", "on"))
        self.assertIn("no_turbo", got["turbo"]["advice"])
        self.put("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "performance\n")
        self.put("sys/devices/system/cpu/intel_pstate/no_turbo", "1\n")
        got = self.checks()
        self.assertEqual((got["governor"]["state"], got["turbo"]["state"]), ("ok", "ok"))
        os.remove(os.path.join(self.root, "sys/devices/system/cpu/intel_pstate/no_turbo"))
        self.put("sys/devices/system/cpu/cpufreq/boost", "1\n")
        self.assertEqual(self.checks()["turbo"]["state"], "warn")

    def test_clock_spread(self):
        self.put("sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "1200000\n")
        self.put("sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq", "3400000\n")
        c = self.checks()["clock spread"]
        self.assertEqual((c["state"], c["value"]), ("warn", "1200-3400MHz"))
        self.assertIn("ranged 1200-3400 MHz", c["advice"])
        # /proc/cpuinfo when there is no cpufreq: steady clocks are fine, and the source is named.
        self._tmp.cleanup()
        os.makedirs(self.root)
        self.put("proc/cpuinfo", "processor\t: 0\ncpu MHz\t\t: 2096.0\nflags\t\t: fpu\n\n"
                                 "processor\t: 1\ncpu MHz\t\t: 2096.1\nflags\t\t: fpu\n")
        c = self.checks()["clock spread"]
        self.assertEqual(c["state"], "ok")
        self.assertIn("/proc/cpuinfo", c["detail"])
        samples = [{0: 2000.0, 1: 2000.0}, {0: 2600.0, 1: 2000.0}]   # sampled while the probe ran
        self.assertEqual(lockswap_doctor.check_freq_spread(samples, "scaling_cur_freq")["state"], "warn")

    def test_isolation(self):
        self.put("proc/cmdline", "quiet isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3\n")
        self.put("sys/devices/system/cpu/isolated", "2-3\n")
        c = self.checks()["isolated CPUs"]
        self.assertEqual(c["state"], "warn")
        self.assertEqual(c["value"], "isolcpus=2-3 nohz_full=2-3 rcu_nocbs=2-3")
        self.assertIn("taskset", c["advice"])
        self.put("proc/cmdline", "quiet\n")
        self.put("sys/devices/system/cpu/isolated", "\n")
        self.assertEqual(self.checks()["isolated CPUs"]["value"], "none")

    def test_smt_siblings(self):
        self.put("sys/devices/system/cpu/smt/active", "1\n")
        for cpu, sib in ((0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")):
            self.put(f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", sib + "\n")
        c = self.checks()["SMT"]
        self.assertEqual(c["state"], "warn")
        self.assertIn("siblings 0,2 1,3", c["advice"])
        for cpu in range(4):
            self.put(f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", f"{cpu}\n")
        self.put("sys/devices/system/cpu/smt/active", "0\n")
        self.assertEqual(self.checks()["SMT"]["state"], "ok")

    def test_virtualisation_without_systemd(self):
        self.put("proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu hypervisor sse\n")
        self.put("sys/class/dmi/id/sys_vendor", "QEMU\n")
        c = self.checks()["virtualisation"]
        self.assertEqual(c["state"], "warn")
        self.assertIn("a hypervisor (QEMU) (cpuinfo flag)", c["value"])
        self.put("proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu sse\n")
        self.put("sys/class/dmi/id/sys_vendor", "Dell Inc.\n")
        self.assertEqual(self.checks()["virtualisation"]["value"], "bare metal")

    def test_throttle_and_kernel_messages_between_before_and_after(self):
        h = lockswap_doctor.Host(self.root)
        self.put("sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "5\n")
        self.put("sys/devices/system/cpu/cpu0/thermal_throttle/package_throttle_count", "1\n")
        before = lockswap_doctor.host_state(h)
        self.assertEqual(before["throttle_count"], 6)
        self.put("sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "7\n")
        after = lockswap_doctor.host_state(h)
        c = {x["name"]: x for x in lockswap_doctor.host_checks(h, before, after)}["thermal throttling"]
        self.assertEqual((c["state"], c["value"]), ("warn", "2 new"))
        old = ["[1.0] boot", "[2.0] eth0 up"]
        new = old + ["[9.0] oom-kill: task sysbench", "[9.1] Killed process 42"]
        c = lockswap_doctor.check_dmesg(old, new)
        self.assertEqual((c["state"], c["value"]), ("warn", "2 new"))
        self.assertIn("oom-kill", c["advice"])
        self.assertEqual(lockswap_doctor.check_dmesg(old, old)["state"], "ok")
        self.assertEqual(lockswap_doctor.check_dmesg(new[2:], new)["value"], "0 new")   # rotated buffer
        self.assertEqual(lockswap_doctor.check_dmesg(None, None, "dmesg is not readable (x)")["detail"],
                         "not available (dmesg is not readable (x))")

    def test_context_switches(self):
        self.assertEqual(lockswap_doctor.rusage_check(10, 5, 1.0, 2)["state"], "ok")
        c = lockswap_doctor.rusage_check(10, 5000, 1.0, 2)
        self.assertEqual(c["state"], "warn")
        self.assertIn("preempted 5000 times", c["advice"])

    def doctor(self, *args):
        return subprocess.run([sys.executable, *DOCTOR, "--root", self.root, *args], capture_output=True, text=True,
                              timeout=60)

    def test_run_json_and_summary(self):
        p = self.doctor("--run", "--json", "--", "sh", "-c", "sleep 0.05; exit 3")
        self.assertEqual(p.returncode, 3, p.stderr)
        got = json.loads(p.stdout)
        names = [c["name"] for c in got["host_checks"]]
        self.assertEqual(names[-1], "context switches")
        self.assertGreaterEqual(got["host_checks"][-1]["value"].count("vol"), 2)
        self.assertEqual(got["exit_status"], 3)
        p = self.doctor("--summary")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith("host checks: governor n/a"), p.stdout)

    def test_probe_json(self):
        probe = os.path.join(self.root, "lockswap-probe")
        with open(probe, "w") as fh:
            fh.write("#!/bin/sh\ncat <<'EOF'\n" + QUIET + "EOF\n")
        os.chmod(probe, 0o755)
        p = self.doctor("--probe", probe, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        got = json.loads(p.stdout)
        self.assertEqual(got["facts"]["cpus_allowed"], "2")
        self.assertEqual(len(got["host_checks"]), 8)
        self.assertEqual(got["warnings"], [])
        p = self.doctor("--probe", probe)
        self.assertIn("host checks:", p.stdout)
        self.assertIn("governor            n/a   not available (", p.stdout)

    def test_audit_record(self):
        path = os.path.join(self.root, "audit.json")
        self.put("sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "1\n")
        lib = os.path.join(self.root, "liblockswap.so.1.2.3")
        self.put("liblockswap.so.1.2.3", "")
        p = self.doctor("--audit-begin", path, "--lib", lib, "--setting", "variants=none,glibc,rwsem",
                        "--", "bash", "demo.sh", "--quick")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.put("sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "4\n")
        p = self.doctor("--audit-end", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(path) as fh:
            rec = json.load(fh)
        self.assertEqual(rec["command"], ["bash", "demo.sh", "--quick"])
        self.assertEqual(rec["lockswap"]["version"], "1.2.3")
        self.assertEqual(rec["settings"], {"variants": "none,glibc,rwsem"})
        self.assertEqual((rec["before"]["throttle_count"], rec["after"]["throttle_count"]), (1, 4))
        self.assertEqual({c["name"]: c["value"] for c in rec["checks"]}["thermal throttling"], "3 new")
        self.assertTrue(any("throttled for heat 3 times" in w for w in rec["warnings"]))
        self.assertNotIn("_kernel_log", rec)
        self.assertNotEqual(self.doctor("--audit-end", os.path.join(self.root, "none.json")).returncode, 0)


if __name__ == "__main__":
    unittest.main()
