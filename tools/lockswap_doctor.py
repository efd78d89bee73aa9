#!/usr/bin/env python3
"""lockswap_doctor — `lockswap doctor`: what this machine will do to lock
benchmark results, in plain words (docs/measuring.md, "Before measuring").

Runs `lockswap-probe facts` (about a second), prints the facts and a warning
for every class of result the machine will distort. Standard library only.
Exit status: 0 (warnings included), 1 when the probe is missing or fails.
"""
import argparse
import os
import subprocess
import sys

PROBE_TOLERANCE = 1.5      # lockswap_stats.PROBE_TOLERANCE: c2c samples further apart mean "moving"
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


def main(argv):
    p = argparse.ArgumentParser(prog="lockswap doctor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--probe", help="the lockswap-probe binary (default: next to this program's wrapper)")
    p.add_argument("--facts", action="store_true", help="print the probe's raw key=value facts only")
    a = p.parse_args(argv)
    probe = a.probe or os.path.join(os.path.dirname(os.path.abspath(__file__)), "lockswap-probe")
    if a.facts:
        os.execv(probe, [probe, "facts"])
    facts = run_probe(probe)
    for line in describe(facts):
        print(line)
    ws = warnings(facts)
    print()
    print(f"warnings: {len(ws)}" if ws else "warnings: none (nothing here distorts lock benchmarks)")
    for i, text in enumerate(ws, 1):
        print(f"{i}. {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
