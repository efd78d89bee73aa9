#!/usr/bin/env python3
"""lockswap_doctor — `lockswap doctor`: what this machine will do to lock
benchmark results, in plain words (docs/measuring.md, "Before measuring").

Runs `lockswap-probe facts` (about a second), prints the facts and a warning
for every class of result the machine will distort, then the host checks
beyond the probe: CPU frequency governor, turbo/boost, the clock spread while
the probe ran, isolated CPUs (isolcpus, nohz_full, rcu_nocbs), SMT siblings,
virtualisation, thermal throttling and kernel messages during the probe. A
check whose source is missing reads "not available (why)". Standard library
only.

  --json             everything as one JSON object
  --summary          the one-line summary of the host checks (no probe; what
                     the tables' headers carry)
  --run -- CMD...    the host checks around CMD instead of the probe, and
                     CMD's voluntary / involuntary context switches
  --audit-begin FILE [--lib L] [--source DIR] [--setting K=V]... -- CMD...
  --audit-end FILE   the per-run audit record (JSON): host before and after,
                     the exact command, lockswap's version, commit, settings

Exit status: 0 (warnings included), 1 when the probe is missing or fails
(--run: CMD's own status).
"""
import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

from .stats import PROBE_TOLERANCE  # c2c samples further apart mean "moving"

# The directory holding this package: tools/ in the source tree, <libexec>/lockswap built or installed.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SLOW_C2C_NS = 1000         # a round trip above this: cross-socket, or a host that parks vCPUs
WAKE_ON_WAKER_PCT = 50     # above this, woken waiters queue behind their waker
STEAL_PCT = 3.0
LOAD_BUSY = 0.5
SLOW_CLOCK_NS = 100        # clock_gettime above this: no vDSO fast clock
SLOW_WAKE_US = 30          # mean wake-up latency above this: the idle CPU is slow to run a woken thread
SPREAD_SHARE = 0.75        # sleep/wake threads using less than this share of the CPUs: the scheduler packs


def run_probe(probe):
    try:
        pr = subprocess.run([probe, "facts"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        sys.exit(f"lockswap doctor: cannot run {probe}: {e}")
    if pr.returncode != 0:
        sys.exit(f"lockswap doctor: {probe} facts failed: {pr.stderr.strip()}")
    return parse_facts(pr.stdout)


def parse_facts(text):
    """key=value lines, plus `c2c pair=A,B pass=P ns=N` and `wake`, `wake_remote`, `spread` k=v records."""
    facts = {"c2c": {}, "wake": None, "wake_remote": None, "spread": None, "sched_boot_options": "none"}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] in ("c2c", "wake", "wake_remote", "spread"):
            rec = dict(w.split("=", 1) for w in words[1:])
            if words[0] == "c2c":
                facts["c2c"].setdefault(rec["pair"], []).append(int(rec["ns"]))
            else:
                facts[words[0]] = rec
        else:
            k, _, v = line.partition("=")
            facts[k] = v
    return facts


def c2c_lines(facts):
    out = []
    for pair, samples in facts["c2c"].items():
        good = [s for s in samples if s > 0]
        out.append(f"  CPUs {pair}: " + " ".join(f"{s} ns" if s else "no result" for s in samples)
                   + (" (moving)" if moving(good) else ""))
    return out


def moving(samples):
    return len(samples) >= 2 and max(samples) / min(samples) > PROBE_TOLERANCE


def describe(facts):
    out = ["lockswap doctor: what this machine does to lock benchmarks", ""]
    out.append(f"CPUs usable: {facts['cpus_allowed']} of {facts['cpus_online']} online ({facts['cpu_list']})")
    topo = {"none": "not exposed (the scheduler sees every CPU as equally far)",
            "private": "exposed, no cache shared between CPUs",
            "shared": "exposed, caches shared between CPUs"}.get(facts["topology"], facts["topology"])
    out.append(f"cache topology: {topo}")
    out.append(f"clock: {facts['clocksource']}, clock_gettime {facts['clock_gettime_ns']} ns per call")
    if facts["c2c"]:
        out.append("core-to-core round trip (median, three samples ~0.3 s apart):")
        out += c2c_lines(facts)
    w = facts["wake"]
    if w:
        out.append(f"wake placement: {w['on_waker_pct']}% of {w['samples']} futex wake-ups ran on the busy "
                   f"waker's CPU; wake latency mean {w['mean_us']} us, max {w['max_us']} us"
                   + (f"; {w['lost']} took over 50 ms" if w["lost"] != "0" else ""))
    wr = facts["wake_remote"]
    if wr:
        out.append(f"wake-up sent to another CPU: mean {wr['idle_mean_us']} us when it idles, "
                   f"{wr['busy_mean_us']} us when an idle-priority thread keeps it running")
    sp = facts["spread"]
    if sp:
        out.append(f"spread: {sp['runnable']} runnable threads that sleep and wake in turn used {sp['cpus_used']} "
                   f"of {facts['cpus_allowed']} CPUs")
    out.append("scheduler boot options: " + facts["sched_boot_options"].replace("(patched)", " (not in upstream Linux)"))
    out.append(f"steal: {facts['steal_pct']}% of CPU time during the probe")
    out.append(f"load average: {facts['load_before']} before, {facts['load_after']} after")
    out.append(f"eBPF (for --oncpu, LOCKSWAP_ONCPU=bpf): {facts['ebpf']}")
    return out


def warnings(facts):
    """(what, why) pairs in plain language."""
    w = []
    cpus = int(facts["cpus_allowed"])
    load = max(float(facts["load_before"]), float(facts["load_after"]))
    if cpus < 2:
        w.append("one usable CPU: every contended cell measures the scheduler (a lock holder is always "
                 "preempted, never running beside a waiter); spinning cannot pay and no variant comparison "
                 "under contention means anything here.")
    samples = [s for ss in facts["c2c"].values() for s in ss if s > 0]
    if any(moving([s for s in ss if s > 0]) for ss in facts["c2c"].values()):
        w.append(f"the core-to-core round trip moved by more than {PROBE_TOLERANCE}x within a second "
                 f"({min(samples)}-{max(samples)} ns): the host moves the vCPUs. A long run lands in either "
                 "mode for every lock, glibc included; compare only short interleaved rounds guarded by "
                 "`lockswap-probe c2c` before and after (run_matrix.py and scripts/speedcheck.sh do).")
    elif samples and len(facts["c2c"]) > 1 and max(samples) / min(samples) > PROBE_TOLERANCE:
        w.append(f"CPU pairs differ in round trip ({min(samples)}-{max(samples)} ns): SMT siblings, "
                 "sockets or NUMA nodes. Results depend on which CPUs the threads land on; pin or say which.")
    if samples and max(samples) > SLOW_C2C_NS:
        w.append(f"a core-to-core round trip above {SLOW_C2C_NS} ns: handing a lock between CPUs is slow "
                 "here, which favours locks that keep it on one CPU (spinning owners, unfair handoff).")
    wake = facts["wake"]
    if wake and cpus >= 2:
        if load > cpus - 1 + LOAD_BUSY:
            w.append("the wake placement probe needs an idle CPU and none was idle (load average "
                     f"{load:g} on {cpus} CPUs): its figure says nothing; run doctor on a quiet machine.")
        elif float(wake["on_waker_pct"]) > WAKE_ON_WAKER_PCT:
            w.append(f"{wake['on_waker_pct']}% of wake-ups were placed on the busy waker's CPU while another "
                     "CPU was idle: a woken lock waiter queues behind the thread that woke it. Oversubscribed "
                     "and sleep-heavy cells (more threads than CPUs, semaphore ping-pong) say as much about "
                     "the scheduler as about the lock.")
        elif float(wake["mean_us"]) > SLOW_WAKE_US:
            w.append(f"a woken thread took {wake['mean_us']} us on average to start on the idle CPU: "
                     + slow_wake_cause(facts["wake_remote"]) + " Every hand-off to a sleeping waiter on another "
                     "CPU pays that, so sleep-heavy cells favour locks whose waiters poll, and a CPU sits idle "
                     "while the woken thread is on its way.")
    sp = facts["spread"]
    if sp and cpus >= 2 and load <= LOAD_BUSY and float(sp["cpus_used"]) < SPREAD_SHARE * cpus:
        w.append(f"{sp['runnable']} runnable threads that sleep and wake in turn kept only {sp['cpus_used']} of "
                 f"{cpus} CPUs busy: the scheduler packs threads onto fewer CPUs. Oversubscribed cells measure "
                 "that many CPUs' worth of work, for every lock whose waiters sleep.")
    patched = [o for o in facts["sched_boot_options"].split() if o.endswith("(patched)")]
    if patched:
        w.append(f"the kernel was booted with scheduler options upstream Linux does not have "
                 f"({', '.join(o[:-len('(patched)')] for o in patched)}): thread placement follows a patched "
                 "scheduler, so placement-sensitive results (oversubscribed, sleep-heavy cells) may not carry "
                 "over to a stock kernel.")
    if facts["topology"] == "none" and cpus >= 2:
        w.append("no cache topology is exposed: the scheduler cannot prefer near CPUs (wake-up placement, "
                 "load balancing); results will not carry over to hardware that exposes it.")
    if float(facts["steal_pct"]) > STEAL_PCT:
        w.append(f"{facts['steal_pct']}% of CPU time was stolen by the host during the probe: other guests "
                 "compete for the physical CPUs; every timing is noisy, lock holders get preempted.")
    if load > LOAD_BUSY:
        w.append(f"load average {load:g}: other work is running. Timings compete with it; use interleaved "
                 "rounds and read the intervals, or wait for a quiet machine.")
    if float(facts["clock_gettime_ns"]) > SLOW_CLOCK_NS:
        w.append(f"clock_gettime costs {facts['clock_gettime_ns']} ns ({facts['clocksource']}): benchmarks "
                 "that time each acquisition (wait latencies) add that much to every operation.")
    if not facts["ebpf"].startswith("yes"):
        w.append(f"eBPF is unavailable ({facts['ebpf'][3:].strip(' ()') or 'unknown'}): the --oncpu / "
                 "LOCKSWAP_ONCPU=bpf column cannot run here.")
    return w


# ---------------------------------------------------------------- host checks
# Each check: {"name", "state": ok | warn | n/a, "value" (short, for the summary line), "detail",
# "advice" (what to do, for a warning)}. Paths are read under `root` (tests give a made-up tree).

FREQ_SPREAD = 1.10         # clocks further apart than this during a probe: frequency scaling at work
CPU_SYS = "sys/devices/system/cpu"


class Host:
    """Reads the host's files under `root`; commands (systemd-detect-virt, dmesg) only for the real /."""

    def __init__(self, root="/", run_commands=None):
        self.root = root
        self.run_commands = (root == "/") if run_commands is None else run_commands

    def path(self, rel):
        return os.path.join(self.root, rel.lstrip("/"))

    def read(self, rel):
        return self.read_abs(self.path(rel))

    @staticmethod
    def read_abs(path):
        try:
            with open(path) as fh:
                return fh.read().strip()
        except OSError:
            return None

    def glob(self, pattern):
        return sorted(glob.glob(self.path(pattern)))

    def command(self, argv, timeout=5):
        """(returncode, stdout) or None when not run or not runnable."""
        if not self.run_commands or shutil.which(argv[0]) is None:
            return None
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.returncode, p.stdout

    def cpu_of(self, path):
        m = re.search(r"/cpu(\d+)/", path)
        return int(m.group(1)) if m else -1


def cpu_list(text):
    """'0-3,6' -> [0, 1, 2, 3, 6]; '' or None -> []."""
    out = []
    for part in (text or "").replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        try:
            out += list(range(int(a), int(b or a) + 1))
        except ValueError:
            continue
    return out


def check(name, state, value, detail, advice=""):
    return {"name": name, "state": state, "value": value, "detail": detail, "advice": advice}


def na(name, why):
    return check(name, "n/a", "n/a", f"not available ({why})")


def check_governor(h):
    govs = {}
    for f in h.glob(f"{CPU_SYS}/cpu[0-9]*/cpufreq/scaling_governor"):
        g = h.read_abs(f)
        if g:
            govs.setdefault(g, []).append(h.cpu_of(f))
    if not govs:
        why = ("no cpufreq driver: /sys/devices/system/cpu/cpu*/cpufreq is missing or empty, as in most VMs and "
               "containers, where the host sets the clock")
        return na("governor", why)
    value = ",".join(sorted(govs))
    if set(govs) == {"performance"}:
        return check("governor", "ok", value, "frequency governor: performance on every CPU")
    others = "; ".join(f"{g} on CPUs {','.join(map(str, sorted(c)))}" for g, c in sorted(govs.items()))
    return check("governor", "warn", value, f"frequency governor: {others}",
                 f"the CPU frequency governor is not `performance` ({others}): the clock follows the load, so "
                 "a run's first milliseconds and locks whose waiters sleep (the CPU idles, the clock drops) run "
                 "slower than spinning ones for reasons that are not the lock. Do: `cpupower frequency-set -g "
                 "performance` (or write performance to /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor) "
                 "for the measurement.")


def check_turbo(h):
    no_turbo = h.read(f"{CPU_SYS}/intel_pstate/no_turbo")
    boost = h.read(f"{CPU_SYS}/cpufreq/boost")
    if no_turbo is not None:
        on, src = no_turbo.strip() == "0", "intel_pstate/no_turbo=" + no_turbo.strip()
        how = "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo"
    elif boost is not None:
        on, src = boost.strip() == "1", "cpufreq/boost=" + boost.strip()
        how = "echo 0 > /sys/devices/system/cpu/cpufreq/boost"
    else:
        return na("turbo", "neither /sys/devices/system/cpu/intel_pstate/no_turbo nor cpufreq/boost exists: "
                           "no frequency driver exposed here")
    if not on:
        return check("turbo", "ok", "off", f"turbo/boost off ({src})")
    return check("turbo", "warn", "on", f"turbo/boost on ({src})",
                 f"turbo/boost is on ({src}): the clock depends on how many cores are busy and on temperature, so "
                 "a variant that keeps fewer cores busy (sleeping waiters) gets a faster clock, and a long run "
                 f"slows as the chip warms. Do: `{how}` for the measurement (undo it after).")


def freq_sample(h):
    """{cpu: MHz} now, and its source: scaling_cur_freq, else /proc/cpuinfo's cpu MHz."""
    mhz = {}
    for f in h.glob(f"{CPU_SYS}/cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            with open(f) as fh:
                mhz[h.cpu_of(f)] = int(fh.read().strip()) / 1000.0
        except (OSError, ValueError):
            continue
    if mhz:
        return mhz, "scaling_cur_freq"
    info = h.read("proc/cpuinfo") or ""
    cpu = None
    for line in info.splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k == "processor":
            cpu = int(v.strip()) if v.strip().isdigit() else None
        elif k == "cpu MHz" and cpu is not None:
            try:
                mhz[cpu] = float(v.strip())
            except ValueError:
                pass
    return (mhz, "/proc/cpuinfo") if mhz else ({}, None)


class FreqSampler:
    """Samples the CPU clocks every `interval` s in a thread while something runs (the probe, --run)."""

    def __init__(self, h, interval=0.1):
        self.h, self.interval, self.samples, self.source = h, interval, [], None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while True:
            mhz, src = freq_sample(self.h)
            if mhz:
                self.samples.append(mhz)
                self.source = src
            if self._stop.wait(self.interval):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def check_freq_spread(samples, source):
    vals = [m for s in samples for m in s.values() if m > 0]
    if not vals:
        return na("clock spread", "no scaling_cur_freq and no `cpu MHz` in /proc/cpuinfo")
    lo, hi = min(vals), max(vals)
    note = " (/proc/cpuinfo: under a hypervisor this may be the nominal clock, not the real one)" \
        if source == "/proc/cpuinfo" else ""
    value = f"{lo:.0f}-{hi:.0f}MHz" if hi > lo else f"{lo:.0f}MHz"
    detail = f"CPU clock {lo:.0f} to {hi:.0f} MHz over {len(samples)} samples ({source}){note}"
    if hi / lo <= FREQ_SPREAD:
        return check("clock spread", "ok", value, detail)
    return check("clock spread", "warn", value, detail,
                 f"the CPU clocks ranged {lo:.0f}-{hi:.0f} MHz ({hi / lo:.2f}x) while the probe ran: frequency "
                 "scaling or turbo moves the clock under the benchmark, so the same code runs at different "
                 "speeds from run to run and CPU to CPU. Do: the performance governor and turbo off (see those "
                 "checks), or at least interleaved rounds (lockswap compare) so every variant sees the same mix.")


def check_isolation(h):
    cmdline = h.read("proc/cmdline")
    words = {}
    for w in (cmdline or "").split():
        k, eq, v = w.partition("=")
        if eq and k in ("isolcpus", "nohz_full", "rcu_nocbs"):
            words[k] = v
    isolated = cpu_list(h.read(f"{CPU_SYS}/isolated"))
    nohz = cpu_list(h.read(f"{CPU_SYS}/nohz_full")) if h.read(f"{CPU_SYS}/nohz_full") not in (None, "(null)") else []
    if cmdline is None and h.read(f"{CPU_SYS}/isolated") is None:
        return na("isolated CPUs", "neither /proc/cmdline nor /sys/devices/system/cpu/isolated is readable")
    parts = [f"{k}={v}" for k, v in words.items()]
    if isolated and "isolcpus" not in words:
        parts.append(f"isolated={','.join(map(str, isolated))}")
    if nohz and "nohz_full" not in words:
        parts.append(f"nohz_full={','.join(map(str, nohz))}")
    if not parts:
        return check("isolated CPUs", "ok", "none",
                     "no isolcpus, nohz_full or rcu_nocbs: every CPU also runs the system's own work")
    value = " ".join(parts)
    if not isolated and not nohz:
        return check("isolated CPUs", "ok", value, f"boot options {value}, no CPU isolated now")
    return check("isolated CPUs", "warn", value, f"isolated CPUs: {value}",
                 f"CPUs are set apart ({value}): the scheduler never moves a thread onto an isolated CPU, so a "
                 "benchmark that is not pinned runs on the others only (fewer CPUs than `nproc` suggests), and "
                 "one pinned there is never balanced. Pin the benchmark (taskset -c LIST) onto the CPUs you mean "
                 "and say which in the results.")


def check_smt(h):
    active = h.read(f"{CPU_SYS}/smt/active")
    sib = {}
    for f in h.glob(f"{CPU_SYS}/cpu[0-9]*/topology/thread_siblings_list"):
        try:
            with open(f) as fh:
                sib[h.cpu_of(f)] = cpu_list(fh.read())
        except OSError:
            continue
    groups = sorted({tuple(v) for v in sib.values() if len(v) > 1})
    if active is None and not sib:
        return na("SMT", "no /sys/devices/system/cpu/smt/active and no topology/thread_siblings_list")
    try:
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(sib)
    except OSError:
        allowed = set(sib)
    shared = [g for g in groups if len(set(g) & set(allowed)) > 1] if "/" == h.root else groups
    if not groups:
        state = "off" if active in (None, "0") else "on (no sibling among the online CPUs)"
        return check("SMT", "ok", "off" if active in (None, "0") else "on",
                     f"SMT {state}: every usable CPU is a core of its own")
    text = " ".join(",".join(map(str, g)) for g in groups)
    if not shared:
        return check("SMT", "ok", "on", f"SMT on (siblings {text}), but no two usable CPUs share a core")
    return check("SMT", "warn", "on", f"SMT on: sibling threads {text}",
                 f"SMT is on and usable CPUs share a core (siblings {text}): two threads there share the "
                 "core's execution units and L1 cache, so a lock handed between siblings looks far cheaper "
                 "(and contended spinning far costlier) than between cores. Pin one thread per core, or turn "
                 "SMT off for the run (echo off > /sys/devices/system/cpu/smt/control), and say which.")


def check_virt(h):
    vm = container = None
    r = h.command(["systemd-detect-virt", "--vm"])
    how = "systemd-detect-virt"
    if r is not None:
        vm = r[1].strip() or "none"
        c = h.command(["systemd-detect-virt", "--container"])
        container = (c[1].strip() or "none") if c else None
    else:
        how = "/proc/cpuinfo, DMI"
        info = h.read("proc/cpuinfo")
        vendor = h.read("sys/class/dmi/id/sys_vendor")
        flags = next((l for l in (info or "").splitlines() if l.startswith("flags")), "")
        if info is None and vendor is None:
            return na("virtualisation", "no systemd-detect-virt, /proc/cpuinfo or /sys/class/dmi/id/sys_vendor")
        if " hypervisor" in flags:
            vm = "a hypervisor" + (f" ({vendor})" if vendor else "") + " (cpuinfo flag)"
        elif vendor and re.search(r"QEMU|KVM|VMware|Xen|Microsoft|Amazon EC2|Google|innotek|Parallels", vendor, re.I):
            vm = vendor
        else:
            vm = "none"
    value = vm if vm != "none" else "bare metal"
    if container and container != "none":
        value += f" (container {container})"
    if vm == "none":
        return check("virtualisation", "ok", value, f"no hypervisor ({how})"
                     + (f"; in a {container} container" if container and container != "none" else ""))
    return check("virtualisation", "warn", value, f"virtual machine: {value} ({how})",
                 f"this is a virtual machine ({value}): the host may move or park the vCPUs, steal time and "
                 "deliver wake-ups slowly, so placement-sensitive results (hand-offs between CPUs, sleeping "
                 "waiters) need not carry over to bare metal. Compare only interleaved, probe-guarded rounds "
                 "(lockswap compare, the runners) and say it ran in a VM.")


def throttle_counts(h):
    """Sum of cpu*/thermal_throttle/*_throttle_count, or None without the counters."""
    files = h.glob(f"{CPU_SYS}/cpu[0-9]*/thermal_throttle/*_throttle_count")
    total, seen = 0, False
    for f in files:
        try:
            with open(f) as fh:
                total += int(fh.read().strip())
                seen = True
        except (OSError, ValueError):
            continue
    return total if seen else None


def check_throttle(before, after):
    if before is None or after is None:
        return na("thermal throttling", "no /sys/devices/system/cpu/cpu*/thermal_throttle counters (not an "
                                        "Intel CPU, or a VM)")
    delta = after - before
    if delta <= 0:
        return check("thermal throttling", "ok", "0 new", f"thermal throttle events: none new ({after} since boot)")
    return check("thermal throttling", "warn", f"{delta} new", f"thermal throttle events: {delta} new",
                 f"the CPUs were throttled for heat {delta} times during the measurement: the clock dropped "
                 "under the benchmark, so later runs are slower for reasons that are not the lock. Cool the "
                 "machine, turn turbo off, or leave pauses between runs; interleaved rounds share the harm out.")


def kernel_log(h):
    """The kernel ring buffer's lines (dmesg), or (None, why) when unreadable."""
    r = h.command(["dmesg"])
    if r is None:
        return None, "dmesg is not installed" if h.run_commands else "not read here"
    if r[0] != 0:
        return None, "dmesg is not readable (kernel.dmesg_restrict, or not root)"
    return r[1].splitlines(), None


def new_lines(before, after):
    """The lines of `after` past the end of `before` (the ring buffer may have rotated)."""
    if not before:
        return list(after)
    last = before[-1]
    for i in range(len(after) - 1, -1, -1):
        if after[i] == last:
            return after[i + 1:]
    return list(after)


def check_dmesg(before, after, why=None):
    if before is None or after is None:
        return na("kernel messages", why or "dmesg unreadable")
    new = new_lines(before, after)
    if not new:
        return check("kernel messages", "ok", "0 new", "kernel messages: none new during the measurement")
    tail = " | ".join(l.strip()[:160] for l in new[-3:])
    return check("kernel messages", "warn", f"{len(new)} new", f"kernel messages: {len(new)} new; last: {tail}",
                 f"the kernel logged {len(new)} new messages during the measurement (last: {tail}): a crash, an "
                 "OOM kill, a hung task, a throttle or a clocksource change alters the run. Read them (`dmesg`) "
                 "before trusting the figures.")


def rusage_check(nvcsw, nivcsw, wall_s, cpus):
    """The measured program's context switches (getrusage of it and the children it waited for)."""
    value = f"{nvcsw} vol / {nivcsw} invol"
    detail = (f"context switches of the command: {nvcsw} voluntary (it waited: a lock, I/O, sleep), {nivcsw} "
              f"involuntary (preempted) in {wall_s:.2f} s")
    per_s = nivcsw / wall_s / max(cpus, 1) if wall_s > 0 else 0
    if per_s <= 100:
        return check("context switches", "ok", value, detail)
    return check("context switches", "warn", value, detail,
                 f"the command was preempted {nivcsw} times ({per_s:.0f} per CPU-second): other work or more "
                 "runnable threads than CPUs took its CPUs, so lock holders were descheduled mid-section and "
                 "every lock looks worse than it is. Quiet the machine or use fewer threads.")


def host_state(h):
    """What can change during a run: throttle counters, the kernel log, the clocks, the load."""
    log, why = kernel_log(h)
    mhz, src = freq_sample(h)
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = None
    return {"time": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "loadavg": load,
            "throttle_count": throttle_counts(h), "kernel_log": log, "kernel_log_why": why,
            "freq_mhz": mhz, "freq_source": src}


def host_checks(h, before, after, samples=None, source=None):
    """Every host check, the measurement between the states `before` and `after`."""
    if samples is None:
        samples, source = [s for s in (before["freq_mhz"], after["freq_mhz"]) if s], \
            before["freq_source"] or after["freq_source"]
    return [check_governor(h), check_turbo(h), check_freq_spread(samples, source), check_isolation(h),
            check_smt(h), check_virt(h), check_throttle(before["throttle_count"], after["throttle_count"]),
            check_dmesg(before["kernel_log"], after["kernel_log"], before["kernel_log_why"])]


def summary_line(h=None):
    """`host checks: governor ..., turbo ..., ...` for every table header: the checks read once, no probe."""
    h = h or Host()
    st = host_state(h)
    checks = host_checks(h, st, st)
    short = {"governor": "governor", "turbo": "turbo", "clock spread": "clock", "isolated CPUs": "isolated",
             "SMT": "SMT", "virtualisation": "virt", "thermal throttling": "throttle",
             "kernel messages": "dmesg"}
    parts = []
    for c in checks:
        if c["name"] in ("thermal throttling", "kernel messages"):
            v = ("n/a" if c["state"] == "n/a" else
                 f"{st['throttle_count']} since boot" if c["name"] == "thermal throttling" else "readable")
        else:
            v = c["value"]
        parts.append(f"{short[c['name']]} {v}" + ("!" if c["state"] == "warn" else ""))
    return "host checks: " + ", ".join(parts) + " (lockswap doctor explains; ! = a warning)"


def print_checks(checks):
    out = ["", "host checks:"]
    for c in checks:
        out.append(f"  {c['name']:<19} {c['state']:<5} {c['detail']}")
    return out


# ----------------------------------------------------------------- audit file

def lockswap_identity(lib=None, source=None):
    """lockswap's version (the library file's soname version, else CMakeLists.txt's) and commit."""
    source = os.path.realpath(source or build_source(lib) or os.path.dirname(PACKAGE_PARENT))
    ident = {"library": None, "version": None, "commit": None, "dirty": None, "source": source}
    if lib:
        real = os.path.realpath(lib)
        ident["library"] = real
        m = re.search(r"\.so\.(\d+(?:\.\d+)*)$", real)
        ident["version"] = m.group(1) if m else None
    if ident["version"] is None:
        try:
            with open(os.path.join(source, "CMakeLists.txt")) as fh:
                m = re.search(r"project\(lockswap VERSION ([0-9.]+)", fh.read())
                ident["version"] = m.group(1) if m else None
        except OSError:
            pass
    if shutil.which("git") and os.path.isdir(source):
        try:
            p = subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
            if p.returncode == 0:
                ident["commit"] = p.stdout.strip()
                d = subprocess.run(["git", "-C", source, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=20)
                ident["dirty"] = bool(d.stdout.strip()) if d.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            pass
    return ident


def build_source(lib):
    """The source tree of the build tree holding LIB (its CMakeCache.txt's lockswap_SOURCE_DIR), or None."""
    d = os.path.dirname(os.path.realpath(lib)) if lib else None
    for _ in range(4):
        if not d:
            return None
        try:
            with open(os.path.join(d, "CMakeCache.txt")) as fh:
                m = re.search(r"^lockswap_SOURCE_DIR:STATIC=(.*)$", fh.read(), re.M)
            return m.group(1) if m else None
        except OSError:
            d = os.path.dirname(d)
    return None


def _state_for_file(st):
    log = st["kernel_log"]
    out = {k: v for k, v in st.items() if k != "kernel_log"}
    out["kernel_log_lines"] = None if log is None else len(log)
    out["kernel_log_last"] = None if log is None else log[-5:]
    return out


def audit_begin(path, command, settings=None, lib=None, source=None, h=None):
    """Writes the audit record's first half: the command, lockswap, settings, the host before."""
    h = h or Host()
    st = host_state(h)
    rec = {"audit": 1, "command": list(command), "cwd": os.getcwd(), "lockswap": lockswap_identity(lib, source),
           "settings": settings or {},
           "environment": {k: v for k, v in os.environ.items() if k.startswith("LOCKSWAP_") or k == "LD_PRELOAD"},
           "host": {"uname": " ".join(os.uname()), "cpus": os.cpu_count()},
           "before": _state_for_file(st), "before_checks": host_checks(h, st, st),
           "_kernel_log": st["kernel_log"]}
    with open(path, "w") as fh:
        json.dump(rec, fh, indent=1)
        fh.write("\n")


def audit_end(path, h=None):
    """Adds the host after, and what changed (throttling, kernel messages, clocks)."""
    h = h or Host()
    with open(path) as fh:
        rec = json.load(fh)
    if rec.get("audit") != 1:
        raise ValueError("not an audit record of lockswap doctor")
    st = host_state(h)
    before = {"throttle_count": rec["before"]["throttle_count"], "kernel_log": rec.pop("_kernel_log", None),
              "kernel_log_why": rec["before"].get("kernel_log_why"), "freq_mhz": rec["before"]["freq_mhz"],
              "freq_source": rec["before"]["freq_source"]}
    checks = host_checks(h, before, st)
    rec.update(after=_state_for_file(st), checks=checks,
               warnings=[c["advice"] for c in checks if c["state"] == "warn"])
    with open(path, "w") as fh:
        json.dump(rec, fh, indent=1)
        fh.write("\n")


def run_command(cmd, h):
    """--run: the host checks around CMD and its context switches; returns (checks, status)."""
    before = host_state(h)
    start = time.monotonic()
    with FreqSampler(h) as fs:
        try:
            proc = subprocess.Popen(cmd)
        except OSError as e:
            sys.exit(f"lockswap doctor: cannot run {cmd[0]}: {e.strerror}")
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    after = host_state(h)
    checks = host_checks(h, before, after, fs.samples, fs.source)
    checks.append(rusage_check(ru.ru_nvcsw, ru.ru_nivcsw, wall, len(os.sched_getaffinity(0))))
    return checks, proc.returncode, wall


def slow_wake_cause(remote):
    """Why a wake-up onto an idle CPU is slow, from the same wake-up sent to a busy CPU."""
    if not remote:
        return "that CPU is slow to resume (deep idle states, or a host slow to wake or deliver to a vCPU)."
    if float(remote["busy_mean_us"]) > SLOW_WAKE_US:
        return (f"the host is slow to deliver a wake-up to another vCPU ({remote['busy_mean_us']} us even "
                "when that CPU is running), so no guest setting removes it.")
    return (f"the idle CPU is slow to leave its idle state (a wake-up to it took {remote['idle_mean_us']} us, "
            f"to a running one {remote['busy_mean_us']} us): deep C-states or a host that deschedules halted "
            "vCPUs. Keeping CPUs out of deep idle for the run (`cpupower idle-set -D 0`, holding "
            "/dev/cpu_dma_latency at 0) removes it, for every lock alike.")


def doctor_parser(make=argparse.ArgumentParser):
    """The options of `lockswap doctor`; MAKE builds the parser (main.py: a subparser)."""
    p = make(prog="lockswap doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--probe", help="the lockswap-probe binary (default: next to this program's wrapper)")
    p.add_argument("--facts", action="store_true", help="print the probe's raw key=value facts only")
    p.add_argument("--json", action="store_true", help="the facts, host checks and warnings as JSON")
    p.add_argument("--summary", action="store_true", help="the one-line host summary only (no probe)")
    p.add_argument("--run", action="store_true", help="the host checks around the command after -- "
                                                      "(and its context switches) instead of the probe")
    p.add_argument("--audit-begin", metavar="FILE", help="write the audit record's first half (command after --)")
    p.add_argument("--audit-end", metavar="FILE", help="complete the audit record FILE")
    p.add_argument("--lib", help="the liblockswap.so of the audited runs (its version)")
    p.add_argument("--source", help="lockswap's source tree (its commit; default: the one holding this file)")
    p.add_argument("--setting", action="append", default=[], metavar="K=V", help="a setting of the audited runs")
    p.add_argument("--root", default="/", help=argparse.SUPPRESS)   # tests: a made-up /sys and /proc
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def cmd_doctor(a, p):
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    h = Host(a.root)
    if a.summary:
        print(summary_line(h))
        return 0
    if a.audit_begin:
        audit_begin(a.audit_begin, cmd, dict(s.partition("=")[::2] for s in a.setting), a.lib, a.source, h)
        return 0
    if a.audit_end:
        try:
            audit_end(a.audit_end, h)
        except (OSError, ValueError) as e:
            sys.exit(f"lockswap doctor: --audit-end {a.audit_end}: {e}")
        return 0
    if a.run:
        if not cmd:
            p.error("--run needs a command after --")
        checks, rc, wall = run_command(cmd, h)
        ws = [c["advice"] for c in checks if c["state"] == "warn"]
        if a.json:
            print(json.dumps({"command": cmd, "exit_status": rc, "wall_s": wall, "host_checks": checks,
                              "warnings": ws}, indent=1))
        else:
            print(f"lockswap doctor: {' '.join(cmd)}: exit status {rc}, {wall:.2f} s")
            print_warnings(print_checks(checks), ws)
        return rc
    probe = a.probe or os.path.join(PACKAGE_PARENT, "lockswap-probe")
    if a.facts:
        os.execv(probe, [probe, "facts"])
    before = host_state(h)
    with FreqSampler(h) as fs:
        facts = run_probe(probe)
    checks = host_checks(h, before, host_state(h), fs.samples, fs.source)
    ws = warnings(facts) + [c["advice"] for c in checks if c["state"] == "warn"]
    if a.json:
        print(json.dumps({"facts": facts, "host_checks": checks, "warnings": ws}, indent=1))
        return 0
    print_warnings(describe(facts) + print_checks(checks), ws)
    return 0


def print_warnings(lines, ws):
    for line in lines:
        print(line)
    print()
    print(f"warnings: {len(ws)}" if ws else "warnings: none (nothing here distorts lock benchmarks)")
    for i, text in enumerate(ws, 1):
        print(f"{i}. {text}")

